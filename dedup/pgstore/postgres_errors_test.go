package pgstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// report is one thing the store told its Failed or Recovered.
type report struct {
	task string
	err  error // nil: Recovered
}

// TestPostgresConnectFailuresToldOnce: a database out of reach, then one
// that turns the password away, are each told once while the migration
// keeps retrying every second, naming the server and the user and never
// the password; the login fixed, the recovery is told.
func TestPostgresConnectFailuresToldOnce(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	const user, right, wrong = "webhook", "right-s3cret", "wrong-s3cret"
	db := srv.NewLogin(t, user, right)
	srv.Stop()
	reports := make(chan report, 100)
	s, err := Open(Config{
		URL: srv.URLAs(user, wrong, db), AutoMigrate: true,
		Failed:    func(task string, err error) { reports <- report{task, err} },
		Recovered: func(task string) { reports <- report{task: task} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := "127.0.0.1:" + strconv.Itoa(srv.Port)
	next := func(what string) report {
		t.Helper()
		select {
		case r := <-reports:
			if r.task != "migrate" {
				t.Errorf("%s: told of task %q, want migrate", what, r.task)
			}
			if r.err != nil && strings.Contains(r.err.Error(), wrong) {
				t.Errorf("%s: the error shows the password: %v", what, r.err)
			}
			return r
		case <-time.After(migrateEvery + s.timeout + storetest.LoadMargin): // the next try
			t.Fatalf("nothing told within %s: want %s", migrateEvery+s.timeout+storetest.LoadMargin, what)
			return report{}
		}
	}
	wantConnectError := func(r report, want string) {
		t.Helper()
		var ce *ConnectError
		if !errors.As(r.err, &ce) || ce.Error() != want && !strings.HasPrefix(ce.Error(), want+" (") {
			t.Errorf("told %v, want a *ConnectError saying %q", r.err, want)
		}
	}

	wantConnectError(next("the server down"), "cannot reach PostgreSQL at "+addr)
	srv.Start(t)
	wantConnectError(next("the password refused"), "cannot log in to PostgreSQL at "+addr+" as webhook (password authentication failed)")
	// The server logs each attempt: once it has refused three more, the
	// store has retried without telling again.
	srv.AwaitRefusals(t, user, srv.Refusals(user)+3)
	select {
	case r := <-reports:
		t.Fatalf("told again while nothing changed: %+v", r)
	default:
	}

	srv.SetPassword(t, user, wrong) // the store's password is now the right one
	if r := next("the recovery"); r.err != nil {
		t.Errorf("told %v, want the recovery", r.err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping after the recovery: %v", err)
	}
}
