package typescript

import (
	"context"
	"fmt"
	"strings"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Docs is what an AI client reads to write programs for this environment.
// When the host can list tools, they are summarised at the end.
func (e *Environment) Docs(ctx context.Context) (string, error) {
	e.mu.Lock()
	b, cfg := e.b, e.cfg
	e.mu.Unlock()
	if b == nil {
		cfg, _ = ParseConfig(nil)
	}
	var out strings.Builder
	fmt.Fprintf(&out, environmentDocs, cfg.TimeoutMs, DefaultMaxCallStackSize, DefaultMaxConcurrentToolCalls)
	if b != nil {
		tools, err := b.ListTools(ctx)
		if err != nil {
			fmt.Fprintf(&out, "\n## Available tools\n\nThe tool list could not be read: %s\n", err)
		} else {
			out.WriteString(toolSummary(tools))
		}
	}
	return out.String(), nil
}

func toolSummary(tools []module.Tool) string {
	var b strings.Builder
	b.WriteString("\n## Available tools\n\n")
	if len(tools) == 0 {
		b.WriteString("No tools are enabled right now.\n")
		return b.String()
	}
	b.WriteString("Each tool's full documentation (parameters, result) is at `GET /tools/{serviceId}/{toolId}/docs`.\n\n")
	shown := tools
	if len(shown) > maxListedTools {
		shown = shown[:maxListedTools]
	}
	for _, t := range shown {
		desc := oneLine(t.Description)
		if desc == "" {
			desc = oneLine(t.Name)
		}
		fmt.Fprintf(&b, "- `%s.invoke(params)`", toolAccessor(t.ServiceID, t.ToolID))
		if desc != "" {
			fmt.Fprintf(&b, " — %s", desc)
		}
		b.WriteByte('\n')
	}
	if more := len(tools) - len(shown); more > 0 {
		fmt.Fprintf(&b, "\n…and %d more: search them with `GET /tools?q=…`.\n", more)
	}
	return b.String()
}

// maxListedTools keeps the docs readable (and an agent's context small) when
// services bring hundreds of tools.
const maxListedTools = 50

// ToolDocs renders one tool the way a program calls it.
func (e *Environment) ToolDocs(_ context.Context, in module.ToolDocsInput) (string, error) {
	input, err := parseSchema(in.InputSchema)
	if err != nil {
		return "", fmt.Errorf("typescript: tool docs for %s.%s: input schema: %w", in.ServiceID, in.ToolID, err)
	}
	output, err := parseSchema(in.OutputSchema)
	if err != nil {
		return "", fmt.Errorf("typescript: tool docs for %s.%s: output schema: %w", in.ServiceID, in.ToolID, err)
	}
	inTypes, outTypes := newTSTypes(input), newTSTypes(output)
	base := tsTypeName(in.ToolID)
	accessor := toolAccessor(in.ServiceID, in.ToolID)

	var b strings.Builder
	fmt.Fprintf(&b, "# `%s.%s`\n\n", in.ServiceID, in.ToolID)
	if d := strings.TrimSpace(in.Description); d != "" {
		b.WriteString(d + "\n\n")
	}
	fmt.Fprintf(&b, "```ts\nconst result = await %s.invoke(%s);\n```\n\n",
		accessor, literal(inTypes.exampleObject(input, 0, true)))

	b.WriteString("## Parameters\n\n")
	props := input.obj("properties")
	if props == nil || len(props.keys) == 0 {
		b.WriteString("None: call `invoke()` or `invoke({})`.\n\n")
	} else {
		required := requiredSet(input)
		b.WriteString("| Name | Type | Required | Description |\n| --- | --- | --- | --- |\n")
		for _, k := range props.keys {
			sub, _ := props.vals[k].(*object)
			req := "no"
			if required[k] {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", k, cell(inTypes.render(sub, 1)), req, cell(propertyNotes(sub)))
		}
		fmt.Fprintf(&b, "\n```ts\n%s%s```\n\n", paramsInterface(inTypes, input, base+"Params"), inTypes.declarations())
	}

	b.WriteString("## Result\n\n")
	resultType := outTypes.render(output, 0)
	fmt.Fprintf(&b, "`invoke` returns a `Promise<%sResult>`:\n\n```ts\ntype %sResult = %s;\n%s```\n\n", base, base, resultType, outTypes.declarations())
	fmt.Fprintf(&b, "A failed call rejects with an `Error` whose `name` is `\"ToolError\"` (with `serviceId` and `toolId`); "+
		"catch it with `try { … } catch (e) { … }` or let it fail the process. Calls run concurrently with `Promise.all`:\n\n"+
		"```ts\nconst [a, b] = await Promise.all([\n  %s.invoke(%s),\n  %s.invoke(%s),\n]);\n```\n",
		accessor, literal(inTypes.exampleObject(input, 0, true)), accessor, literal(inTypes.exampleObject(input, 0, true)))
	return b.String(), nil
}

// paramsInterface declares the parameters object with each property's
// description as a doc comment.
func paramsInterface(t *tsTypes, s *object, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "interface %s {\n", name)
	required := requiredSet(s)
	props := s.obj("properties")
	for _, k := range props.keys {
		sub, _ := props.vals[k].(*object)
		if d := oneLine(sub.str("description")); d != "" {
			fmt.Fprintf(&b, "  /** %s */\n", strings.ReplaceAll(d, "*/", "* /"))
		}
		opt := "?"
		if required[k] {
			opt = ""
		}
		fmt.Fprintf(&b, "  %s%s: %s;\n", propertyKey(k), opt, t.render(sub, 1))
	}
	b.WriteString("}\n")
	return b.String()
}

// propertyNotes is a parameter's description with its format and default.
func propertyNotes(s *object) string {
	notes := []string{}
	if d := oneLine(s.str("description")); d != "" {
		notes = append(notes, d)
	}
	if f := s.str("format"); f != "" {
		notes = append(notes, "Format: `"+f+"`.")
	}
	if v, ok := s.get("default"); ok {
		notes = append(notes, "Default: `"+literal(v)+"`.")
	}
	return strings.Join(notes, " ")
}

func toolAccessor(serviceID, toolID string) string {
	return "cyrnel.services" + member(serviceID) + ".tools" + member(toolID)
}

func member(name string) string {
	if identifier.MatchString(name) {
		return "." + name
	}
	return "[" + literal(name) + "]"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

// environmentDocs is formatted with the default timeout, the call depth
// limit and the per-run tool call concurrency.
const environmentDocs = "# TypeScript environment\n" + `
Programs are TypeScript, run by an embedded modern-JavaScript engine (goja) after
esbuild strips the types. Types are not checked: write them for clarity,
they never fail a run. Each execution gets a fresh runtime, so nothing — globals,
variables, timers — carries over from one process to the next.

## Program shape

Your code is the body of an ` + "`async`" + ` function:

- top-level ` + "`await`" + ` works, and so does top-level ` + "`return`" + ` (it ends the program successfully);
- there are no modules: ` + "`import`" + ` (static or dynamic) and ` + "`export`" + ` are syntax errors;
- the program ends when its top-level code finishes. Timers still pending are dropped and
  tool calls still running are cancelled, so ` + "`await`" + ` what you start.

The process succeeds when the code finishes. It fails when an exception escapes,
when a promise is rejected with no handler (as in Node), or when the code awaits a
promise that nothing can settle. The error is ` + "`Name: message`" + `
(e.g. ` + "`TypeError: x is not a function`" + `) and stderr carries the stack with
TypeScript line:column positions (` + "`main.ts:12:5`" + `). Syntax errors report
` + "`SyntaxError: … (main.ts:line:col)`" + `.

## Globals

Only these are added to standard JavaScript (no ` + "`require`" + `, no file system,
no network, no ` + "`fetch`" + `; reach the outside world through tools):

| Global | Does |
| --- | --- |
| ` + "`cyrnel.output(obj)`" + ` | Merges ` + "`obj`" + ` into the process output: later keys overwrite, new keys are added. ` + "`obj`" + ` must be a JSON-serialisable object; functions, symbols, BigInts and cycles throw a ` + "`TypeError`" + `. |
| ` + "`cyrnel.services[s].tools[t].invoke(params)`" + ` | Calls tool ` + "`t`" + ` of service ` + "`s`" + ` with a JSON object of parameters; returns a Promise of the decoded result. |
| ` + "`console.log/info/debug(...args)`" + ` | Writes a line to stdout. |
| ` + "`console.warn/error(...args)`" + ` | Writes a line to stderr. |
| ` + "`setTimeout(fn, ms, ...args)`" + ` / ` + "`clearTimeout(id)`" + ` | Timers, e.g. ` + "`await new Promise(r => setTimeout(r, 100))`" + `. |

Console arguments are separated by spaces; strings print as they are, objects and
arrays as JSON, errors with their stack.

## Tools

` + "```ts" + `
const pet = await cyrnel.services.petstore.tools.getPetById.invoke({ petId: 1 });
console.log(pet.status, pet.body);
` + "```" + `

- Parameters are one object whose properties are the tool's parameters (see the tool's
  docs). The host validates them against the tool's input schema.
- The promise resolves with the tool's result as plain JSON data. It rejects with an
  ` + "`Error`" + ` named ` + "`ToolError`" + ` (properties ` + "`serviceId`" + `, ` + "`toolId`" + `)
  carrying the host's message — a validation failure, a transport error, an unknown tool.
- Calls run concurrently: ` + "`await Promise.all([a.invoke(x), b.invoke(y)])`" + `
  (at most %[3]d at a time per process; the rest wait their turn).
- ` + "`Object.keys(cyrnel.services)`" + ` lists the services and
  ` + "`Object.keys(cyrnel.services.s.tools)`" + ` a service's tools; each tool object has
  ` + "`name`" + ` and ` + "`description`" + `. Test presence with ` + "`\"s\" in cyrnel.services`" + `:
  an unknown name still yields an object whose ` + "`invoke`" + ` rejects with a message listing
  what is available.

## Limits

- Timeout: %[1]d ms unless the process sets ` + "`timeoutMs`" + `; a timed-out process
  ends ` + "`timeout`" + `, even in a tight loop.
- Call depth: %[2]d frames; deeper recursion fails with
  ` + "`RangeError: Maximum call stack size exceeded`" + `.
- No memory limit inside the engine itself: allocate with care.
- Not available: async iteration helpers such as ` + "`Array.fromAsync`" + `, ` + "`Intl`" + `,
  ` + "`structuredClone`" + `, ` + "`TextEncoder`" + `, ` + "`queueMicrotask`" + `, ` + "`setInterval`" + `;
  in regular expressions, ` + "`\\p{…}`" + ` property escapes do not match as in browsers and the
  ` + "`d`" + ` and ` + "`v`" + ` flags throw a ` + "`SyntaxError`" + `.
  Async generators and ` + "`for await`" + ` work.

## Example

` + "```ts" + `
interface Pet { id: number; name: string; status?: string }

const ids = [1, 2, 3];
const results = await Promise.all(
  ids.map((petId) => cyrnel.services.petstore.tools.getPetById.invoke({ petId })),
);
const pets: Pet[] = results.map((r: any) => r.body);
console.log("fetched", pets.length, "pets");

try {
  await cyrnel.services.petstore.tools.getPetById.invoke({ petId: -1 });
} catch (e) {
  console.error("lookup failed:", (e as Error).message);
}

cyrnel.output({ pets, names: pets.map((p) => p.name) });
` + "```" + `
`
