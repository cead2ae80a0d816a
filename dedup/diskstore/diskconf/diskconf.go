// Package diskconf is the embedded store's settings when it keeps its
// records in a file: its environment variable (DATA_DIR), its help, and
// its validation. It is apart from diskstore, and links no bbolt, so that
// the configuration can read and check it without linking the store's
// database.
package diskconf

import (
	"os"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

// Settings are the embedded store's environment variables. The desc tag
// is what -h and docs/configuration.md say about each.
type Settings struct {
	Dir string `env:"DATA_DIR" desc:"directory of the embedded store's file (webhook-dedup.db), kept across restarts; created if missing; instead of Redis; one replica only"`
}

// Choices is the variable that chooses the store: DATA_DIR.
func (s *Settings) Choices() []setting.Choice {
	return []setting.Choice{{Variable: "DATA_DIR", Set: s.Dir != ""}}
}

// Complete makes sure DATA_DIR, when the store is chosen, is a directory
// this process can create files in, creating it (and its parents) if
// missing: the store's file is opened later, and a read-only volume had
// better be reported now, naming DATA_DIR.
func (s *Settings) Complete(scope setting.Scope) setting.Problems {
	var bad setting.Problems
	if scope.Chosen {
		if err := writableDir(s.Dir); err != nil {
			bad.Add("DATA_DIR", "%s is not a directory this process can write in: %v", s.Dir, err)
		}
	}
	return bad
}

// writableDir creates dir if missing and creates and removes a file in it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".webhook-dedup-write-test-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
