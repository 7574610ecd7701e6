// Package workspace holds the rules for paths in a program's workspace
// (its working directory), shared by sessions and one-shot processes.
package workspace

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/cyrnel/cyrnel/host/schema"
)

// MaxPath bounds a workspace path in bytes.
const MaxPath = 1024

// ValidPath checks a workspace path: relative, segments that are names
// (no "..", ".", empty segments, control characters), at most 1024 bytes.
// field names where it came from, for the problem.
func ValidPath(field, p string) error {
	bad := func(msg string) error { return &schema.FieldError{Field: field, Message: msg} }
	switch {
	case p == "":
		return bad("empty path")
	case len(p) > MaxPath:
		return bad(fmt.Sprintf("longer than %d bytes", MaxPath))
	case strings.HasPrefix(p, "/"):
		return bad("absolute path: paths are relative to the workspace")
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return bad("empty path segment")
		case ".", "..":
			return bad(fmt.Sprintf("%q segment: paths stay inside the workspace", seg))
		}
		if strings.IndexFunc(seg, func(r rune) bool { return unicode.IsControl(r) || r == '\\' || r == unicode.ReplacementChar }) >= 0 {
			return bad("control character, backslash or invalid UTF-8 in the path")
		}
	}
	return nil
}
