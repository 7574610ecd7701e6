package python

import (
	"encoding/json"
	"fmt"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// Config is the python module's configuration.
type Config struct {
	// Interpreter names one of the interpreters the operator declared at
	// start-up (as declared, its absolute or its real path); empty: the
	// first declared.
	Interpreter string `json:"interpreter"`
	// PoolSize is how many warm interpreters wait for work (of each kind,
	// where asyncio is preloaded).
	PoolSize int `json:"poolSize"`
	// Concurrency caps executions running at once; more wait as queued.
	Concurrency int `json:"concurrency"`
	// QueueLimit caps executions waiting for a slot.
	QueueLimit int `json:"queueLimit"`
	// Preload names modules every interpreter imports while warm. Every
	// execution gets a fresh interpreter, so what is preloaded is paid once
	// per execution, off its critical path but against throughput.
	Preload []string `json:"preload"`
	// SitePackages puts the interpreter's site-packages on sys.path (without
	// running site, which costs tens of milliseconds per start).
	SitePackages bool `json:"sitePackages"`
	// Packages are requirements (pip's form: name, name==1.2) installed
	// with their dependencies (resolved by pip) from wheels into an
	// environment of their own, built by the host from the operator's
	// package source (PackageSource).
	Packages []string `json:"packages"`
	// SystemSitePackages puts the interpreter's site-packages after the
	// declared packages' environment (with Packages only).
	SystemSitePackages bool `json:"systemSitePackages"`
	// Fork forks each interpreter from a warm template that has imported
	// the runtime and Preload, instead of starting it afresh; where the
	// template cannot run, interpreters are spawned (Status says why).
	Fork bool `json:"fork"`
	// StartTimeoutMs bounds an interpreter's warm-up; slower ones are replaced.
	StartTimeoutMs int `json:"startTimeoutMs"`
	// Sandbox says which isolation layers hold each interpreter.
	Sandbox module.SandboxConfig `json:"sandbox"`
	// Limits are each execution's resource limits.
	Limits module.LimitsConfig `json:"limits"`
}

func defaultConfig() Config {
	return Config{
		PoolSize:       2,
		Concurrency:    8,
		QueueLimit:     256,
		Preload:        []string{"asyncio"},
		SitePackages:   true,
		Fork:           true,
		StartTimeoutMs: 10000,
		Sandbox:        module.DefaultSandbox,
		Limits:         module.DefaultLimits,
	}
}

// configSchema is the JSON Schema the host validates the config against.
const configSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "interpreter": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "One of the Python interpreters the operator declared when starting the server (serve --python, CYRNEL_PYTHON), named as declared or by its absolute or real path; any other is refused (403). Default: the first declared."},
    "poolSize": {"type": "integer", "minimum": 1, "maximum": 64, "default": 2, "description": "Warm interpreters kept ready; where asyncio is preloaded, that many of each kind (with it, for programs that say async or await, and without it)."},
    "concurrency": {"type": "integer", "minimum": 1, "maximum": 256, "default": 8, "description": "Executions running at once; more wait as queued."},
    "queueLimit": {"type": "integer", "minimum": 0, "maximum": 100000, "default": 256, "description": "Executions allowed to wait for a slot; beyond it they fail at once."},
    "preload": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$"}, "maxItems": 64, "default": ["asyncio"], "description": "Modules every interpreter imports while warm (e.g. numpy, pandas). asyncio makes top-level await start at once (only programs that say async or await get it: the others run in interpreters without it, which cost less); matplotlib is also made ready to plot (pyplot, its font list, one figure drawn while warm), pandas to use frames (one grouped, described and printed while warm); with fork (the default) they are imported once, by the template, outside any execution's sandbox: list only modules you trust, and only modules that start no threads at import (the template refuses those, naming the threads)."},
    "sitePackages": {"type": "boolean", "default": true, "description": "Put the interpreter's site-packages on sys.path (without packages; with them, systemSitePackages decides)."},
    "packages": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200}, "maxItems": 200, "description": "Requirements (numpy, pandas==2.1.4, rich>=13,<14) installed from wheels only into an environment of their own, fetched from the package index or wheel directory the operator named at start-up (serve --package-index / --find-links; a build reaches the index and the file hosts of serve --package-host only); no package's code runs to install it. Dependencies are resolved by pip (with systemSitePackages, the interpreter's own packages satisfy them). Built once per interpreter and list, cached by content hash under the data directory; GET /environment shows status.build while it runs. A package that cannot be installed is 422 at packages[i] with pip's reason."},
    "systemSitePackages": {"type": "boolean", "default": false, "description": "With packages: also put the interpreter's own site-packages (Debian's numpy, say) on sys.path, after the declared packages; what is there satisfies the declared packages' dependencies."},
    "fork": {"type": "boolean", "default": true, "description": "Fork each interpreter from a warm template that has imported the runtime and the preload list (milliseconds per fresh interpreter, preload paid once), each child in its own namespaces and cgroups. Where the template cannot run (not root, no cgroups, a sandbox layer turned off) interpreters are spawned and GET /environment says why."},
    "startTimeoutMs": {"type": "integer", "minimum": 100, "maximum": 600000, "default": 10000, "description": "An interpreter that is not warm within this time is replaced."},
    ` + worker.SandboxSchema + `
  }
}`

// parseConfig reads a config over the defaults.
func parseConfig(raw map[string]any) (Config, error) {
	c := defaultConfig()
	if len(raw) == 0 {
		return c, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return c, fmt.Errorf("python config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("python config: %w", err)
	}
	return c, nil
}
