package openapi

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/schema"
)

func TestIdentifier(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"repos/list-for-org": "repos_list_for_org",
		"find pet by id":     "find_pet_by_id",
		"getPetById":         "getPetById",
		"list-data-sets":     "list_data_sets",
		"$filter":            "filter",
		"page[size]":         "page_size",
		"_id":                "_id",
		"X-Rate-Limit":       "X_Rate_Limit",
		"2fa":                "_2fa",
		"from":               "from_",
		"class":              "class_",
		"delete":             "delete_",
		"None":               "None_",
		"null":               "null_",
		"await":              "await_",
		"type":               "type",
		"users.user.List":    "users_user_List",
		"héllo wörld":        "h_llo_w_rld",
		"///":                "fallback",
		"":                   "fallback",
	} {
		if got := identifier(in, "fallback"); got != want {
			t.Errorf("identifier(%q) = %q, want %q", in, got, want)
		}
	}
	for method, path := range map[string]string{"get_products": "/products", "get_pets_petId": "/pets/{petId}", "get": "/", "post_admin_apps_approve": "/admin.apps.approve"} {
		m, _, _ := strings.Cut(method, "_")
		if got := pathToolID(strings.ToUpper(m), path); got != method {
			t.Errorf("pathToolID(%s) = %q, want %q", path, got, method)
		}
	}
}

func TestFixtureToolIDs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fixture string
		ids     map[string]string // id → name
	}{
		{"github-api-2020-3.0.json", map[string]string{"repos_list_for_org": "repos/list-for-org", "issues_create": "issues/create"}},
		{"petstore-expanded-3.0.yaml", map[string]string{"find_pet_by_id": "find pet by id", "findPets": "findPets", "addPet": "addPet", "deletePet": "deletePet"}},
		{"uber-2.0.json", map[string]string{"get_products": "GET /products", "get_estimates_price": "GET /estimates/price", "get_estimates_time": "GET /estimates/time", "get_me": "GET /me", "get_history": "GET /history"}},
		{"uspto-3.0.yaml", map[string]string{"list_data_sets": "list-data-sets", "list_searchable_fields": "list-searchable-fields", "perform_search": "perform-search"}},
		{"path-item-servers-callbacks-3.1.yaml", map[string]string{
			"get_things": "GET /things", "post_things": "POST /things", "put_things": "", "patch_things": "PATCH /things",
			"delete_things": "DELETE /things", "head_things": "HEAD /things", "options_things": "OPTIONS /things", "trace_things": "TRACE /things",
		}},
		{"recursive-tree-3.0.yaml", map[string]string{"get_tree": "GET /tree"}},
		{"non-oauth-scopes-3.1.yaml", map[string]string{"get_users": "GET /users"}},
		{"slack-web-2.0.json", map[string]string{"admin_apps_approve": "admin_apps_approve", "chat_postMessage": "chat_postMessage"}},
	}
	for _, c := range cases {
		def := fixture(t, c.fixture)
		for id, name := range c.ids {
			if name == "" { // must not exist
				for _, tl := range def.Tools {
					if tl.ID == id {
						t.Errorf("%s: unexpected tool %s", c.fixture, id)
					}
				}
				continue
			}
			if got := toolByID(t, def, id).Name; got != name {
				t.Errorf("%s: %s is named %q, want %q", c.fixture, id, got, name)
			}
		}
	}
	// The empty path item "/{pathTest}: {}" of mega-3.1 adds nothing.
	if ids := toolIDsOf(fixture(t, "mega-3.1.yaml")); !reflect.DeepEqual(ids, []string{"get"}) {
		t.Errorf("mega: %v", ids)
	}
}

func toolIDsOf(def adapters.ServiceDefinition) []string {
	var ids []string
	for _, tl := range def.Tools {
		ids = append(ids, tl.ID)
	}
	return ids
}

func TestToolIDUniqueness(t *testing.T) {
	t.Parallel()
	def := defineDoc(t, `
openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    get: {operationId: list, responses: {"200": {description: ok}}}
  /y:
    get: {operationId: list, responses: {"200": {description: ok}}}
  /z:
    get: {operationId: list_2, responses: {"200": {description: ok}}}
  /a-b:
    get: {responses: {"200": {description: ok}}}
  /a_b:
    get: {responses: {"200": {description: ok}}}
    delete: {operationId: delete, responses: {"200": {description: ok}}}
`)
	got := map[string]string{}
	for _, tl := range def.Tools {
		var td toolDomain
		if err := json.Unmarshal(tl.AdapterDomain, &td); err != nil {
			t.Fatal(err)
		}
		got[td.Method+" "+td.Path] = tl.ID
	}
	want := map[string]string{
		"GET /x": "list", "GET /y": "list_3", "GET /z": "list_2",
		"GET /a-b": "get_a_b", "GET /a_b": "get_a_b_2", "DELETE /a_b": "delete_",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ids %v\nwant %v", got, want)
	}
}

const clashDoc = `
openapi: 3.0.3
info: {title: clash, version: "1"}
paths:
  /items/{id}:
    parameters:
      - {name: id, in: path, required: true, schema: {type: string}, description: path level}
      - {name: trace, in: query, schema: {type: string}, description: path-item level}
    post:
      operationId: update
      parameters:
        - {name: id, in: query, schema: {type: integer}, description: the query id}
        - {name: id, in: header, schema: {type: string}}
        - {name: body, in: query, schema: {type: string}}
        - {name: "page[size]", in: query, schema: {type: integer}}
        - {name: page_size, in: query, schema: {type: integer}}
        - {name: from, in: query, schema: {type: string}}
        - {name: X-Request-ID, in: header, required: true, schema: {type: string}}
        - {name: session id, in: cookie, schema: {type: string}}
        - {name: trace, in: query, schema: {type: boolean}, description: operation level}
        - {name: Content-Type, in: header, schema: {type: string}}
        - {name: Authorization, in: header, schema: {type: string}}
      requestBody:
        required: true
        content:
          application/json:
            schema: {type: object, properties: {name: {type: string}}}
      responses: {"204": {description: done}}
`

func TestPropertyNamesAndClashes(t *testing.T) {
	t.Parallel()
	tl := toolByID(t, defineDoc(t, clashDoc), "update")
	in := decodeJSON(t, tl.InputSchema)
	props := in["properties"].(map[string]any)
	want := []string{"X_Request_ID", "body", "body_query", "from_", "id", "id_header", "id_query", "page_size", "page_size_2", "session_id", "trace"}
	var got []string
	for p := range props {
		got = append(got, p)
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("properties %v\nwant %v", got, want)
	}
	req := in["required"].([]any)
	if !slices.Contains(req, any("id")) || !slices.Contains(req, any("X_Request_ID")) || !slices.Contains(req, any("body")) || len(req) != 3 {
		t.Errorf("required %v", req)
	}
	if d := props["id_query"].(map[string]any)["description"]; d != "the query id" {
		t.Errorf("id_query description %v", d)
	}
	// The operation's parameter replaces the path item's of the same name.
	if tr := props["trace"].(map[string]any); tr["type"] != "boolean" || tr["description"] != "operation level" {
		t.Errorf("trace %v", tr)
	}
	if in["additionalProperties"] != false || in["type"] != "object" {
		t.Errorf("not a closed object: %v", in)
	}
	var td toolDomain
	if err := json.Unmarshal(tl.AdapterDomain, &td); err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for _, p := range td.Params {
		where[p.Property] = p.In + ":" + p.Name
	}
	for prop, loc := range map[string]string{
		"id": "path:id", "id_query": "query:id", "id_header": "header:id", "body_query": "query:body",
		"page_size": "query:page[size]", "page_size_2": "query:page_size", "session_id": "cookie:session id",
		"X_Request_ID": "header:X-Request-ID",
	} {
		if where[prop] != loc {
			t.Errorf("%s → %q, want %q", prop, where[prop], loc)
		}
	}
}

func TestSchemaConversion30(t *testing.T) {
	t.Parallel()
	def := defineDoc(t, `
openapi: 3.0.3
info: {title: conv, version: "1"}
paths:
  /things:
    post:
      operationId: create
      parameters:
        - {name: limit, in: query, schema: {type: integer, minimum: 1, exclusiveMinimum: true, maximum: 10, exclusiveMaximum: true, example: 5}}
        - {name: tag, in: query, schema: {type: string, nullable: true}}
        - {name: color, in: query, schema: {type: string, enum: [red, blue], nullable: true}}
        - {name: shape, in: query, schema: {nullable: true, allOf: [{$ref: '#/components/schemas/Shape'}]}}
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: '#/components/schemas/Thing'}
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/Thing'}
components:
  schemas:
    Shape: {type: string, enum: [square]}
    Thing:
      type: object
      required: [id, name, secret]
      discriminator: {propertyName: kind}
      xml: {name: thing}
      externalDocs: {url: "https://example.com"}
      x-internal: true
      properties:
        id: {type: string, readOnly: true}
        name: {type: string, example: bob}
        secret: {type: string, writeOnly: true}
        kind: {type: string}
`)
	tl := toolByID(t, def, "create")
	in := decodeJSON(t, tl.InputSchema)
	props := in["properties"].(map[string]any)
	check := func(name string, want map[string]any) {
		t.Helper()
		if got := props[name].(map[string]any); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %v\nwant %v", name, got, want)
		}
	}
	check("limit", map[string]any{"type": "integer", "exclusiveMinimum": 1.0, "exclusiveMaximum": 10.0, "examples": []any{5.0}})
	check("tag", map[string]any{"type": []any{"string", "null"}})
	check("color", map[string]any{"type": []any{"string", "null"}, "enum": []any{"red", "blue", nil}})
	check("shape", map[string]any{"anyOf": []any{map[string]any{"allOf": []any{map[string]any{"$ref": "#/$defs/Shape"}}}, map[string]any{"type": "null"}}})

	thing := in["$defs"].(map[string]any)["Thing"].(map[string]any)
	for _, k := range []string{"discriminator", "xml", "externalDocs", "x-internal"} {
		if _, ok := thing[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	// readOnly properties are not required in a request, writeOnly ones not
	// in a response.
	if r := thing["required"]; !reflect.DeepEqual(r, []any{"name", "secret"}) {
		t.Errorf("request required %v", r)
	}
	out := decodeJSON(t, tl.OutputSchema)
	if r := out["$defs"].(map[string]any)["Thing"].(map[string]any)["required"]; !reflect.DeepEqual(r, []any{"id", "name"}) {
		t.Errorf("response required %v", r)
	}

	for _, c := range []struct {
		params map[string]any
		fails  []string
	}{
		{map[string]any{"limit": 5, "tag": nil, "color": nil, "shape": nil, "body": map[string]any{"name": "a", "secret": "s"}}, nil},
		{map[string]any{"limit": 1, "color": "green", "shape": "circle", "body": map[string]any{"name": 1}}, []string{"/body/name", "/body/secret", "/color", "/limit", "/shape"}},
	} {
		raw, _ := json.Marshal(c.params)
		var v any
		_ = json.Unmarshal(raw, &v)
		err := validate(t, tl.InputSchema, v)
		if c.fails == nil {
			if err != nil {
				t.Errorf("%v rejected: %v", c.params, err)
			}
			continue
		}
		var ve *schema.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("%v: %v", c.params, err)
		}
		var paths []string
		for _, p := range ve.Problems {
			if !slices.Contains(paths, p.Path) {
				paths = append(paths, p.Path)
			}
		}
		if !reflect.DeepEqual(paths, c.fails) {
			t.Errorf("failing paths %v, want %v (%v)", paths, c.fails, err)
		}
	}
}

func TestSchemaConversion31(t *testing.T) {
	t.Parallel()
	def := defineDoc(t, `
openapi: 3.1.0
info: {title: conv31, version: "1"}
paths:
  /things:
    post:
      operationId: create
      requestBody:
        content:
          application/json:
            schema:
              type: object
              properties:
                either: {type: [string, "null"]}
                none: {type: "null"}
                kind: {const: foo}
                arr: {type: array}
                pair: {type: array, prefixItems: [{type: string}, {type: integer}], items: false}
                count: {type: integer, exclusiveMinimum: 0, exclusiveMaximum: 100, examples: [1, 2]}
                cond:
                  type: object
                  if: {properties: {a: {const: 1}}}
                  then: {required: [b]}
                anything: true
                node: {$ref: '#/components/schemas/Node', description: a node}
      responses: {"200": {description: ok}}
components:
  schemas:
    Node:
      $id: https://example.com/node
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      properties:
        next: {$ref: '#/components/schemas/Node'}
        label: {$ref: '#/components/schemas/Node/$defs/label'}
      $defs:
        label: {type: string, maxLength: 3}
`)
	tl := toolByID(t, def, "create")
	in := decodeJSON(t, tl.InputSchema)
	body := in["properties"].(map[string]any)["body"].(map[string]any)["properties"].(map[string]any)
	if n := body["node"].(map[string]any); n["$ref"] != "#/$defs/Node" || n["description"] != "a node" {
		t.Errorf("ref with sibling: %v", n)
	}
	node := in["$defs"].(map[string]any)["Node"].(map[string]any)
	for _, k := range []string{"$id", "$schema", "$defs"} {
		if _, ok := node[k]; ok {
			t.Errorf("Node keeps %s: %v", k, node)
		}
	}
	good := map[string]any{"body": map[string]any{
		"either": nil, "none": nil, "kind": "foo", "arr": []any{1, "x"}, "pair": []any{"a", 1},
		"count": 1, "cond": map[string]any{"a": 2}, "anything": []any{},
		"node": map[string]any{"next": map[string]any{"label": "abc"}},
	}}
	if err := validate(t, tl.InputSchema, roundTrip(t, good)); err != nil {
		t.Fatalf("valid body rejected: %v", err)
	}
	bad := map[string]any{"body": map[string]any{
		"either": 1, "none": "x", "kind": "bar", "pair": []any{"a", 1, 2}, "count": 0,
		"cond": map[string]any{"a": 1}, "node": map[string]any{"next": map[string]any{"label": "abcd"}},
	}}
	err := validate(t, tl.InputSchema, roundTrip(t, bad))
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("invalid body: %v", err)
	}
	var paths []string
	for _, p := range ve.Problems {
		if !slices.Contains(paths, p.Path) {
			paths = append(paths, p.Path)
		}
	}
	want := []string{"/body/cond/b", "/body/count", "/body/either", "/body/kind", "/body/node/next/label", "/body/none", "/body/pair/2"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("failing paths %v\nwant %v", paths, want)
	}
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
