package openapi

import (
	"mime"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// mediaRank orders request and response media types: JSON first (plain
// application/json before its variants), then form-urlencoded, then
// multipart, then anything else.
func mediaRank(mt string) int {
	base, _, _ := mime.ParseMediaType(mt)
	if base == "" {
		base = strings.ToLower(mt)
	}
	switch {
	case base == "application/json" && !strings.Contains(mt, ";"):
		return 0
	case isJSONMedia(mt):
		return 1
	case isFormMedia(mt):
		return 2
	case isMultipartMedia(mt):
		return 3
	}
	return 4
}

// pickMedia returns the preferred media type of content (ties broken by
// name, so the choice is stable).
func pickMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	names := make([]string, 0, len(content))
	for n := range content {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", nil
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := mediaRank(names[i]), mediaRank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names[0], content[names[0]]
}

func mediaBase(mt string) string {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		base, _, _ = strings.Cut(strings.ToLower(mt), ";")
		base = strings.TrimSpace(base)
	}
	return base
}

func isJSONMedia(mt string) bool {
	b := mediaBase(mt)
	return b == "application/json" || b == "text/json" || strings.HasSuffix(b, "+json")
}

func isFormMedia(mt string) bool { return mediaBase(mt) == "application/x-www-form-urlencoded" }

func isMultipartMedia(mt string) bool { return strings.HasPrefix(mediaBase(mt), "multipart/") }

func isTextMedia(mt string) bool {
	b := mediaBase(mt)
	return strings.HasPrefix(b, "text/") || isJSONMedia(b) || strings.HasSuffix(b, "+xml") || b == "application/xml"
}
