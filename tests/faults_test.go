package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusesToStart runs the binary on dataDir and returns what it said; the
// test fails unless it exits non-zero within 30s.
func refusesToStart(t *testing.T, dataDir string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("want the server to refuse to start, got %v:\n%s", err, out)
	}
	return string(out)
}

// TestSecretsKeyLoss: with secrets stored, a removed secrets.key stops the
// start naming the file (no new key is made, which would open nothing), and
// so does a wrong key; the control: the right key restored, the server
// starts and the service still has its secret.
func TestSecretsKeyLoss(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "secrets.key")
	h := start(t, dir)
	if st, _ := h.do("POST", "/services", map[string]any{
		"id": "petstore", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
	}, nil); st != http.StatusCreated {
		t.Fatalf("import: %d", st)
	}
	if st, _ := h.do("PUT", "/services/petstore/secrets", map[string]any{"api_key": "sekret"}, nil); st != http.StatusOK {
		t.Fatalf("set secrets: %d", st)
	}
	h.stop()
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	out := refusesToStart(t, dir)
	if !strings.Contains(out, keyFile) || !strings.Contains(out, "missing") {
		t.Fatalf("the refusal does not name the missing key file %s:\n%s", keyFile, out)
	}
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Fatalf("a new key file was made: %v", err)
	}

	wrong := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n"
	if err := os.WriteFile(keyFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := refusesToStart(t, dir); !strings.Contains(out, keyFile) || !strings.Contains(out, "cannot open") {
		t.Fatalf("the refusal does not say the key file %s opens nothing:\n%s", keyFile, out)
	}

	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	h = start(t, dir)
	var svc struct {
		SecretsSet []string `json:"secretsSet"`
	}
	if st, _ := h.do("GET", "/services/petstore", nil, &svc); st != http.StatusOK || len(svc.SecretsSet) != 1 {
		t.Fatalf("with its key restored the service lost its secret: %d %+v", st, svc)
	}
}

// TestCorruptPage: a host is ready on a sound database (the control); a
// damaged page in it, one no migration reads, is found when the server
// starts, which refuses to run on it, naming the file.
func TestCorruptPage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	for i := 0; i < 20; i++ {
		if p := h.run("print('x' * 20000)", nil); p.exit() != "success" {
			t.Fatalf("run %d: %+v", i, p)
		}
	}
	var ready struct {
		Status string `json:"status"`
	}
	if st, _ := h.do("GET", "/health/ready", nil, &ready); st != http.StatusOK || ready.Status != "ready" {
		t.Fatalf("control: a sound host is not ready: %d %+v", st, ready)
	}
	h.stop()
	db := filepath.Join(dir, "cyrnel.db")
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	// The first bytes of the last pages: the runs' rows and their stdout's
	// overflow pages, whose first bytes point to the next one.
	for off := fi.Size() - 20*4096; off < fi.Size(); off += 4096 {
		if _, err := f.WriteAt([]byte{0xA5, 0xA5, 0xA5, 0xA5}, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := refusesToStart(t, dir)
	if !strings.Contains(out, "corrupt") || !strings.Contains(out, db) {
		t.Fatalf("the refusal does not say %s is corrupt:\n%s", db, out)
	}
}

// TestFullDisk: programs fill a data directory on a small file system. Every
// answer equals the stored row; writes are 507 once there is no room; reads
// work, deletes work and give room back, and writes work again after.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=48m,mode=0700"); err != nil {
		t.Fatalf("a small file system for the data directory (the tests run as root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	h := start(t, dir)
	const fill = "import os\nopen('big.bin', 'wb').write(os.urandom(6 << 20))\nprint('wrote')"
	var kept []int64
	full := false
	for i := 0; i < 20 && !full; i++ {
		var p proc
		st, _ := h.do("POST", "/processes", map[string]any{"code": fill, "waitMs": 30000}, &p)
		switch st {
		case http.StatusCreated:
			var stored proc
			if h.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &stored); stored.exit() != p.exit() || stored.Stdout != p.Stdout || stored.State != p.State {
				t.Fatalf("pid %d answered %s %q, stored %s %q", p.PID, p.exit(), p.Stdout, stored.exit(), stored.Stdout)
			}
			if p.exit() == "success" {
				kept = append(kept, p.PID)
			} else {
				full = true // its result did not fit: stored as the failure it was answered as
			}
		case http.StatusInsufficientStorage:
			full = true
		default:
			t.Fatalf("run %d on a filling disk: %d", i, st)
		}
	}
	if !full || len(kept) == 0 {
		t.Fatalf("the disk never filled (%d kept, %d bytes free)", len(kept), free())
	}
	// Reads still work.
	var list struct {
		Items []proc `json:"items"`
	}
	if st, _ := h.do("GET", "/processes", nil, &list); st != http.StatusOK || len(list.Items) < len(kept) {
		t.Fatalf("reading on a full disk: %d, %d items", st, len(list.Items))
	}
	before := free()
	for _, pid := range kept {
		if st, _ := h.do("DELETE", fmt.Sprintf("/processes/%d", pid), nil, nil); st != http.StatusNoContent {
			t.Fatalf("delete %d on a full disk: %d", pid, st)
		}
	}
	if after := free(); after < before+int64(len(kept))*(5<<20) {
		t.Fatalf("deleting %d processes of 6 MiB freed %d bytes", len(kept), after-before)
	}
	var p proc
	if st, _ := h.do("POST", "/processes", map[string]any{"code": fill, "waitMs": 30000}, &p); st != http.StatusCreated || p.exit() != "success" {
		t.Fatalf("after the deletes a program runs again: %d %+v", st, p)
	}
}

// TestCrashWhilePrinting: a host SIGKILLed while a program prints keeps what
// a client following the program had read, but for the last flush interval
// (a second, process.FlushInterval: what the README tells clients), and the
// next start ends the program host_restart and removes the dead host's
// cgroups.
func TestCrashWhilePrinting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	var p proc
	h.do("POST", "/processes", map[string]any{"code": "import time\nfor i in range(400):\n    print(i, flush=True)\n    time.sleep(0.05)", "timeoutMs": 60000}, &p)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", h.base, p.PID), nil)
	req.Header.Set("Authorization", "Bearer "+h.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type line struct {
		n  int
		at time.Time
	}
	var read []line
	var pending string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && len(read) < 80 {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Text string `json:"text"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) != nil || ev.Text == "" {
			continue
		}
		pending += ev.Text
		for {
			l, rest, ok := strings.Cut(pending, "\n")
			if !ok {
				break
			}
			pending = rest
			if n, err := strconv.Atoi(l); err == nil {
				read = append(read, line{n, time.Now()})
			}
		}
	}
	pid := h.cmd.Process.Pid
	h.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	<-h.exited

	h2 := start(t, dir)
	var after proc
	h2.do("GET", fmt.Sprintf("/processes/%d", p.PID), nil, &after)
	if after.State != "idle" || after.reason() != "host_restart" {
		t.Fatalf("after the restart: %+v", after)
	}
	stored := map[int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(after.Stdout), "\n") {
		if n, err := strconv.Atoi(l); err == nil {
			stored[n] = true
		}
	}
	// What the client had read more than two flush intervals before the
	// kill (one interval, and one for a late tick on a loaded machine) was
	// stored.
	for _, l := range read {
		if killed.Sub(l.at) > 2*time.Second && !stored[l.n] {
			t.Fatalf("line %d, read %v before the crash, is not stored (stored %d lines, read %d)", l.n, killed.Sub(l.at), len(stored), len(read))
		}
	}
	if len(read) < 80 {
		t.Fatalf("control: the client read %d lines before the crash", len(read))
	}
	left, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/cyrnel-sbx-%d-*", pid))
	if len(left) > 0 {
		t.Fatalf("the dead host's cgroups are left after the next start: %v", left)
	}
}
