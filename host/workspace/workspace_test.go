package workspace

import (
	"errors"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/schema"
)

func TestValidPath(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "data/in.csv", "a b/c.d", "é/ü.txt", ".hidden", "a..b"} {
		if err := ValidPath("f", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "..", "../x", "a/../../x", "a/./b", "a//b", "a/", "a\x00b", "a\nb", `a\b`, "\xff", strings.Repeat("a", MaxPath+1)} {
		err := ValidPath("body.files[0].path", bad)
		var fe *schema.FieldError
		if !errors.As(err, &fe) || fe.Field != "body.files[0].path" {
			t.Errorf("%q: %v, want a FieldError naming the field", bad, err)
		}
	}
}
