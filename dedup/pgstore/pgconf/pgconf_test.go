package pgconf

import (
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

func TestDefaults(t *testing.T) {
	var s Settings
	if err := env.ParseWithOptions(&s, env.Options{Environment: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	if want := (Settings{AutoMigrate: true, TablePrefix: "webhook_dedup_", PruneInterval: time.Minute}); s != want {
		t.Errorf("defaults %+v, want %+v (docs/configuration.md)", s, want)
	}
	if problems := s.Complete(setting.Scope{}); len(problems) > 0 {
		t.Errorf("the defaults are refused: %v", problems)
	}
}

// TestProblemsNameTheVariable: each of the settings' own mistakes is a
// problem naming its variable, checked whether or not PostgreSQL is the
// chosen store.
func TestProblemsNameTheVariable(t *testing.T) {
	valid := Settings{URL: "postgres://db/x", TablePrefix: "webhook_dedup_", PruneInterval: time.Minute}
	for _, tc := range []struct {
		name   string
		change func(*Settings)
		want   string
	}{
		{"not postgres", func(s *Settings) { s.URL = "mysql://db/x" }, "DATABASE_URL: not a postgres:// or postgresql:// URL"},
		{"prefix with a quote", func(s *Settings) { s.TablePrefix = `a"b` }, `DATABASE_TABLE_PREFIX: "a\"b"`},
		{"prefix with a dash", func(s *Settings) { s.TablePrefix = "web-hook_" }, "DATABASE_TABLE_PREFIX"},
		{"prefix too long", func(s *Settings) { s.TablePrefix = strings.Repeat("a", 41) }, "DATABASE_TABLE_PREFIX"},
		{"prune interval", func(s *Settings) { s.PruneInterval = 0 }, "PRUNE_INTERVAL: must be a positive duration, got 0s"},
	} {
		for _, chosen := range []bool{true, false} {
			s := valid
			tc.change(&s)
			problems := s.Complete(setting.Scope{Chosen: chosen})
			if len(problems) != 1 || !strings.HasPrefix(problems[0].Error(), tc.want) {
				t.Errorf("%s (chosen %v): %v, want one problem starting %q", tc.name, chosen, problems, tc.want)
			}
		}
	}
	s := valid
	s.URL = "postgresql://db/x"
	if problems := s.Complete(setting.Scope{Chosen: true}); len(problems) > 0 {
		t.Errorf("postgresql://: %v", problems)
	}
}
