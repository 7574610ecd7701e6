// Package openapi holds the host's own API contract: the spec files generated
// from the code (`make openapi`) and, generated from them, a Go client.
package openapi

import _ "embed"

// JSON is the committed OpenAPI 3.1 document.
//
//go:embed openapi.json
var JSON []byte
