package stores

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// TestPostgresWrongPasswordLoggedOnce: a password the database refuses
// is logged once as what it is, naming the server and the user and never
// the password, while the tables' creation keeps being retried; with
// DATABASE_AUTO_MIGRATE=false it is not taken for missing tables (whose
// advice is to run `migrate`).
func TestPostgresWrongPasswordLoggedOnce(t *testing.T) {
	srv := pgtest.New(t)
	const user, right, wrong = "webhook", "right-s3cret", "wrong-s3cret"
	db := srv.NewLogin(t, user, right)
	want := fmt.Sprintf("cannot log in to PostgreSQL at 127.0.0.1:%d as %s (password authentication failed)", srv.Port, user)
	for _, autoMigrate := range []bool{true, false} {
		t.Run("DATABASE_AUTO_MIGRATE="+strconv.FormatBool(autoMigrate), func(t *testing.T) {
			cfg, err := load(t, map[string]string{
				"DATABASE_URL": srv.URLAs(user, wrong, db), "DATABASE_AUTO_MIGRATE": strconv.FormatBool(autoMigrate),
				"APP_NAME": "default/webhook-app",
			})
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			seen := srv.Refusals(user)
			b, err := Open(context.Background(), cfg, Env{Log: zap.New(core), Registerer: prometheus.NewRegistry(), Serving: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if autoMigrate {
				// Five refusals in the server's log (the migration and
				// the owner's check at start, three retries): the
				// migration was retried, and must not have said so each
				// time.
				srv.AwaitRefusals(t, user, seen+5)
			}
			var said int
			for _, e := range logs.All() {
				line := fmt.Sprint(e.Message, e.ContextMap())
				if strings.Contains(line, wrong) {
					t.Errorf("a log line shows the password: %s", line)
				}
				if strings.Contains(line, "migrate`") {
					t.Errorf("a wrong password is taken for missing tables: %s", line)
				}
				if strings.Contains(line, want) {
					said++
					if e.Level != zapcore.ErrorLevel {
						t.Errorf("logged at %v, want error: %s", e.Level, line)
					}
				}
			}
			if said != 1 {
				t.Errorf("%q logged %d times, want once; the log:\n%v", want, said, logs.All())
			}
		})
	}
}
