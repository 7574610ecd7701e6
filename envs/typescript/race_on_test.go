//go:build race

package typescript

// raceEnabled: this test binary (and so each worker) is built with the race
// detector, whose shadow memory counts against RLIMIT_DATA (a few hundred
// MiB at start).
const raceEnabled = true
