package sandbox

import (
	"time"
)

// Usage is what a sandbox has used since Start or the last ResetUsage.
type Usage struct {
	// CPU is the CPU time of all its processes, the ended ones included;
	// 0 without a CPU accounting cgroup.
	CPU time.Duration
	// PeakMemoryBytes is the most memory it held at once (with the
	// page cache and tmpfs pages charged to it); 0 without a memory
	// cgroup.
	PeakMemoryBytes int64
}

// Usage reports the sandbox's usage from its cgroups' own counters, live
// or, once it has ended, as they were at the end.
func (p *Process) Usage() Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return p.final
	}
	return p.usageLocked()
}

func (p *Process) usageLocked() Usage {
	var u Usage
	if p.cg == nil {
		return u
	}
	if p.cg.acctVersion != 0 {
		if cpu, err := p.cg.cpuUsage(); err != nil {
			p.logger.Warn("sandbox usage", "err", err)
		} else {
			u.CPU = max(cpu-p.cpuBase, 0)
		}
	}
	if p.cg.memVersion != 0 {
		if peak, err := p.cg.peakMemory(); err != nil {
			p.logger.Warn("sandbox usage", "err", err)
		} else {
			u.PeakMemoryBytes = peak
		}
	}
	return u
}

// ResetUsage starts Usage and the CPU limit over: a worker serving several
// executions in one sandbox accounts for, and limits, each one alone. On
// cgroup v2 before kernel 6.12 the peak memory cannot be reset and stays
// the sandbox's lifetime peak.
func (p *Process) ResetUsage() {
	p.mu.Lock()
	if p.ended || p.cg == nil {
		p.mu.Unlock()
		return
	}
	if p.cg.acctVersion != 0 {
		if cpu, err := p.cg.cpuUsage(); err == nil {
			p.cpuBase = cpu
		}
	}
	if err := p.cg.resetPeak(); err != nil {
		p.logger.Warn("sandbox usage", "err", err)
	}
	// The CPU watch needs no wake-up: a new base only leaves more of the
	// limit, so its next look, due sooner than that requires, recomputes.
	p.mu.Unlock()
}

// cpuWatchFloor is the shortest pause between two looks at the CPU cgroup.
const cpuWatchFloor = 10 * time.Millisecond

// watchCPU kills the sandbox once its CPU cgroup has used cpuLimit. The
// sandbox cannot use more than cpuRate, so the next look is due no sooner
// than the time the rest of the limit takes at that rate: a sandbox far
// from its limit costs one read now and then.
func (p *Process) watchCPU() {
	for {
		p.mu.Lock()
		if p.ended {
			p.mu.Unlock()
			return
		}
		used, err := p.cg.cpuUsage()
		left := p.cpuLimit - (used - p.cpuBase)
		if err == nil && left <= 0 {
			p.cpuOver = true
			if err := p.killLocked(); err != nil {
				p.logger.Warn("sandbox CPU limit", "err", err)
			}
		}
		p.mu.Unlock()
		if err != nil {
			p.logger.Warn("sandbox CPU limit: stop watching", "err", err)
			return
		}
		if left <= 0 {
			return
		}
		t := time.NewTimer(max(time.Duration(int64(left)*1000/p.cpuRate), cpuWatchFloor))
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return
		}
	}
}
