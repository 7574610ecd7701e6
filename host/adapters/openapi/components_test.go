package openapi

import (
	"reflect"
	"strings"
	"testing"
)

func defsOf(t *testing.T, sch map[string]any) map[string]any {
	t.Helper()
	defs, ok := sch["$defs"].(map[string]any)
	if !ok {
		t.Fatalf("no $defs in %v", sch)
	}
	return defs
}

func TestRecursiveTree(t *testing.T) {
	t.Parallel()
	tl := toolByID(t, fixture(t, "recursive-tree-3.0.yaml"), "get_tree")
	out := decodeJSON(t, tl.OutputSchema)
	node := defsOf(t, out)["TreeNode"].(map[string]any)
	props := node["properties"].(map[string]any)
	self := map[string]any{"$ref": "#/$defs/TreeNode"}
	if !reflect.DeepEqual(props["left"], self) || !reflect.DeepEqual(props["right"], self) ||
		!reflect.DeepEqual(props["children"], map[string]any{"type": "array", "items": self}) {
		t.Fatalf("TreeNode %v", node)
	}
	tree := map[string]any{"status": 200, "headers": map[string]any{}, "body": map[string]any{
		"value": 1, "left": map[string]any{"value": 2, "children": []any{map[string]any{"value": 3}}},
	}}
	if err := validate(t, tl.OutputSchema, roundTrip(t, tree)); err != nil {
		t.Errorf("tree rejected: %v", err)
	}
	tree["body"].(map[string]any)["left"].(map[string]any)["children"] = []any{map[string]any{"value": "x"}}
	if err := validate(t, tl.OutputSchema, roundTrip(t, tree)); err == nil || !strings.Contains(err.Error(), "/body/left/children/0/value") {
		t.Errorf("deep error: %v", err)
	}
}

func TestRecursiveMutualShared(t *testing.T) {
	t.Parallel()
	def := fixture(t, "recursive-mutual-shared-3.0.yaml")
	var schemas []map[string]any
	for _, id := range []string{"post_foo", "put_bar"} {
		in := decodeJSON(t, toolByID(t, def, id).InputSchema)
		if b := in["properties"].(map[string]any)["body"]; !reflect.DeepEqual(b, map[string]any{"$ref": "#/$defs/Schema2"}) {
			t.Errorf("%s body %v", id, b)
		}
		defs := defsOf(t, in)
		if len(defs) != 2 || defs["Schema1"] == nil || defs["Schema2"] == nil {
			t.Errorf("%s defs %v", id, defs)
		}
		schemas = append(schemas, in)
	}
	// The shared request body gives both tools the same schema.
	if !reflect.DeepEqual(schemas[0], schemas[1]) {
		t.Error("shared request body differs between tools")
	}
	tl := toolByID(t, def, "post_foo")
	ok := map[string]any{"body": map[string]any{"prop1": map[string]any{"prop": map[string]any{"prop2": map[string]any{}}}}}
	if err := validate(t, tl.InputSchema, roundTrip(t, ok)); err != nil {
		t.Error(err)
	}
	bad := map[string]any{"body": map[string]any{"prop1": map[string]any{"prop": 5}}}
	if err := validate(t, tl.InputSchema, roundTrip(t, bad)); err == nil || !strings.Contains(err.Error(), "/body/prop1/prop") {
		t.Errorf("mutual recursion not enforced: %v", err)
	}
}

func TestStripeComponents(t *testing.T) {
	t.Parallel()
	def := fixture(t, "stripe-2022-04-3.0.json")
	// Dotted component names stay as they are and are valid pointers.
	out := decodeJSON(t, toolByID(t, def, "GetCheckoutSessionsSession").OutputSchema)
	defs := defsOf(t, out)
	if _, ok := defs["checkout.session"].(map[string]any); !ok {
		t.Fatal("no checkout.session def")
	}
	var found bool
	for _, b := range out["anyOf"].([]any) {
		props := b.(map[string]any)["properties"].(map[string]any)
		if reflect.DeepEqual(props["status"], map[string]any{"const": 200.0}) {
			found = reflect.DeepEqual(props["body"], map[string]any{"$ref": "#/$defs/checkout.session"})
		}
	}
	if !found {
		t.Errorf("200 branch does not reference checkout.session: %v", out["anyOf"])
	}
	// Output schemas are bounded: far defs are stubs that still resolve.
	if len(toolByID(t, def, "GetCustomersCustomer").OutputSchema) > 200<<10 {
		t.Error("output schema not bounded")
	}

	// The form-encoded input of PostCustomers: deepObject properties are
	// objects, and validation names the failing nested path.
	tl := toolByID(t, def, "PostCustomers")
	good := map[string]any{"body": map[string]any{"name": "Jo", "address": map[string]any{"city": "Paris"}, "metadata": map[string]any{"k": "v"}, "expand": []any{"tax"}}}
	if err := validate(t, tl.InputSchema, roundTrip(t, good)); err != nil {
		t.Fatal(err)
	}
	bad := map[string]any{"body": map[string]any{"address": map[string]any{"city": strings.Repeat("x", 5001)}, "unknown_field": 1}}
	err := validate(t, tl.InputSchema, roundTrip(t, bad))
	if err == nil || !strings.Contains(err.Error(), "/body/address/city") || !strings.Contains(err.Error(), "/body/unknown_field") {
		t.Errorf("stripe validation: %v", err)
	}
}

func TestOutputSchemaBranches(t *testing.T) {
	t.Parallel()
	tl := toolByID(t, fixture(t, "petstore-3.0.yaml"), "showPetById")
	out := decodeJSON(t, tl.OutputSchema)
	branches := out["anyOf"].([]any)
	if len(branches) != 2 {
		t.Fatalf("branches %v", branches)
	}
	b200 := branches[0].(map[string]any)
	if b200["description"] != "200: Expected response to a valid request" ||
		!reflect.DeepEqual(b200["properties"].(map[string]any)["status"], map[string]any{"const": 200.0}) ||
		!reflect.DeepEqual(b200["properties"].(map[string]any)["body"], map[string]any{"$ref": "#/$defs/Pet"}) {
		t.Errorf("200 branch %v", b200)
	}
	bdef := branches[1].(map[string]any)
	if _, ok := bdef["properties"].(map[string]any)["status"]; ok || !strings.HasPrefix(bdef["description"].(string), "default") {
		t.Errorf("default branch %v", bdef)
	}
	for _, c := range []struct {
		result map[string]any
		ok     bool
	}{
		{map[string]any{"status": 200, "headers": map[string]any{"x": "1"}, "body": map[string]any{"id": 1, "name": "rex"}}, true},
		{map[string]any{"status": 500, "headers": map[string]any{"x": []any{"1", "2"}}, "body": map[string]any{"code": 1, "message": "boom"}}, true},
		{map[string]any{"status": 200, "headers": map[string]any{}, "body": map[string]any{"id": "one"}}, false},
		{map[string]any{"status": 200, "body": nil}, false},
	} {
		err := validate(t, tl.OutputSchema, roundTrip(t, c.result))
		if (err == nil) != c.ok {
			t.Errorf("%v: %v", c.result, err)
		}
	}
	if s := statusSchema("4XX"); !reflect.DeepEqual(s, map[string]any{"minimum": 400, "maximum": 499}) {
		t.Errorf("4XX: %v", s)
	}
}

func TestConfigAndSecretsSchemas(t *testing.T) {
	t.Parallel()
	uspto := decodeJSON(t, fixture(t, "uspto-3.0.yaml").ConfigSchema)
	props := uspto["properties"].(map[string]any)
	scheme := props["variables"].(map[string]any)["properties"].(map[string]any)["scheme"]
	if !reflect.DeepEqual(scheme, map[string]any{"type": "string", "default": "https", "enum": []any{"https", "http"}, "description": "The Data Set API is accessible via https and http"}) {
		t.Errorf("uspto scheme %v", scheme)
	}
	if props["timeoutMs"].(map[string]any)["default"] != 30000.0 || props["serverUrl"] == nil {
		t.Errorf("config %v", props)
	}
	def := fixture(t, "uspto-3.0.yaml")
	for _, c := range []struct {
		cfg map[string]any
		ok  bool
	}{
		{map[string]any{}, true},
		{map[string]any{"serverUrl": "http://localhost:1", "variables": map[string]any{"scheme": "http"}, "timeoutMs": 5}, true},
		{map[string]any{"variables": map[string]any{"scheme": "ftp"}}, false},
		{map[string]any{"timeoutMs": 0}, false},
		{map[string]any{"timeoutMs": 1.5}, false},
		{map[string]any{"other": 1}, false},
	} {
		if err := validate(t, def.ConfigSchema, roundTrip(t, c.cfg)); (err == nil) != c.ok {
			t.Errorf("config %v: %v", c.cfg, err)
		}
	}

	// Datadog declares its variables on several servers.
	dd := decodeJSON(t, fixture(t, "datadog-v1-3.0.yaml").ConfigSchema)
	vars := dd["properties"].(map[string]any)["variables"].(map[string]any)["properties"].(map[string]any)
	for _, v := range []string{"site", "subdomain", "name", "protocol"} {
		if vars[v] == nil {
			t.Errorf("datadog variable %s missing: %v", v, vars)
		}
	}

	// Secrets: one property per scheme, named as in the document; basic is
	// {username, password}; the undefined "OpenID" the operation names is
	// not there.
	sec := decodeJSON(t, fixture(t, "cookie-params-3.0.json").SecretsSchema)
	sp := sec["properties"].(map[string]any)
	var names []string
	for n := range sp {
		names = append(names, n)
	}
	if len(names) != 4 || sp["ApiKeyAuth"] == nil || sp["BearerAuth"] == nil || sp["OAuth2"] == nil {
		t.Errorf("secrets %v", names)
	}
	for n, typ := range map[string]string{"ApiKeyAuth": "string", "BearerAuth": "string", "OAuth2": "string", "BasicAuth": "object"} {
		if sp[n].(map[string]any)["type"] != typ {
			t.Errorf("%s: %v", n, sp[n])
		}
	}
	cp := fixture(t, "cookie-params-3.0.json")
	if err := validate(t, cp.SecretsSchema, map[string]any{"BasicAuth": map[string]any{"username": "u", "password": "p"}, "BearerAuth": "t"}); err != nil {
		t.Error(err)
	}
	if err := validate(t, cp.SecretsSchema, map[string]any{"BasicAuth": "u:p"}); err == nil {
		t.Error("basic as a string accepted")
	}
	// Mutual TLS has nothing to store.
	if sp := decodeJSON(t, fixture(t, "swagger-petstore-3.1.yaml").SecretsSchema)["properties"].(map[string]any); sp["mutual_tls"] != nil || sp["api_key"] == nil {
		t.Errorf("petstore 3.1 secrets %v", sp)
	}
}

func TestDefNames(t *testing.T) {
	t.Parallel()
	def := defineDoc(t, `{
	  "swagger": "2.0",
	  "info": {"title": "names", "version": "1"},
	  "paths": {"/x": {"post": {"operationId": "x",
	    "parameters": [{"name": "b", "in": "body", "required": true, "schema": {"$ref": "#/definitions/Page«Item»"}}],
	    "responses": {"200": {"description": "ok"}}}}},
	  "definitions": {
	    "Page«Item»": {"type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/definitions/Item~1x"}}}},
	    "Item/x": {"type": "string"}
	  }
	}`)
	in := decodeJSON(t, toolByID(t, def, "x").InputSchema)
	defs := defsOf(t, in)
	var names []string
	for n := range defs {
		names = append(names, n)
	}
	for _, n := range names {
		if strings.ContainsAny(n, "~/«» ") {
			t.Errorf("unsafe def name %q", n)
		}
	}
	if len(names) != 2 {
		t.Errorf("defs %v", names)
	}
	if err := validate(t, toolByID(t, def, "x").InputSchema, roundTrip(t, map[string]any{"body": map[string]any{"items": []any{"a"}}})); err != nil {
		t.Error(err)
	}
}
