package python

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/cyrnel/cyrnel/envs/module"
)

// ToolDocs renders one tool as the Python function it is inside a program.
func (e *Env) ToolDocs(_ context.Context, in module.ToolDocsInput) (string, error) {
	doc, _ := renderTool(in)
	return doc, nil
}

// stubs give the runtime each tool's typed signature with listTools, and
// its documentation on help(tool) (the toolDocs request), both rendered by
// renderTool, like GET /tools/…/docs.
type stubs struct{}

// toolStub is a tool as the runtime gets it from listTools.
type toolStub struct {
	module.Tool
	Signature signature `json:"signature"`
}

func (stubs) Stub(t module.Tool) any {
	_, sig := renderTool(module.ToolDocsInput{ServiceID: t.ServiceID, ToolID: t.ToolID, Description: t.Description, InputSchema: t.InputSchema})
	return toolStub{Tool: t, Signature: sig}
}

func (stubs) Docs(in module.ToolDocsInput) string {
	doc, _ := renderTool(in)
	return doc
}

// signature is a tool function's signature: keyword-only parameters with
// the Python type of each (as a union of builtin names, "Any" when the
// schema gives none) and what it returns.
type signature struct {
	Parameters []sigParam `json:"parameters"`
	Returns    string     `json:"returns"`
}

type sigParam struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required"`
}

// renderTool renders a tool's documentation and its signature, so the two
// places they are read (help() in a program, the docs route) never differ.
func renderTool(in module.ToolDocsInput) (string, signature) {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(in.InputSchema, &schema) // a schema without properties documents no parameters
	required := map[string]bool{}
	for _, r := range schema.Required {
		required[r] = true
	}
	names := make([]string, 0, len(schema.Properties))
	for n := range schema.Properties {
		names = append(names, n)
	}
	// Required parameters first, then alphabetical: the order of a signature.
	sort.Slice(names, func(i, j int) bool {
		if required[names[i]] != required[names[j]] {
			return required[names[i]]
		}
		return names[i] < names[j]
	})
	sig := signature{Parameters: []sigParam{}, Returns: "dict"}
	var params, rows, example []string
	for _, n := range names {
		var p struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
		}
		_ = json.Unmarshal(schema.Properties[n], &p)
		typ := pyType(p.Type)
		sig.Parameters = append(sig.Parameters, sigParam{Name: n, Type: typ, Required: required[n]})
		if required[n] {
			params = append(params, fmt.Sprintf("%s: %s", n, typ))
			example = append(example, fmt.Sprintf("%s=%s", n, pyExample(p.Type)))
		} else {
			params = append(params, fmt.Sprintf("%s: %s | None = None", n, typ))
		}
		rows = append(rows, fmt.Sprintf("| `%s` | `%s` | %s | %s |", n, typ, yesNo(required[n]), oneLine(p.Description)))
	}
	var b strings.Builder
	call := fmt.Sprintf("cyrnel.services.%s.%s", in.ServiceID, in.ToolID)
	fmt.Fprintf(&b, "# `%s`\n\n", call)
	if in.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", in.Description)
	}
	b.WriteString("```python\n")
	if len(params) > 0 {
		fmt.Fprintf(&b, "%s(*, %s) -> %s\n", call, strings.Join(params, ", "), sig.Returns)
	} else {
		fmt.Fprintf(&b, "%s() -> %s\n", call, sig.Returns)
	}
	b.WriteString("```\n\n")
	if len(rows) > 0 {
		b.WriteString("## Parameters\n\n| name | type | required | description |\n| --- | --- | --- | --- |\n")
		b.WriteString(strings.Join(rows, "\n"))
		b.WriteString("\n\n")
	}
	b.WriteString("## Result\n\n")
	if len(in.OutputSchema) > 0 && string(in.OutputSchema) != "null" {
		fmt.Fprintf(&b, "The decoded result, described by this JSON Schema:\n\n```json\n%s\n```\n\n", indent(in.OutputSchema))
	} else {
		b.WriteString("The decoded result of the tool.\n\n")
	}
	b.WriteString("Failures raise `cyrnel.ToolError` (`.code`, `.status`, `.details`).\n\n## Example\n\n```python\n")
	fmt.Fprintf(&b, "result = %s(%s)\nprint(result)\n\n", call, strings.Join(example, ", "))
	fmt.Fprintf(&b, "# concurrently, from async code:\nresult = await %s.aio(%s)\n```\n", call, strings.Join(example, ", "))
	return b.String(), sig
}

func pyType(t any) string {
	switch v := t.(type) {
	case string:
		return pyTypeName(v)
	case []any:
		parts := make([]string, 0, len(v))
		for _, x := range v {
			if s, ok := x.(string); ok {
				parts = append(parts, pyTypeName(s))
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, " | ")
		}
	}
	return "Any"
}

func pyTypeName(t string) string {
	switch t {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "array":
		return "list"
	case "object":
		return "dict"
	case "null":
		return "None"
	}
	return "Any"
}

func pyExample(t any) string {
	if s, ok := t.(string); ok {
		switch s {
		case "string":
			return `"..."`
		case "integer":
			return "1"
		case "number":
			return "1.0"
		case "boolean":
			return "True"
		case "array":
			return "[]"
		}
	}
	return "{}"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(s), "\n", " "), "|", `\|`)
}

func indent(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
