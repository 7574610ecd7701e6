package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/module"
)

// ReadMachine reads the machine's figures.
func ReadMachine() (module.Machine, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return module.Machine{}, fmt.Errorf("read the machine's memory: %w", err)
	}
	m := module.Machine{MemoryBytes: int64(si.Totalram) * int64(si.Unit)}
	pidMax, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return module.Machine{}, err
	}
	threadsMax, err := readInt("/proc/sys/kernel/threads-max")
	if err != nil {
		return module.Machine{}, err
	}
	m.Processes = min(pidMax, threadsMax)
	if m.OpenFiles, err = readInt("/proc/sys/fs/nr_open"); err != nil {
		return module.Machine{}, err
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
