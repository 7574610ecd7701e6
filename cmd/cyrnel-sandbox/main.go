// Command cyrnel-sandbox is cyrnel's sandbox helper and nothing else: the
// sandbox re-executes it (when it sits next to the cyrnel binary, built from
// the same source) instead of cyrnel itself, so a sandbox start does not pay
// the server's package initialisation (docs/sandbox.md, "The helper binary").
package main

import (
	"fmt"
	"os"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

func main() {
	sandbox.MaybeRun() // never returns in a helper stage
	fmt.Fprintln(os.Stderr, "cyrnel-sandbox is cyrnel's sandbox helper; it is not run by hand")
	os.Exit(2)
}
