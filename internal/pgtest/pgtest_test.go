package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestUpsert proves the driver and the server script work together: create
// a table, upsert a row twice on its natural key, read back one row with
// the second value.
func TestUpsert(t *testing.T) {
	conn := Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	table := pgx.Identifier{Table("Upsert-Test")}.Sanitize()
	_, err := conn.Exec(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, n bigint NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DROP TABLE `+table) })

	upsert := `INSERT INTO ` + table + ` (id, n) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n`
	for _, n := range []int64{1, 2} {
		tag, err := conn.Exec(ctx, upsert, "order-7", n)
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected())
	}

	var count, n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), max(n) FROM `+table).Scan(&count, &n))
	require.Equal(t, int64(1), count, "the second upsert updated the row")
	require.Equal(t, int64(2), n)
}

func TestTable(t *testing.T) {
	a, b := Table("Orders-v2"), Table("Orders-v2")
	require.NotEqual(t, a, b)
	require.Regexp(t, `^orders_v2_[0-9]+_[0-9]+$`, a)
}
