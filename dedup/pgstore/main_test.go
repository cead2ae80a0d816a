package pgstore

import (
	"os"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// postgres is the PostgreSQL server this package's tests share (each test
// in a database of its own), started by the first test that needs it.
var postgres pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	postgres.Close()
	os.Exit(code)
}
