package sandbox

import (
	"bytes"
	"fmt"
	"os"

	"github.com/prometheus/procfs"
)

// A program forked from a template copies the page-table entries of every
// page the template holds and drops them at its exit. With 4 kB pages that
// is a third of a pandas execution's CPU; the kernel's 64 kB anonymous
// folios let a fork and an exit handle 16 entries at once. It is a setting
// of the whole machine, left to the operator (docs/operating.md, "Large
// preloads and the kernel"): a large template says when it is off.

// largeTemplate is the anonymous memory from which the advice is logged: a
// pandas template holds ~41 MiB, the default one ~10.
const largeTemplate = 32 << 20

// The kernel's switches: 64 kB anonymous folios, and the transparent huge
// pages' one that an "inherit" there follows.
const (
	foliosKnob = "/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled"
	hugeKnob   = "/sys/kernel/mm/transparent_hugepage/enabled"
)

// adviseFolios logs, once the template is warm, that its programs would
// fork and exit for less with the 64 kB folios on.
func (t *Template) adviseFolios() {
	if anon, err := anonymousBytes(t.Pid()); err == nil && wantsFolios(anon, os.ReadFile) {
		t.logger.Info("template is large: its programs' forks and exits cost less with the kernel's 64 kB folios on "+
			`(docs/operating.md, "Large preloads and the kernel")`, "anonymousMiB", anon>>20, "knob", foliosKnob)
	}
}

// wantsFolios: a template holding anon bytes would gain from the 64 kB
// folios, and the kernel has them but off.
func wantsFolios(anon uint64, read func(string) ([]byte, error)) bool {
	if anon < largeTemplate {
		return false
	}
	on, known := foliosOn(read)
	return known && !on
}

// foliosOn says whether new anonymous memory gets 64 kB folios without
// advice, and whether the kernel says at all (a kernel before 6.8 has no
// such switch).
func foliosOn(read func(string) ([]byte, error)) (on, known bool) {
	b, err := read(foliosKnob)
	if err != nil {
		return false, false
	}
	switch chosen(b) {
	case "always":
		return true, true
	case "inherit":
		top, err := read(hugeKnob)
		if err != nil {
			return false, false
		}
		return chosen(top) == "always", true
	}
	return false, true
}

// FolioSetting is the 64 kB folio switch's choice ("never", "always",
// "inherit", "madvise"), or why it cannot be read: it moves what every fork
// costs, so benchmarks log it.
func FolioSetting() string {
	b, err := os.ReadFile(foliosKnob)
	if err != nil {
		return err.Error()
	}
	return chosen(b)
}

// chosen is the bracketed choice of a sysfs switch ("always [madvise] never").
func chosen(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte("["))
	if !ok {
		return ""
	}
	c, _, _ := bytes.Cut(rest, []byte("]"))
	return string(c)
}

// anonymousBytes is a process's resident anonymous memory (RssAnon).
func anonymousBytes(pid int) (uint64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("sandbox: process %d: %w", pid, err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, fmt.Errorf("sandbox: status of %d: %w", pid, err)
	}
	return st.RssAnon, nil
}
