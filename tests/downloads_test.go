package tests

import (
	"crypto/sha256"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"testing"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// TestProgramFilesAreDownloads: a file a program left (f.html, here) is
// served as an attachment, with nosniff and a sandboxing CSP, from both
// download routes: a browser that opens the URL saves it rather than running
// it as a page of the server's origin. The type and bytes stay as they were.
func TestProgramFilesAreDownloads(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	const page = "<script>alert(document.domain)</script>"
	p := h.run(fmt.Sprintf("import os\nos.makedirs('out')\nopen('out/f.html', 'w').write(%q)", page), nil)
	if p.exit() != "success" {
		t.Fatalf("run: %s/%s %s", p.exit(), p.reason(), p.Stderr)
	}
	s := h.newSession(map[string]any{})
	if q := h.run(fmt.Sprintf("open('f.html', 'w').write(%q)", page), session(s.ID)); q.exit() != "success" {
		t.Fatalf("session run: %s/%s %s", q.exit(), q.reason(), q.Stderr)
	}
	for _, route := range []string{fmt.Sprintf("/processes/%d/files/out%%2Ff.html", p.PID), "/sessions/" + s.ID + "/files/f.html"} {
		st, hdr, b := h.raw("GET", route, "", nil)
		if st != http.StatusOK || string(b) != page || hdr.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("%s: %d %s %q", route, st, hdr.Get("Content-Type"), b)
		}
		disp, params, err := mime.ParseMediaType(hdr.Get("Content-Disposition"))
		if err != nil || disp != "attachment" || params["filename"] != "f.html" {
			t.Errorf("%s: Content-Disposition %q", route, hdr.Get("Content-Disposition"))
		}
		if hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("Content-Security-Policy") != "default-src 'none'; sandbox" {
			t.Errorf("%s: X-Content-Type-Options %q, Content-Security-Policy %q", route, hdr.Get("X-Content-Type-Options"), hdr.Get("Content-Security-Policy"))
		}
	}
}

// TestLargeProcessFileDownloads: a one-shot program's 12 MiB file (more
// than the 8 MiB a process kept before) is kept and downloads whole, with
// its Content-Length, the same bytes the program wrote; on PostgreSQL too.
func TestLargeProcessFileDownloads(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			var env []string
			if db == "postgres" {
				env = []string{"CYRNEL_DB_URL=" + pgtest.Schema(t, pgtest.URL(t)), "CYRNEL_SECRETS_KEY=" + newSecretsKey(t)}
			}
			h := start(t, "", env...)
			code := "import hashlib, os\n" +
				"data = b''.join(hashlib.sha256(str(i).encode()).digest() for i in range(12 << 15))\n" +
				"os.makedirs('out')\nopen('out/big.bin', 'wb').write(data)\nprint(len(data), hashlib.sha256(data).hexdigest())"
			p := h.run(code, nil)
			if p.exit() != "success" || p.OutputTruncated {
				t.Fatalf("run: %s/%s truncated %v %s", p.exit(), p.reason(), p.OutputTruncated, p.Stderr)
			}
			st, hdr, b := h.raw("GET", fmt.Sprintf("/processes/%d/files/out%%2Fbig.bin", p.PID), "", nil)
			sum := sha256.Sum256(b)
			if got := fmt.Sprintf("%d %x\n", len(b), sum); st != http.StatusOK || got != p.Stdout || hdr.Get("Content-Length") != strconv.Itoa(12<<20) {
				t.Fatalf("download: %d, %q (Content-Length %s), the program wrote %q", st, got, hdr.Get("Content-Length"), p.Stdout)
			}
		})
	}
}
