package module

import "fmt"

// SandboxConfig turns sandbox layers on and off, as environments expose it in
// their module config ("sandbox"). Every layer is on by default; a machine
// that lacks one refuses to run (naming it) unless that layer is turned off,
// and the host refuses a config that turns one off unless the operator
// allowed that.
type SandboxConfig struct {
	// Enabled false runs workers as plain child processes: nothing is
	// isolated. Only for trusted code.
	Enabled    bool `json:"enabled"`
	Network    bool `json:"network"` // true lets programs use the network
	Namespaces bool `json:"namespaces"`
	Landlock   bool `json:"landlock"`
	Seccomp    bool `json:"seccomp"`
	Cgroups    bool `json:"cgroups"`
}

// LimitsConfig are per-worker resource limits, as environments expose them
// in their module config ("limits"); the host refuses any above what the
// machine has.
type LimitsConfig struct {
	MemoryMB   int64 `json:"memoryMb"`
	CPUSeconds int64 `json:"cpuSeconds"`
	Processes  int64 `json:"processes"`
	FileSizeMB int64 `json:"fileSizeMb"`
	OpenFiles  int64 `json:"openFiles"`
	TmpMB      int64 `json:"tmpMb"`
}

// DefaultSandbox keeps every layer.
var DefaultSandbox = SandboxConfig{Enabled: true, Namespaces: true, Landlock: true, Seccomp: true, Cgroups: true}

// DefaultLimits are the documented defaults.
var DefaultLimits = LimitsConfig{MemoryMB: 512, CPUSeconds: 60, Processes: 128, FileSizeMB: 64, OpenFiles: 256, TmpMB: 64}

// Weakened names, by their JSON names, the settings of s that give up
// isolation DefaultSandbox keeps.
func (s SandboxConfig) Weakened() []string {
	var out []string
	for _, f := range []struct {
		name string
		weak bool
	}{
		{"enabled", !s.Enabled}, {"network", s.Network}, {"namespaces", !s.Namespaces},
		{"landlock", !s.Landlock}, {"seccomp", !s.Seccomp}, {"cgroups", !s.Cgroups},
	} {
		if f.weak {
			out = append(out, f.name)
		}
	}
	return out
}

// MaxCPUSeconds is the documented cap on limits.cpuSeconds (an hour of CPU
// per execution; the config schema's maximum).
const MaxCPUSeconds = 3600

// Machine is what this machine has, read once at start-up: no execution's
// limits may ask for more.
type Machine struct {
	MemoryBytes int64 // physical memory (sysinfo's total RAM)
	// Processes is the most processes and threads the kernel allows at
	// all: the lower of kernel.pid_max and kernel.threads-max.
	Processes int64
	// OpenFiles is fs.nr_open, the kernel's ceiling on RLIMIT_NOFILE.
	OpenFiles int64
}

// LimitProblem is one limit above what the machine has; Field is its JSON
// name (memoryMb).
type LimitProblem struct {
	Field   string
	Message string
}

// Beyond lists the limits of l above what m has: memory (and the /tmp
// tmpfs, which is memory) above its RAM, processes above what the kernel
// allows, open files above fs.nr_open, CPU time above MaxCPUSeconds.
func (l LimitsConfig) Beyond(m Machine) []LimitProblem {
	var out []LimitProblem
	ramMB := m.MemoryBytes >> 20
	if l.MemoryMB > ramMB {
		out = append(out, LimitProblem{"memoryMb", fmt.Sprintf("%d MiB is more than this machine's memory (%d MiB)", l.MemoryMB, ramMB)})
	}
	if l.TmpMB > ramMB {
		out = append(out, LimitProblem{"tmpMb", fmt.Sprintf("%d MiB is more than this machine's memory (%d MiB), which holds /tmp", l.TmpMB, ramMB)})
	}
	if l.Processes > m.Processes {
		out = append(out, LimitProblem{"processes", fmt.Sprintf("%d is more than the kernel allows on this machine (%d: the lower of kernel.pid_max and kernel.threads-max)", l.Processes, m.Processes)})
	}
	if l.OpenFiles > m.OpenFiles {
		out = append(out, LimitProblem{"openFiles", fmt.Sprintf("%d is more than the kernel allows (fs.nr_open %d)", l.OpenFiles, m.OpenFiles)})
	}
	if l.CPUSeconds > MaxCPUSeconds {
		out = append(out, LimitProblem{"cpuSeconds", fmt.Sprintf("%d is more than the cap of %d seconds", l.CPUSeconds, MaxCPUSeconds)})
	}
	return out
}
