package python

import (
	"context"
	"strings"
	"text/template"

	"github.com/cyrnel/cyrnel/envs/module"
)

// guideFacts is what the guide says of the active configuration: each
// comes from the config in force or from what the sandboxed probe read.
type guideFacts struct {
	Version string
	// Preload is what every program's interpreter has imported; Asyncio:
	// asyncio too, where the program says async or await.
	Preload  []string
	Asyncio  bool
	Packages []Package
	Site     bool // site-packages on sys.path
	Network  bool
	Sandbox  bool
	Limits   module.LimitsConfig
	Plotting bool // matplotlib is installed
}

// guide is the agent's guide to the environment. Every statement in it is
// backed by a check in tests/guide_test.go that runs what it describes.
var guide = template.Must(template.New("guide").Funcs(template.FuncMap{"join": strings.Join}).Parse(`# Python environment

Your program runs as the ` + "`__main__`" + ` module of CPython {{.Version}}{{if .Sandbox}} in a sandbox{{end}}.
` + "`cyrnel`" + ` is already imported (` + "`import cyrnel`" + ` works too). Top-level ` + "`await`" + ` works:
the program then runs in an asyncio event loop{{if .Asyncio}}, and a program that says ` + "`async`" + ` or
` + "`await`" + ` starts with asyncio imported{{end}}.{{if .Preload}} Already imported when your program
starts: {{join .Preload ", "}}.{{end}}

## Fresh interpreters and sessions

- A process that names no session runs in a **fresh interpreter**: no globals,
  imports or files of an earlier process are there.
- A **session** keeps state: create one (` + "`POST /sessions`" + `, or the MCP tool
  ` + "`create_session`" + `), then run programs in it (` + "`POST /processes`" + ` with
  ` + "`\"session\": id`" + `, or ` + "`run_code`" + ` with ` + "`session`" + `). Globals, imports and the files in
  ` + "`/workspace`" + ` persist from one program to the next. A kill stops the running
  program and keeps the session; the session ends when it has been idle too
  long (default 10 minutes), when it is deleted, or when a limit ends its
  interpreter (a program in it then fails with reason ` + "`session_ended`" + `).

## Results

- ` + "`print()`" + ` and anything written to stdout/stderr (also by C extensions and child
  processes) is captured as the process's ` + "`stdout`" + ` and ` + "`stderr`" + `.
- ` + "`cyrnel.output(dict)`" + ` merges a JSON object into the structured ` + "`output`" + `:
  later keys overwrite earlier ones, new keys are added. Values must be
  JSON-serialisable, or it raises ` + "`TypeError`" + `.
- ` + "`cyrnel.display(obj)`" + ` records a rich display of ` + "`obj`" + ` (as in a notebook: an HTML
  table for a DataFrame, a PNG for a matplotlib figure, ` + "`text/plain`" + ` always).
  The value of a final expression is recorded the same way (kind ` + "`result`" + `){{if .Plotting}},
  and matplotlib figures left open are shown at the end{{end}}. They come back from
  ` + "`GET /processes/{pid}/displays`" + `, as ` + "`display`" + ` events, and as images and text in MCP.
- An uncaught exception ends the process ` + "`failed`" + ` with ` + "`ExcType: message`" + ` as its
  error and the traceback on stderr. ` + "`sys.exit(0)`" + ` counts as success.

## Files

- The working directory is ` + "`/workspace`" + `, private and writable; ` + "`/tmp`" + ` is the only
  other writable place.{{if .Sandbox}} Together they hold at most {{.Limits.TmpMB}} MiB.{{end}}
- Files sent with the process (` + "`files: [{path, content}]`" + ` in ` + "`POST /processes`" + `,
  content base64) are in ` + "`/workspace`" + ` when it starts; what it leaves there is
  listed at ` + "`GET /processes/{pid}/files`" + ` and downloaded from
  ` + "`GET /processes/{pid}/files/{path}`" + `.
- A session's workspace is read and written with
  ` + "`GET|PUT|DELETE /sessions/{id}/files/{path}`" + ` (a path may contain ` + "`/`" + `).

## Packages

{{if not .Site}}Only the standard library: site-packages are off in this configuration.
{{else if not .Packages}}Only the standard library: the interpreter has no packages installed.
{{else}}Besides the standard library, these packages are installed (import them by
their module name):

| package | version |
| --- | --- |
{{range .Packages}}| {{.Name}} | {{.Version}} |
{{end}}{{end}}
## Tools

Every enabled tool of every enabled service is a Python function:

` + "```python" + `
pet = cyrnel.services.petstore.getPetById(petId=1)   # keyword arguments only
print(pet["status"], pet["body"])
help(cyrnel.services.petstore.getPetById)            # typed signature, parameters, result
` + "```" + `

- The keyword arguments are the top-level properties of the tool's input
  schema; the host validates them before the call and raises
  ` + "`cyrnel.ToolError`" + ` (naming each failing field) when they do not fit.
- A tool returns its decoded result; any failure raises ` + "`cyrnel.ToolError`" + `,
  whose ` + "`.code`" + ` says what failed (` + "`invalid_parameters`" + ` with the failing
  fields in ` + "`.details`" + `, ` + "`not_found`" + `, ` + "`unavailable`" + `, ` + "`transport_error`" + `,
  ` + "`upstream_error`" + ` with the HTTP status in ` + "`.status`" + `, ` + "`tool_error`" + `,
  ` + "`disconnected`" + `, and ` + "`blocked`" + ` or ` + "`denied`" + ` when the operator's tool policy
  blocks the call or a human approval it needed was denied or expired; the
  call waits for that decision, and waiting does not count against the
  timeout). An OpenAPI tool's non-2xx answer is a result, not an error.
- ` + "`cyrnel.search_tools(\"what you want to do\", limit=10)`" + ` lists tools ranked by
  relevance: ` + "`[{serviceId, toolId, name, description, score}]`" + `.
- Each tool has an awaitable form, so calls can run concurrently:

` + "```python" + `
import asyncio
a, b = await asyncio.gather(
    cyrnel.services.petstore.getPetById.aio(petId=1),
    cyrnel.services.petstore.getPetById.aio(petId=2),
)
` + "```" + `

- The TypeScript-shaped form works too:
  ` + "`cyrnel.services[\"petstore\"].tools[\"getPetById\"].invoke({\"petId\": 1})`" + `.
- ` + "`dir(cyrnel.services)`" + ` lists the services; ` + "`dir(cyrnel.services.petstore)`" + ` its tools.
  ` + "`GET /tools`" + ` and ` + "`GET /tools/{serviceId}/{toolId}/docs`" + ` describe them.

Credentials never enter the interpreter: tool calls go through the host.

## Limits

- {{if .Network}}The network is reachable from programs.{{else}}There is no network: reach the outside world through tools.{{end}}
- The timeout is the process's ` + "`timeoutMs`" + ` (default 30000 ms); past it the
  process ends ` + "`timeout`" + `.
- stdout and stderr are each capped (default 1 MiB); past the cap the
  process ends ` + "`failed`" + ` with reason ` + "`output_limit`" + `.
{{if .Sandbox}}- Memory {{.Limits.MemoryMB}} MiB, CPU time {{.Limits.CPUSeconds}} s, {{.Limits.Processes}} processes, files up to
  {{.Limits.FileSizeMB}} MiB, {{.Limits.OpenFiles}} open files. Hitting a limit ends the process with a
  precise reason (` + "`memory_limit`" + `, ` + "`cpu_limit`" + `, …). Memory and CPU time count every
  process the program forks, and the program gets one core's share of CPU:
  forking workers does not make it faster.
{{else}}- The sandbox is off (trusted code only): memory, CPU time, processes and
  files are not limited.
{{end}}
## Example

` + "```python" + `
import statistics
data = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", statistics.mean(data))
cyrnel.output({"mean": statistics.mean(data), "max": max(data)})
` + "```" + `
`))

// Docs describes the active configuration for those who write code for it.
func (e *Env) Docs(context.Context) (string, error) {
	e.mu.Lock()
	f := guideFacts{
		Version: e.version, Preload: e.cfg.Preload, Asyncio: e.lean != nil, Packages: e.packages, Site: e.cfg.SitePackages,
		Network: e.cfg.Sandbox.Network || !e.cfg.Sandbox.Enabled, Sandbox: e.cfg.Sandbox.Enabled, Limits: e.cfg.Limits,
	}
	if f.Asyncio {
		f.Preload = e.lean
	}
	e.mu.Unlock()
	for _, p := range f.Packages {
		if strings.EqualFold(p.Name, "matplotlib") {
			f.Plotting = true
		}
	}
	var b strings.Builder
	if err := guide.Execute(&b, f); err != nil {
		return "", err
	}
	return b.String(), nil
}
