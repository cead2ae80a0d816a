// Package timing holds the one guess the tests' deadlines make, so that
// every package's tests make the same one: LoadMargin.
package timing

import "time"

// LoadMargin is what a test's wait allows beyond the bound its
// configuration sets: the time a loaded 2-core machine (the whole suite
// under the race detector, with a CPU-bound process beside it) may add to
// starting, scheduling and answering what the test waits for. A deadline
// is that bound plus LoadMargin; a bare number of seconds is a guess,
// which a loaded machine, or a test that raises a timeout, proves wrong.
const LoadMargin = 10 * time.Second
