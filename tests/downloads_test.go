package tests

import (
	"fmt"
	"mime"
	"net/http"
	"testing"
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
