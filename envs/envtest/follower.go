package envtest

import (
	"os/exec"
	"testing"

	"github.com/cyrnel/cyrnel/envs/affinity"
)

// Follower starts a process that follows this process's CPU pin
// (envs/affinity) until the test ends, as a TypeScript worker does: with
// one, affinity.Process pins when asked to.
func Follower(t testing.TB) {
	t.Helper()
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	unfollow, err := affinity.Process.Follow(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unfollow() })
}
