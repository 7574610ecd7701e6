// Package sandbox runs one untrusted program (a CPython interpreter, in
// cyrnel) in a sandbox built from the layers Linux offers an unprivileged
// process: user, PID, network, mount, IPC, UTS and cgroup namespaces; a
// fresh read-only root holding only the paths the program needs; cgroup
// memory and pids limits where the machine allows them; rlimits; Landlock;
// no_new_privs; and a seccomp filter.
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
// The helper runs in two stages. The first ("init") is started by Start with
// new namespaces and becomes PID 1 of the sandbox: it builds the root file
// system, then starts the second stage and stays behind as a tiny init that
// forwards signals, reaps every orphan and reports how the program ended.
// The second stage ("exec") sets rlimits, Landlock, no_new_privs and seccomp
// on itself and execs the program, which inherits all of them. Killing the
// init (Process.Kill) makes the kernel kill everything else in the PID
// namespace, setsid'd grandchildren included.
//
// See docs/sandbox.md for the layers, defaults and the decisions behind them.
package sandbox
