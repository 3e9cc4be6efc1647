package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the environment variable naming the server.
const EnvURL = "PG_URL"

// URL returns the server's connection URL from PG_URL, or skips t when it
// is unset.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		t.Skipf("%s is not set: this test needs PostgreSQL; start one with "+
			"`bash integration/postgres/postgres.sh start DIR` and set %s to the URL it prints", EnvURL, EnvURL)
	}
	return u
}

// Connect connects to the server named by PG_URL (skipping t when it is
// unset) and closes the connection when t ends.
func Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	u := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s=%s: %v", EnvURL, u, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

var seq atomic.Int64

// Table returns a table name unique to this test run: prefix (lower-cased,
// other than [a-z0-9_] replaced by _), the process id and a counter.
func Table(prefix string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '_'
	}, prefix)
	return fmt.Sprintf("%s_%d_%d", clean, os.Getpid(), seq.Add(1))
}
