package python

import (
	"fmt"
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// testOptions declares python3 on PATH, as serve does by default.
var testOptions Options

// TestMain lets the test binary act as the sandbox helper: the sandbox
// re-executes its own binary to build each interpreter's sandbox.
func TestMain(m *testing.M) {
	sandbox.MaybeRun()
	declared, err := Declare([]string{"python3"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "these tests need python3:", err)
		os.Exit(1)
	}
	testOptions = Options{Interpreters: declared}
	os.Exit(m.Run())
}
