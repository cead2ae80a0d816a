//go:build !race

package test

// buildFlags are the extra `go build` flags of the binary under test.
var buildFlags []string

// raceDetector says the binary under test runs with the race detector.
const raceDetector = false
