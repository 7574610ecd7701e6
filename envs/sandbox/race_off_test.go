//go:build !race

package sandbox

// raceEnabled: this test binary is built with the race detector.
const raceEnabled = false
