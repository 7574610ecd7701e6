package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
)

// jsonBodies answers 415 to a request body that is not plain JSON:
// application/json, with no charset or charset=utf-8. huma on its own takes a
// missing Content-Type as JSON and any +json type as JSON, so a JSON Patch
// document or UTF-16 text would be read as if it were the plain JSON the
// operations describe. A request without a body needs no Content-Type, and
// an operation that takes none (bodies: "METHOD pattern" of those that do,
// filled before serving) refuses one rather than ignore it. The MCP
// endpoint speaks its own protocol and checks its own media types.
func jsonBodies(mux *chi.Mux, bodies map[string]bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength == 0 || r.Method == http.MethodGet || r.Method == http.MethodHead || r.URL.Path == "/mcp" || fileUpload(r) {
				next.ServeHTTP(w, r)
				return
			}
			if pattern, _, known := route(mux, r); known && pattern != "" && !bodies[r.Method+" "+pattern] {
				msg := "this operation takes no request body"
				writeProblemDetail(w, http.StatusUnsupportedMediaType, msg, &huma.ErrorDetail{Location: "body", Message: msg})
				return
			}
			if msg := notJSON(r.Header.Get("Content-Type")); msg != "" {
				writeProblemDetail(w, http.StatusUnsupportedMediaType, msg, &huma.ErrorDetail{
					Location: "header.Content-Type", Message: msg, Value: r.Header.Get("Content-Type"),
				})
				return
			}
			// Media types are case-insensitive; huma matches them exactly.
			r.Header.Set("Content-Type", "application/json")
			next.ServeHTTP(w, r)
		})
	}
}

// fileUpload: PUT /sessions/{id}/files/{path} carries the file's raw bytes.
func fileUpload(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/sessions/")
	_, file, _ := strings.Cut(rest, "/")
	return ok && r.Method == http.MethodPut && strings.HasPrefix(file, "files/")
}

// notJSON says what is wrong with a request body's Content-Type, or "".
func notJSON(ct string) string {
	if ct == "" {
		return "a request body needs Content-Type: application/json"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "malformed Content-Type: " + err.Error()
	}
	if mt != "application/json" {
		return "unsupported media type " + mt + ": send application/json"
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return "unsupported Content-Type parameter " + k + "=" + v + ": JSON is UTF-8"
		}
	}
	return ""
}

// jsonFormat is huma's JSON format whose parse errors say where: the line,
// column and byte offset of a syntax error, or that the body ends early.
var jsonFormat = huma.Format{Marshal: huma.DefaultJSONFormat.Marshal, Unmarshal: unmarshalJSON}

func unmarshalJSON(data []byte, v any) error {
	err := json.Unmarshal(data, v)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax) && syntax.Offset >= int64(len(data)):
		line, col := position(data, int64(len(data)))
		return fmt.Errorf("malformed JSON: the body ends at line %d, column %d (byte %d) before the value is complete", line, col, len(data))
	case errors.As(err, &syntax):
		// Offset counts the bytes read, the offending one included.
		line, col := position(data, syntax.Offset-1)
		return fmt.Errorf("malformed JSON at line %d, column %d (byte %d): %w", line, col, syntax.Offset, err)
	}
	return err
}

// position is the 1-based line and column of byte offset off in data.
func position(data []byte, off int64) (line, col int) {
	before := data[:min(max(off, 0), int64(len(data)))]
	line = 1 + bytes.Count(before, []byte("\n"))
	return line, 1 + len(before) - (bytes.LastIndexByte(before, '\n') + 1)
}
