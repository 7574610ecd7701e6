package typescript

import (
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// TestMain lets the test binary act as the sandbox helper and as a
// TypeScript worker: the environment starts workers by re-executing its own
// binary, which under test is this one.
func TestMain(m *testing.M) {
	sandbox.MaybeRun()
	MaybeServeWorker()
	os.Exit(m.Run())
}
