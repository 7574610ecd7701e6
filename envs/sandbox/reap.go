package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/cyrnel/cyrnel/envs/affinity"
)

// own is the owner goroutine: it starts the init from its locked thread,
// hands it the spec, relays the start report, then reaps the init, collects
// the exit report and cleans up.
func (p *Process) own(cmd *exec.Cmd, spec []byte, specR, specW, statusR, statusW *os.File, started chan<- error) {
	runtime.LockOSThread()
	defer close(p.done)
	var err error
	if p.hostID != 0 {
		// The init's user namespace must belong to the sandbox's uid.
		var restored bool
		start := func() error { return affinity.Process.Spawn(cmd.Start) }
		if err, restored = asOwner(p.hostID, start); restored {
			defer runtime.UnlockOSThread()
		}
	} else {
		err = affinity.Process.Spawn(cmd.Start)
		defer runtime.UnlockOSThread()
	}
	closeAll(specR, statusW) // the init has its copies
	if err != nil {
		closeAll(specW, statusR)
		err = fmt.Errorf("sandbox: start helper: %w", err)
		p.exit = ExitInfo{Code: -1, Err: err}
		p.cleanup()
		started <- err
		return
	}
	p.mu.Lock()
	p.proc = cmd.Process
	killed := p.killed
	p.mu.Unlock()
	startErr := p.handOver(cmd.Process.Pid, spec, specW)
	if killed || startErr != nil {
		_ = cmd.Process.Kill() // not reaped yet: cannot fail
	}
	dec := json.NewDecoder(statusR)
	var first report
	if err := dec.Decode(&first); startErr == nil {
		switch {
		case err != nil:
			startErr = errors.New("sandbox: the helper ended before reporting (does the binary call sandbox.MaybeRun first thing?)")
		case first.Error != "":
			startErr = errors.New(first.Error)
		case !first.Started:
			startErr = fmt.Errorf("sandbox: unexpected first report %+v", first)
		}
		p.procSubset = first.ProcSubset
	}
	if startErr != nil {
		_ = cmd.Process.Kill()
	}
	started <- startErr

	waitErr := cmd.Wait()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	var exit *exitReport
	var initErr string
	for {
		var r report
		if dec.Decode(&r) != nil {
			break // EOF: the init is gone
		}
		if r.Exit != nil {
			exit = r.Exit
		}
		if r.Error != "" {
			initErr = r.Error
		}
	}
	_ = statusR.Close()
	p.exit = p.exitInfo(cmd.ProcessState, waitErr, exit, initErr)
	p.mu.Lock()
	p.final, p.ended = p.usageLocked(), true
	p.mu.Unlock()
	p.cleanup()
}

// handOver moves the init into the sandbox's cgroups, then sends it the
// spec: the init reads the spec before it starts anything, so every process
// of the sandbox is born inside the cgroups.
func (p *Process) handOver(pid int, spec []byte, specW *os.File) error {
	defer specW.Close()
	if p.cg != nil {
		if err := p.cg.add(pid); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if _, err := specW.Write(spec); err != nil {
		return fmt.Errorf("sandbox: send spec: %w", err)
	}
	return nil
}

func (p *Process) exitInfo(state *os.ProcessState, waitErr error, r *exitReport, initErr string) ExitInfo {
	info := ExitInfo{Code: -1}
	if p.cg != nil {
		info.MemoryLimit = p.cg.oomKilled()
		info.ProcLimit = p.cg.forkRefused()
	}
	if r != nil {
		info.Code = r.Code
		info.Signal = syscall.Signal(r.Signal)
		info.CPUTime = time.Duration(r.CPUNanos)
		info.MaxRSS = r.MaxRSSKiB << 10
	} else {
		// The init ended without a report: Kill, the OOM killer, the
		// host dying — or a failure of the sandbox itself.
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			info.Signal = ws.Signal()
		}
		p.mu.Lock()
		info.Killed = p.killed
		cpuOver := p.cpuOver
		p.mu.Unlock()
		if !info.Killed && !info.MemoryLimit && !cpuOver {
			info.Err = fmt.Errorf("sandbox: init ended without a report (%v)", state)
			if initErr != "" {
				info.Err = errors.New(initErr)
			} else if waitErr != nil && !errors.As(waitErr, new(*exec.ExitError)) {
				info.Err = fmt.Errorf("sandbox: wait: %w", waitErr)
			}
		}
	}
	p.mu.Lock()
	info.CPULimit = p.cpuOver
	p.mu.Unlock()
	if p.layers.CPU == KindRlimit {
		info.CPULimit = info.Signal == syscall.SIGXCPU ||
			(info.Signal == syscall.SIGKILL && p.cpuLimit > 0 && info.CPUTime >= p.cpuLimit)
	}
	return info
}

// cleanup removes what the sandbox leaves on the host: without namespaces,
// strays in its cgroups and its work directory; always, the cgroups.
func (p *Process) cleanup() {
	if p.keeper != nil {
		p.keeper.ran(p.keeperClean)
		return
	}
	defer p.giveID()
	if p.cg != nil {
		if !p.layers.Namespaces {
			p.cg.killAll()
		}
		p.mu.Lock()
		slots := p.cgSlots
		p.mu.Unlock()
		release := p.cg.remove
		if slots != nil {
			release = func() error { return slots.put(p.cg) }
		}
		if err := release(); err != nil {
			p.logger.Warn("sandbox clean-up", "err", err)
		}
	}
	if p.workDir != "" {
		if err := os.RemoveAll(p.workDir); err != nil {
			p.logger.Warn("sandbox clean-up", "err", fmt.Errorf("remove work dir: %w", err))
		}
	}
}

// takeID gives the sandbox a host uid of its own.
func (p *Process) takeID() error {
	p.ids = currentIDs()
	id, err := p.ids.acquire()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	p.hostID, p.layers.UID = id, id
	return nil
}

// giveID returns the sandbox's uid once nothing of the sandbox is left.
func (p *Process) giveID() {
	if p.hostID == 0 {
		return
	}
	id, ids := p.hostID, p.ids
	p.mu.Lock()
	after := p.idsAfter
	p.mu.Unlock()
	release := func() {
		if err := ids.release(id); err != nil {
			p.logger.Warn("sandbox clean-up", "err", err)
		}
	}
	if after == nil {
		release()
		return
	}
	go func() {
		<-after
		release()
	}()
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close() // pipe ends: nothing to flush
	}
}
