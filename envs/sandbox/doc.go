// Package sandbox runs one untrusted program (a CPython interpreter, in
// cyrnel) in a sandbox built from the layers Linux offers an unprivileged
// process: user, PID, network, mount, IPC, UTS and cgroup namespaces; a
// fresh read-only root holding only the paths the program needs; cgroup
// memory and pids limits where the machine allows them; rlimits; no
// capabilities; no_new_privs; Landlock; and a seccomp filter.
//
// Go cannot run code between fork and exec, so the sandbox is built by the
// calling binary itself, re-executed in a hidden helper mode. The binary must
// therefore hand control to the helper before doing anything else:
//
//	func main() {
//		sandbox.MaybeRun() // never returns in helper mode
//		...
//	}
//
// Test binaries do the same from TestMain, before m.Run parses flags:
//
//	func TestMain(m *testing.M) {
//		sandbox.MaybeRun()
//		os.Exit(m.Run())
//	}
//
// Start starts the helper ("init") with new namespaces; it becomes PID 1 of
// the sandbox, builds the root file system, restricts itself and starts the
// program, then stays behind as a tiny init that forwards signals, reaps
// every orphan and reports how the program ended. When the program needs
// RLIMIT_NPROC or RLIMIT_DATA (no cgroup limits its processes or memory),
// which the init cannot take itself, a second helper stage ("exec") takes
// them and execs the program. Killing the init (Process.Kill) makes the
// kernel kill everything else in the PID namespace, setsid'd grandchildren
// included.
//
// See docs/sandbox.md for the layers, defaults and the decisions behind them.
package sandbox
