package affinity

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The tests change this process's affinity: none runs in parallel.

// cpusOf is the CPUs of every thread of pid, one set each.
func cpusOf(t *testing.T, pid int) []unix.CPUSet {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var sets []unix.CPUSet
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var s unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &s); err == nil {
			sets = append(sets, s)
		}
	}
	if len(sets) == 0 {
		t.Fatalf("no thread of %d read", pid)
	}
	return sets
}

// allAre checks that every thread of pid holds want.
func allAre(t *testing.T, what string, pid int, want unix.CPUSet) {
	t.Helper()
	for i, s := range cpusOf(t, pid) {
		if s != want {
			t.Errorf("%s: thread %d of %d has %d CPUs, want %d", what, i, pid, s.Count(), want.Count())
			return
		}
	}
}

func own(t *testing.T) unix.CPUSet {
	t.Helper()
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// child starts a shell that starts a grandchild, both living until the
// shell's stdin ends; it returns both pids.
func child(t *testing.T, p *Pin) (shell, grandchild int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 3600 & echo $!; read x; kill $!")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Spawn(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if grandchild, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, grandchild
}

// follow is p.Follow(pid), which must not fail here.
func follow(t *testing.T, p *Pin, pid int) func() error {
	t.Helper()
	unfollow, err := p.Follow(pid)
	if err != nil {
		t.Fatal(err)
	}
	return unfollow
}

func TestPinFollowSpawnRelease(t *testing.T) {
	before := own(t)
	p := New()
	follower, followersChild := child(t, p)
	unfollow := follow(t, p, follower)
	if err := p.To(); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		// One CPU: nothing to gain, so nothing is pinned.
		if p.CPU() != -1 {
			t.Fatalf("one CPU, pinned to %d", p.CPU())
		}
		allAre(t, "one CPU", os.Getpid(), before)
		return
	}
	cpu := p.CPU()
	if cpu < 0 || !before.IsSet(cpu) {
		t.Fatalf("pinned to %d", cpu)
	}
	pinned := *one(cpu)
	allAre(t, "pinned", os.Getpid(), pinned)
	allAre(t, "a follower", follower, pinned)
	allAre(t, "a follower's child", followersChild, pinned)

	// Started while pinned: off the pin, and the starting thread pinned again.
	other, _ := child(t, p)
	allAre(t, "a child started while pinned", other, before)
	allAre(t, "pinned after a start", os.Getpid(), pinned)
	// A follower that joins while pinned is pinned at once.
	unfollowOther := follow(t, p, other)
	defer unfollowOther()
	allAre(t, "a follower joining", other, pinned)

	if err := unfollow(); err != nil {
		t.Fatal(err)
	}
	if p.CPU() != cpu {
		t.Fatalf("one of two followers gone: pinned to %d, want %d", p.CPU(), cpu)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if p.CPU() != -1 {
		t.Fatalf("released, still pinned to %d", p.CPU())
	}
	allAre(t, "released", os.Getpid(), before)
	allAre(t, "a follower still following", other, before)
	allAre(t, "no follower any more", follower, pinned) // left as it was
	if err := p.Release(); err != nil {
		t.Errorf("a second release: %v", err)
	}
}

func TestPinHoldsOnlyWithAFollower(t *testing.T) {
	before := own(t)
	p := New()
	if err := p.To(); err != nil {
		t.Fatal(err)
	}
	if p.CPU() != -1 {
		t.Fatalf("no follower, yet pinned to %d", p.CPU())
	}
	allAre(t, "no follower", os.Getpid(), before)
	pid, _ := child(t, p)
	unfollow := follow(t, p, pid)
	if before.Count() < 2 {
		if p.CPU() != -1 {
			t.Fatalf("one CPU, pinned to %d", p.CPU())
		}
		return
	}
	if p.CPU() < 0 {
		t.Fatal("a follower came, nothing pinned")
	}
	cpu := p.CPU()
	allAre(t, "a follower came", os.Getpid(), *one(cpu))
	allAre(t, "the follower", pid, *one(cpu))
	// A follower's execution that runs long releases the pin until it ends.
	done, err := p.Busy()
	if err != nil {
		t.Fatal(err)
	}
	if p.CPU() != -1 {
		t.Fatalf("a long execution, still pinned to %d", p.CPU())
	}
	allAre(t, "a long execution", os.Getpid(), before)
	allAre(t, "the follower in a long execution", pid, before)
	if err := done(); err != nil {
		t.Fatal(err)
	}
	if p.CPU() < 0 {
		t.Fatal("the long execution ended, nothing pinned")
	}
	allAre(t, "the long execution ended", pid, *one(p.CPU()))
	if err := unfollow(); err != nil {
		t.Fatal(err)
	}
	if p.CPU() != -1 {
		t.Fatalf("the last follower gone, still pinned to %d", p.CPU())
	}
	allAre(t, "the last follower gone", os.Getpid(), before)
	_ = p.Release()
}
