package sandbox

import (
	"io/fs"
	"os"
	"testing"
)

func TestWantsFolios(t *testing.T) {
	t.Parallel()
	const big, small = largeTemplate, largeTemplate - 1
	for _, c := range []struct {
		name        string
		anon        uint64
		folios, thp string // "" : the file is missing
		want        bool
	}{
		{"large, folios off", big, "always inherit madvise [never]", "always [madvise] never", true},
		{"small, folios off", small, "always inherit madvise [never]", "always [madvise] never", false},
		{"large, folios on", big, "[always] inherit madvise never", "always [madvise] never", false},
		{"large, folios only where advised", big, "always inherit [madvise] never", "always [madvise] never", true},
		{"large, inherited from huge pages always", big, "always [inherit] madvise never", "[always] madvise never", false},
		{"large, inherited from huge pages where advised", big, "always [inherit] madvise never", "always [madvise] never", true},
		{"large, a kernel without them", big, "", "always [madvise] never", false},
		{"large, inherit but no huge pages switch", big, "always [inherit] madvise never", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{foliosKnob: c.folios, hugeKnob: c.thp}
			read := func(name string) ([]byte, error) {
				if files[name] == "" {
					return nil, fs.ErrNotExist
				}
				return []byte(files[name] + "\n"), nil
			}
			if got := wantsFolios(c.anon, read); got != c.want {
				t.Errorf("wantsFolios(%d) = %v, want %v", c.anon, got, c.want)
			}
		})
	}
}

func TestAnonymousBytes(t *testing.T) {
	t.Parallel()
	// This process's heap is resident anonymous memory: some, far from all of it.
	got, err := anonymousBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got < 1<<20 || got > 64<<30 {
		t.Errorf("RssAnon of the test process = %d bytes", got)
	}
	if _, err := anonymousBytes(-1); err == nil {
		t.Errorf("a pid that cannot exist: err = %v", err)
	}
}
