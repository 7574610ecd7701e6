package process

import (
	"strings"
	"unicode/utf8"
)

// stream accumulates one output stream: raw bytes decoded as UTF-8 with a
// character split across chunks reassembled, capped at limit bytes.
type stream struct {
	limit     int64
	pending   []byte // an incomplete character at the end of the last chunk
	text      strings.Builder
	size      int64
	truncated bool
}

// write decodes p and returns the text it added (for live followers).
func (s *stream) write(p []byte) string {
	if s.truncated {
		return ""
	}
	if len(s.pending) > 0 {
		p = append(s.pending, p...)
		s.pending = nil
	}
	// Hold back a trailing incomplete character until the next chunk.
	cut := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				cut = i
			}
			break
		}
	}
	if cut < len(p) {
		s.pending = append([]byte(nil), p[cut:]...)
		p = p[:cut]
	}
	return s.add(p)
}

// flush ends the stream: a dangling partial character becomes U+FFFD.
func (s *stream) flush() string {
	p := s.pending
	s.pending = nil
	if len(p) == 0 || s.truncated {
		return ""
	}
	return s.add(p)
}

func (s *stream) add(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if s.limit > 0 && s.size+int64(len(p)) > s.limit {
		keep := s.limit - s.size
		// Cut on a character boundary so the stored text stays valid.
		for keep > 0 && !utf8.RuneStart(p[keep]) {
			keep--
		}
		p = p[:keep]
		s.truncated = true
	}
	s.size += int64(len(p))
	text := clean(string(p))
	s.text.WriteString(text)
	return text
}

// clean makes text storable in any database's text column: invalid UTF-8
// and NUL (which PostgreSQL refuses) become U+FFFD.
func clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
