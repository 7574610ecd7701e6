package typescript

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
)

func TestDocs(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, nil)
	docs, err := env.Docs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TypeScript environment",
		"top-level `await`",
		"`cyrnel.output(obj)`",
		"`cyrnel.services[s].tools[t].invoke(params)`",
		"`console.warn/error(...args)`",
		"`setTimeout(fn, ms, ...args)`",
		"30000 ms",
		"10000 frames",
		"ToolError",
		"## Available tools",
		"`cyrnel.services.t.tools.echo.invoke(params)` — Returns its call.",
		"```ts",
	} {
		if !strings.Contains(docs, want) {
			t.Errorf("docs lack %q", want)
		}
	}
	if strings.Contains(docs, "%!") {
		t.Error("docs contain a formatting error")
	}
}

func TestToolDocs(t *testing.T) {
	t.Parallel()
	env := New(nil)
	input := `{
	  "type": "object",
	  "properties": {
	    "petId": {"type": "integer", "description": "ID of the pet | to fetch"},
	    "status": {"type": "string", "enum": ["available", "sold"], "default": "available"},
	    "tags": {"type": "array", "items": {"type": "string"}},
	    "x-trace": {"type": ["string", "null"]},
	    "body": {"$ref": "#/$defs/Pet"}
	  },
	  "required": ["petId", "body"],
	  "$defs": {
	    "Pet": {"type": "object", "properties": {"name": {"type": "string"}, "owner": {"$ref": "#/$defs/Owner"}}, "required": ["name"]},
	    "Owner": {"type": "object", "properties": {"pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}}}}
	  }
	}`
	output := `{"oneOf": [
	  {"type": "object", "properties": {"status": {"const": 200}, "body": {"type": "object", "properties": {"id": {"type": "integer"}}}}},
	  {"type": "object", "properties": {"status": {"const": 404}, "body": {"type": "string"}}}
	]}`
	docs, err := env.ToolDocs(context.Background(), module.ToolDocsInput{
		ServiceID: "petstore", ToolID: "getPetById", Description: "Returns one pet.",
		InputSchema: json.RawMessage(input), OutputSchema: json.RawMessage(output),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# `petstore.getPetById`",
		"Returns one pet.",
		`const result = await cyrnel.services.petstore.tools.getPetById.invoke({ petId: 0, body: { name: "string" } });`,
		"| Name | Type | Required | Description |",
		"| `petId` | `number` | yes | ID of the pet \\| to fetch |",
		"| `status` | `\"available\" \\| \"sold\"` | no | Default: `\"available\"`. |",
		"| `tags` | `string[]` | no |  |",
		"| `x-trace` | `string \\| null` | no |  |",
		"| `body` | `Pet` | yes |  |",
		"interface GetPetByIdParams {\n  /** ID of the pet | to fetch */\n  petId: number;\n",
		`  "x-trace"?: string | null;`,
		"type Pet = { name: string; owner?: Owner };",
		"type Owner = { pets?: Pet[] };",
		"type GetPetByIdResult = { status?: 200; body?: { id?: number } } | { status?: 404; body?: string };",
		"ToolError",
		"Promise.all",
	} {
		if !strings.Contains(docs, want) {
			t.Errorf("tool docs lack %q\n%s", want, docs)
		}
	}
}

func TestToolDocsWithoutParameters(t *testing.T) {
	t.Parallel()
	env := New(nil)
	docs, err := env.ToolDocs(context.Background(), module.ToolDocsInput{ServiceID: "my-svc", ToolID: "ping", InputSchema: json.RawMessage(`{"type":"object"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`cyrnel.services["my-svc"].tools.ping.invoke({})`, "None: call `invoke()`", "type PingResult = unknown;"} {
		if !strings.Contains(docs, want) {
			t.Errorf("tool docs lack %q\n%s", want, docs)
		}
	}
	if _, err := env.ToolDocs(context.Background(), module.ToolDocsInput{ServiceID: "s", ToolID: "t", InputSchema: json.RawMessage(`[`)}); err == nil {
		t.Error("a broken schema was documented")
	}
}

func TestDocsListAtMostSomeTools(t *testing.T) {
	t.Parallel()
	tools := make([]module.Tool, 120)
	for i := range tools {
		tools[i] = module.Tool{ServiceID: "big", ToolID: fmt.Sprintf("t%d", i), Description: "a tool"}
	}
	doc := toolSummary(tools)
	if n := strings.Count(doc, ".invoke(params)"); n != maxListedTools || !strings.Contains(doc, "…and 70 more") {
		t.Fatalf("listed %d tools:\n%s", n, doc)
	}
}
