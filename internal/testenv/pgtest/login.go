package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// NewLogin creates the role user, logging in with password, and a
// database it owns, and returns the database's name. From then on the
// server asks every role but postgres for its password (scram-sha-256, as
// a server in production does); pgtest's own connections, as postgres,
// are still trusted. Connect with URLAs.
func (s *Server) NewLogin(t testing.TB, user, password string) string {
	t.Helper()
	database := "db_" + user
	s.asPostgres(t, func(ctx context.Context, conn *pgx.Conn) error {
		// A role name and a password cannot be parameters of these
		// statements.
		for _, sql := range []string{
			fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD %s", pgx.Identifier{user}.Sanitize(), quote(password)),
			fmt.Sprintf("CREATE DATABASE %s OWNER %s", pgx.Identifier{database}.Sanitize(), pgx.Identifier{user}.Sanitize()),
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return s.requirePasswords(ctx, conn)
	})
	return database
}

// SetPassword changes the password role user logs in with.
func (s *Server) SetPassword(t testing.TB, user, password string) {
	t.Helper()
	s.asPostgres(t, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD %s", pgx.Identifier{user}.Sanitize(), quote(password)))
		return err
	})
}

// Refusals counts the logins as user the server has turned away for a
// wrong password, from its log.
func (s *Server) Refusals(user string) int {
	b, _ := os.ReadFile(s.LogFile())
	return strings.Count(string(b), fmt.Sprintf("password authentication failed for user %q", user))
}

// AwaitRefusals waits until the server has turned n logins as user away,
// in all (Refusals): a client that retries has retried.
func (s *Server) AwaitRefusals(t testing.TB, user string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := redistest.Poll(ctx, func() error {
		if got := s.Refusals(user); got < n {
			return fmt.Errorf("%d logins as %s refused, want %d", got, user, n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// URLAs is the postgres:// URL of database on this server, logging in as
// user with password.
func (s *Server) URLAs(user, password, database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// asPostgres runs f on a connection to the server as postgres, and fails
// t on its error.
func (s *Server) asPostgres(t testing.TB, f func(ctx context.Context, conn *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if err := f(ctx, conn); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// requirePasswords rewrites the server's pg_hba.conf so that every role
// but postgres gives its password, and waits until the server has
// reloaded it.
func (s *Server) requirePasswords(ctx context.Context, conn *pgx.Conn) error {
	var hba string
	var loaded time.Time
	if err := conn.QueryRow(ctx, "SELECT current_setting('hba_file'), pg_conf_load_time()").Scan(&hba, &loaded); err != nil {
		return err
	}
	rules := "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(rules), 0o600); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	// The postmaster reloads in its own time; a new connection's
	// pg_conf_load_time says whether it has.
	return redistest.Poll(ctx, func() error {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		var now time.Time
		if err := c.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&now); err != nil {
			return err
		}
		if !now.After(loaded) {
			return fmt.Errorf("pg_hba.conf not reloaded yet (loaded at %s)", now)
		}
		return nil
	})
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
