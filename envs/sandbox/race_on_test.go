//go:build race

package sandbox

// raceEnabled: this test binary is built with the race detector, whose
// shadow memory counts against RLIMIT_DATA (hundreds of MiB at start).
const raceEnabled = true
