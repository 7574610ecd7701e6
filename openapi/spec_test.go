package openapi

import (
	"bytes"
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/host/api"
)

// TestCommittedSpecMatchesCode fails when the API changed but the committed
// spec was not regenerated with `make openapi`.
func TestCommittedSpecMatchesCode(t *testing.T) {
	for _, c := range []struct {
		file, format string
		v30          bool
	}{
		{"openapi.json", "json", false},
		{"openapi.yaml", "yaml", false},
		{"openapi-3.0.json", "json", true},
	} {
		want, err := api.Spec(c.format, c.v30)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the code generates: run `make openapi`", c.file)
		}
	}
}
