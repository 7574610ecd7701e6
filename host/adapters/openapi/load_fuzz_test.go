package openapi

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cyrnel/cyrnel/host/adapters"
)

// FuzzDefinition: service documents are untrusted. Any content must be
// turned into tools or refused with an error, never a panic, and every tool
// that comes out has an identifier and an input schema that is JSON.
func FuzzDefinition(f *testing.F) {
	for _, name := range []string{"petstore-3.0.yaml", "petstore-2.0.json", "mega-3.1.yaml", "recursive-tree-3.0.yaml",
		"recursive-mutual-shared-3.0.yaml", "style-explode-3.0.yaml", "cookie-params-3.0.json", "webhook-example-3.1.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a/{x}":{"get":{"parameters":[{"name":"x","in":"path","required":true,"schema":{"$ref":"#/components/schemas/X"}}]}}},"components":{"schemas":{"X":{"$ref":"#/components/schemas/X"}}}}`))
	f.Add([]byte(`swagger: "2.0"` + "\ninfo: {title: t, version: '1'}\npaths: {}\n"))
	a := New(Options{})
	f.Fuzz(func(t *testing.T, doc []byte) {
		def, err := a.Definition(context.Background(), adapters.Source{Content: string(doc)})
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, tool := range def.Tools {
			if !identRE.MatchString(tool.ID) || seen[tool.ID] {
				t.Fatalf("tool id %q is not a unique identifier", tool.ID)
			}
			seen[tool.ID] = true
			if !json.Valid(tool.InputSchema) {
				t.Fatalf("tool %s: input schema is not JSON", tool.ID)
			}
		}
	})
}
