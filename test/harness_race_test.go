//go:build race

package test

// buildFlags build the binary with -race when the tests run with -race, so
// that the end-to-end load checks the real process for data races too.
var buildFlags = []string{"-race"}

// raceDetector says the binary under test runs with the race detector,
// which takes memory and time of its own.
const raceDetector = true
