package openapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/schema"
)

// fixtureTools is every fixture with the number of operations SOURCES.md
// counts for it (webhooks and callbacks are not operations of the service).
var fixtureTools = map[string]int{
	"cookie-params-3.0.json":               1,
	"datadog-v1-3.0.yaml":                  235,
	"datadog-v2-3.0.yaml":                  985,
	"discord-3.1.json":                     242,
	"github-api-2020-3.0.json":             623,
	"mega-3.1.yaml":                        1,
	"non-oauth-scopes-3.1.yaml":            1,
	"path-item-servers-callbacks-3.1.yaml": 7,
	"petstore-2.0.json":                    3,
	"petstore-3.0.yaml":                    3,
	"petstore-expanded-3.0.yaml":           4,
	"recursive-mutual-shared-3.0.yaml":     2,
	"recursive-tree-3.0.yaml":              1,
	"slack-web-2.0.json":                   174,
	"stripe-2022-04-3.0.json":              417,
	"style-explode-3.0.yaml":               2,
	"swagger-petstore-2.0.json":            20,
	"swagger-petstore-3.0.yaml":            19,
	"swagger-petstore-3.1.yaml":            6,
	"uber-2.0.json":                        5,
	"uspto-3.0.yaml":                       3,
	"webhook-example-3.1.yaml":             0,
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func TestFixtureListIsComplete(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(fixtureDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext == ".json" || ext == ".yaml" || ext == ".yml" {
			files = append(files, e.Name())
		}
	}
	if len(files) != len(fixtureTools) {
		t.Fatalf("%d fixture files, %d in the table: %v", len(files), len(fixtureTools), files)
	}
	for _, f := range files {
		if _, ok := fixtureTools[f]; !ok {
			t.Errorf("fixture %s is not tested", f)
		}
	}
}

// TestFixturesImport imports every fixture and checks every tool: ids are
// unique identifiers, every input and output schema compiles with
// host/schema, input properties are identifiers (Python keyword arguments),
// references point into $defs, and the adapter domains read back.
func TestFixturesImport(t *testing.T) {
	t.Parallel()
	for name, want := range fixtureTools {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			def := fixture(t, name)
			if len(def.Tools) != want {
				t.Fatalf("%d tools, want %d", len(def.Tools), want)
			}
			for _, raw := range []json.RawMessage{def.ConfigSchema, def.SecretsSchema} {
				if _, err := schema.Compile(raw); err != nil {
					t.Errorf("service schema: %v", err)
				}
			}
			var svc serviceDomain
			if err := json.Unmarshal(def.AdapterDomain, &svc); err != nil || svc.Version != domainVersion {
				t.Fatalf("service domain %s: %v", def.AdapterDomain, err)
			}
			seen := map[string]bool{}
			for _, tl := range def.Tools {
				if !identRE.MatchString(tl.ID) || module.Reserved(tl.ID) || seen[tl.ID] {
					t.Errorf("tool id %q is not a unique identifier", tl.ID)
				}
				seen[tl.ID] = true
				if tl.Name == "" || tl.Description == "" {
					t.Errorf("%s: empty name or description", tl.ID)
				}
				if _, err := schema.Compile(tl.InputSchema); err != nil {
					t.Errorf("%s: input schema: %v", tl.ID, err)
				}
				if _, err := schema.Compile(tl.OutputSchema); err != nil {
					t.Errorf("%s: output schema: %v", tl.ID, err)
				}
				in := decodeJSON(t, tl.InputSchema)
				props, _ := in["properties"].(map[string]any)
				for p := range props {
					if !identRE.MatchString(p) || module.Reserved(p) {
						t.Errorf("%s: property %q is not an identifier", tl.ID, p)
					}
				}
				checkRefs(t, tl.ID, in)
				var td toolDomain
				if err := json.Unmarshal(tl.AdapterDomain, &td); err != nil {
					t.Fatalf("%s: domain: %v", tl.ID, err)
				}
				if !slices.Contains(methods, td.Method) || !strings.HasPrefix(td.Path, "/") {
					t.Errorf("%s: domain %s", tl.ID, tl.AdapterDomain)
				}
				for _, p := range td.Params {
					if _, ok := props[p.Property]; !ok {
						t.Errorf("%s: param %s has no property", tl.ID, p.Property)
					}
				}
				if (td.Body != nil) != (props["body"] != nil) {
					t.Errorf("%s: body property and domain disagree", tl.ID)
				}
			}
		})
	}
}

// checkRefs asserts every $ref of an input schema points at a def that is
// there and is a real schema (input schemas are never cut).
func checkRefs(t *testing.T, tool string, sch map[string]any) {
	t.Helper()
	defs, _ := sch["$defs"].(map[string]any)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				name, ok := strings.CutPrefix(ref, "#/$defs/")
				def, found := defs[name].(map[string]any)
				if !ok || !found {
					t.Errorf("%s: dangling $ref %q", tool, ref)
				} else if strings.Contains(stringOf(def["description"]), "Not expanded") {
					t.Errorf("%s: input def %s is a stub", tool, name)
				}
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(sch)
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}
