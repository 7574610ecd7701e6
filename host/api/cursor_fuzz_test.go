package api

import (
	"strings"
	"testing"
)

// FuzzDecodeCursor: cursors come from clients, so any string must decode to
// a positive pid or an error, and every cursor the API hands out must decode
// to the pid it was made from.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("", int64(1))
	f.Add(encodeCursor(42), int64(9223372036854775807))
	f.Add("cDA", int64(7))
	f.Add("%%%", int64(3))
	f.Fuzz(func(t *testing.T, c string, pid int64) {
		if got, err := decodeCursor(c); err == nil && c != "" && got < 1 {
			t.Fatalf("cursor %q decoded to pid %d", c, got)
		}
		if pid < 1 {
			return
		}
		got, err := decodeCursor(encodeCursor(pid))
		if err != nil || got != pid {
			t.Fatalf("cursor of pid %d decoded to %d, %v", pid, got, err)
		}
	})
}

// FuzzDecodeToolCursor: any string decodes to a service id and tool id or is
// refused; a decoded cursor never has an empty service.
func FuzzDecodeToolCursor(f *testing.F) {
	f.Add("")
	f.Add("cGV0c3RvcmUAc2hvd1BldEJ5SWQ")
	f.Add("AA")
	f.Fuzz(func(t *testing.T, c string) {
		k, ok := decodeToolCursor(c)
		if !ok || c == "" {
			return
		}
		if k[0] == "" || strings.ContainsRune(k[0], 0) {
			t.Fatalf("cursor %q decoded to service %q", c, k[0])
		}
	})
}
