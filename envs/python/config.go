package python

import (
	"encoding/json"
	"fmt"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// Config is the python module's configuration.
type Config struct {
	// Interpreter is the Python to run; resolved once to its real path.
	Interpreter string `json:"interpreter"`
	// PoolSize is how many warm interpreters wait for work.
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
	// StartTimeoutMs bounds an interpreter's warm-up; slower ones are replaced.
	StartTimeoutMs int `json:"startTimeoutMs"`
	// Sandbox says which isolation layers hold each interpreter.
	Sandbox SandboxConfig `json:"sandbox"`
	// Limits are each execution's resource limits.
	Limits LimitsConfig `json:"limits"`
}

// SandboxConfig turns sandbox layers on and off. Every layer is on by
// default; a machine that lacks one makes Setup fail (naming it) unless that
// layer is turned off here.
type SandboxConfig struct {
	// Enabled false runs interpreters as plain child processes: nothing is
	// isolated. Only for trusted code.
	Enabled    bool `json:"enabled"`
	Network    bool `json:"network"` // true lets programs use the network
	Namespaces bool `json:"namespaces"`
	Landlock   bool `json:"landlock"`
	Seccomp    bool `json:"seccomp"`
	Cgroups    bool `json:"cgroups"`
}

// LimitsConfig are per-execution resource limits.
type LimitsConfig struct {
	MemoryMB   int64 `json:"memoryMb"`
	CPUSeconds int64 `json:"cpuSeconds"`
	Processes  int64 `json:"processes"`
	FileSizeMB int64 `json:"fileSizeMb"`
	OpenFiles  int64 `json:"openFiles"`
	TmpMB      int64 `json:"tmpMb"`
}

func defaultConfig() Config {
	return Config{
		Interpreter:    "python3",
		PoolSize:       2,
		Concurrency:    8,
		QueueLimit:     256,
		Preload:        []string{"asyncio"},
		SitePackages:   true,
		StartTimeoutMs: 10000,
		Sandbox:        SandboxConfig{Enabled: true, Namespaces: true, Landlock: true, Seccomp: true, Cgroups: true},
		Limits:         LimitsConfig{MemoryMB: 512, CPUSeconds: 60, Processes: 128, FileSizeMB: 64, OpenFiles: 256, TmpMB: 64},
	}
}

// configSchema is the JSON Schema the host validates the config against.
const configSchema = `{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "interpreter": {"type": "string", "minLength": 1, "default": "python3", "description": "Python interpreter to run (a name on PATH or an absolute path); resolved once to its real executable."},
    "poolSize": {"type": "integer", "minimum": 1, "maximum": 64, "default": 2, "description": "Warm interpreters kept ready."},
    "concurrency": {"type": "integer", "minimum": 1, "maximum": 256, "default": 8, "description": "Executions running at once; more wait as queued."},
    "queueLimit": {"type": "integer", "minimum": 0, "maximum": 100000, "default": 256, "description": "Executions allowed to wait for a slot; beyond it they fail at once."},
    "preload": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$"}, "maxItems": 64, "default": ["asyncio"], "description": "Modules every interpreter imports while warm (e.g. numpy, pandas). asyncio makes top-level await start at once; an empty list maximises fresh-interpreter throughput."},
    "sitePackages": {"type": "boolean", "default": true, "description": "Put the interpreter's site-packages on sys.path."},
    "startTimeoutMs": {"type": "integer", "minimum": 100, "maximum": 600000, "default": 10000, "description": "An interpreter that is not warm within this time is replaced."},
    "sandbox": {
      "type": "object",
      "additionalProperties": false,
      "description": "Isolation layers, all on by default. A machine that lacks a layer refuses to run until that layer is turned off here.",
      "properties": {
        "enabled": {"type": "boolean", "default": true, "description": "false runs interpreters as plain child processes with no isolation at all: for trusted code only."},
        "network": {"type": "boolean", "default": false, "description": "true lets programs use the network."},
        "namespaces": {"type": "boolean", "default": true, "description": "User, PID, network, mount, IPC and UTS namespaces with a private root and /tmp."},
        "landlock": {"type": "boolean", "default": true, "description": "Landlock file-system and network rules."},
        "seccomp": {"type": "boolean", "default": true, "description": "The seccomp system-call filter."},
        "cgroups": {"type": "boolean", "default": true, "description": "Per-execution memory and process cgroups (else rlimits)."}
      }
    },
    "limits": {
      "type": "object",
      "additionalProperties": false,
      "description": "Per-execution resource limits.",
      "properties": {
        "memoryMb": {"type": "integer", "minimum": 16, "maximum": 1048576, "default": 512},
        "cpuSeconds": {"type": "integer", "minimum": 1, "maximum": 86400, "default": 60},
        "processes": {"type": "integer", "minimum": 4, "maximum": 65536, "default": 128, "description": "Processes and threads."},
        "fileSizeMb": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 64},
        "openFiles": {"type": "integer", "minimum": 16, "maximum": 1048576, "default": 256},
        "tmpMb": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 64, "description": "Size of the private working directory (/tmp)."}
      }
    }
  }
}`

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

func (s SandboxConfig) relax() sandbox.Relax {
	return sandbox.Relax{Network: s.Network, Namespaces: !s.Namespaces, Landlock: !s.Landlock, Seccomp: !s.Seccomp, Cgroups: !s.Cgroups}
}

func (l LimitsConfig) sandbox() sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes: l.MemoryMB << 20, CPUSeconds: l.CPUSeconds, Procs: l.Processes,
		FileSizeBytes: l.FileSizeMB << 20, OpenFiles: l.OpenFiles, TmpBytes: l.TmpMB << 20,
	}
}
