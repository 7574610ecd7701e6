//go:build !race

package typescript

// raceEnabled: this test binary (and so each worker) is built with the race
// detector.
const raceEnabled = false
