// Package pgtest connects tests to a PostgreSQL server.
//
// The server is named by the PG_URL environment variable, a connection URL
// such as the one integration/postgres/postgres.sh prints:
//
//	D=$(mktemp -d); PG_URL=$(bash integration/postgres/postgres.sh start $D --owner-pid $$ | tail -1)
//	PG_URL=$PG_URL go test ./... ; bash integration/postgres/postgres.sh stop $D
//
// Without PG_URL a test that needs PostgreSQL is skipped, saying so. Each
// test uses its own table names (Table), so tests never interfere on a
// shared server. Helpers are safe for concurrent use by parallel tests.
package pgtest
