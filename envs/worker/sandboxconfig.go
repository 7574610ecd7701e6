package worker

import (
	"fmt"
	"log/slog"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// SandboxSchema is the JSON Schema of module.SandboxConfig and module.LimitsConfig, as
// "sandbox" and "limits" properties of a module config schema.
const SandboxSchema = `"sandbox": {
      "type": "object",
      "additionalProperties": false,
      "description": "Isolation layers, all on by default. Turning any of them off (or network on) needs the server started with --allow-unsandboxed. A machine that lacks a layer refuses to run until that layer is turned off here.",
      "properties": {
        "enabled": {"type": "boolean", "default": true, "description": "false runs workers as plain child processes with no isolation at all: for trusted code only."},
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
      "description": "Resource limits of each worker process.",
      "properties": {
        "memoryMb": {"type": "integer", "minimum": 16, "maximum": 1048576, "default": 512, "description": "Memory of the whole process tree; at most the machine's physical memory."},
        "cpuSeconds": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 60, "description": "CPU time of the whole process tree; at most an hour."},
        "processes": {"type": "integer", "minimum": 4, "maximum": 65536, "default": 128, "description": "Processes and threads; at most what the kernel allows (the lower of kernel.pid_max and kernel.threads-max)."},
        "fileSizeMb": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 64},
        "openFiles": {"type": "integer", "minimum": 16, "maximum": 1048576, "default": 256},
        "tmpMb": {"type": "integer", "minimum": 1, "maximum": 1048576, "default": 64, "description": "Size of the private working directory (/tmp)."}
      }
    }`

func relaxOf(s module.SandboxConfig) sandbox.Relax {
	return sandbox.Relax{Network: s.Network, Namespaces: !s.Namespaces, Landlock: !s.Landlock, Seccomp: !s.Seccomp, Cgroups: !s.Cgroups}
}

func limitsOf(l module.LimitsConfig) sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes: l.MemoryMB << 20, CPUSeconds: l.CPUSeconds, Procs: l.Processes,
		FileSizeBytes: l.FileSizeMB << 20, OpenFiles: l.OpenFiles, TmpBytes: l.TmpMB << 20,
	}
}

// ChooseLauncher picks how workers start: in the sandbox with the layers the
// config asks for, refusing when the machine lacks one of them; or, only
// when the config says so, as plain processes. It also describes what is in
// force, for GET /environment.
func ChooseLauncher(log *slog.Logger, s module.SandboxConfig, l module.LimitsConfig, readPaths []string) (Launcher, map[string]any, error) {
	if !s.Enabled {
		log.Warn("the sandbox is disabled by config: programs run as plain processes with the host's privileges")
		return Plain{}, map[string]any{"enabled": false}, nil
	}
	support := sandbox.Probe()
	relax := relaxOf(s)
	if err := support.Check(relax); err != nil {
		return nil, nil, fmt.Errorf("refusing to run without the sandbox: %w (to run anyway, start the server with --allow-unsandboxed and turn the missing layers off in the module's sandbox config)", err)
	}
	return Sandboxed{ReadPaths: readPaths, Limits: limitsOf(l), Relax: relax, Log: log},
		map[string]any{"enabled": true, "layers": support.Layers(relax), "limits": l}, nil
}
