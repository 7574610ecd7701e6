package python

import (
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// TestMain lets the test binary act as the sandbox helper: the sandbox
// re-executes its own binary to build each interpreter's sandbox.
func TestMain(m *testing.M) {
	sandbox.MaybeRun()
	os.Exit(m.Run())
}
