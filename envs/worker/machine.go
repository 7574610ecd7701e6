package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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

// ReadMachine reads the machine's figures.
func ReadMachine() (Machine, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return Machine{}, fmt.Errorf("read the machine's memory: %w", err)
	}
	m := Machine{MemoryBytes: int64(si.Totalram) * int64(si.Unit)}
	pidMax, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return Machine{}, err
	}
	threadsMax, err := readInt("/proc/sys/kernel/threads-max")
	if err != nil {
		return Machine{}, err
	}
	m.Processes = min(pidMax, threadsMax)
	if m.OpenFiles, err = readInt("/proc/sys/fs/nr_open"); err != nil {
		return Machine{}, err
	}
	return m, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the machine's limits: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the machine's limits: %s: %w", path, err)
	}
	return n, nil
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
