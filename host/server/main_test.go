package server

import (
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/envs/typescript"
)

// TestMain lets the test binary be the sandbox helper and the TypeScript
// worker, as the cyrnel binary is.
func TestMain(m *testing.M) {
	sandbox.MaybeRun()
	typescript.MaybeServeWorker()
	os.Exit(m.Run())
}
