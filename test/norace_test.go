//go:build !race

package test

// buildFlags are the extra `go build` flags of the binary under test.
var buildFlags []string
