// Command pgsink writes Kafka records into PostgreSQL at-least-once: each
// order record is upserted into a table on its natural key (the order id),
// so a record delivered again after a crash rewrites the same row.
//
// With no flags it starts an embedded Kafka broker (kfake) on 127.0.0.1,
// produces a few orders, runs the sink until every order is in the table,
// prints the table and exits. It needs a PostgreSQL server, named by
// -pg-url or PG_URL; start a throw-away one with
//
//	D=$(mktemp -d); export PG_URL=$(bash integration/postgres/postgres.sh start $D | tail -1)
//	go run ./examples/pgsink
//	bash integration/postgres/postgres.sh stop $D
//
// With -brokers it runs against that cluster until SIGINT or SIGTERM
// (the integration tests run it so, and SIGKILL it; -write-delay and
// -after-write-delay widen the windows mid-write and between a write and its
// offset commit).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/runner"
	"github.com/flechtwerk/flechtwerk/sink"
)

// Order is the value of an input record.
type Order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   int64  `json:"amount"`
}

type flags struct {
	brokers, pgURL, app, topic, table string
	partitions, orders, maxPoll       int
	writeDelay, afterWriteDelay       time.Duration
	sessionTimeout                    time.Duration
	trace, verbose                    bool
}

func main() {
	var f flags
	flag.StringVar(&f.brokers, "brokers", "", "comma-separated Kafka brokers; empty starts an embedded broker and runs a demo")
	flag.StringVar(&f.pgURL, "pg-url", os.Getenv("PG_URL"), "PostgreSQL connection URL (default $PG_URL)")
	flag.StringVar(&f.app, "app", "pgsink", "application id (the consumer group)")
	flag.StringVar(&f.topic, "topic", "orders", "input topic")
	flag.StringVar(&f.table, "table", "orders", "table to upsert into (created if missing)")
	flag.IntVar(&f.partitions, "partitions", 3, "partitions of the topic the demo creates")
	flag.IntVar(&f.orders, "orders", 100, "orders the demo produces")
	flag.DurationVar(&f.sessionTimeout, "session-timeout", 10*time.Second, "consumer group session timeout")
	flag.IntVar(&f.maxPoll, "max-poll-records", 500, "records per poll cycle")
	flag.DurationVar(&f.writeDelay, "write-delay", 0, "sleep inside each database transaction, before it commits")
	flag.DurationVar(&f.afterWriteDelay, "after-write-delay", 0, "sleep after each database commit, before the write returns")
	flag.BoolVar(&f.trace, "trace", false, "print a line per written batch")
	flag.BoolVar(&f.verbose, "v", false, "log what the runner does")
	flag.Parse()
	if f.pgURL == "" {
		fmt.Fprintln(os.Stderr, `pgsink: no PostgreSQL server: pass -pg-url or set PG_URL. Start a throw-away server with
  D=$(mktemp -d); export PG_URL=$(bash integration/postgres/postgres.sh start $D | tail -1)
and stop it with
  bash integration/postgres/postgres.sh stop $D`)
		os.Exit(2)
	}
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "pgsink:", err)
		os.Exit(1)
	}
}

// pgSink upserts orders into a table, one database transaction per batch.
type pgSink struct {
	conns           chan *pgx.Conn
	upsert          string
	writeDelay      time.Duration
	afterWriteDelay time.Duration
	trace           bool
}

// Write upserts the batch in one transaction and returns once it is
// committed (durable). Upserting on the order id makes a redelivered
// record harmless.
func (s *pgSink) Write(ctx context.Context, batch []sink.Record[Order]) error {
	conn := <-s.conns
	defer func() { s.conns <- conn }()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, r := range batch {
			b.Queue(s.upsert, r.Value.ID, r.Value.Customer, r.Value.Amount, r.Partition, r.Offset)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		return sleep(ctx, s.writeDelay)
	})
	if err != nil {
		return err
	}
	if s.trace {
		fmt.Printf("wrote %s %d %d..%d\n", batch[0].Topic, batch[0].Partition, batch[0].Offset, batch[len(batch)-1].Offset)
	}
	return sleep(ctx, s.afterWriteDelay)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func run(f flags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	const nconns = 3
	conns := make(chan *pgx.Conn, nconns)
	for range nconns {
		conn, err := pgx.Connect(ctx, f.pgURL)
		if err != nil {
			return fmt.Errorf("connecting to PostgreSQL at %s: %w", f.pgURL, err)
		}
		defer conn.Close(context.Background())
		conns <- conn
	}
	conn := <-conns
	table := pgx.Identifier{f.table}.Sanitize()
	_, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		id text PRIMARY KEY,
		customer text NOT NULL,
		amount bigint NOT NULL,
		src_partition int NOT NULL,
		src_offset bigint NOT NULL)`)
	if err == nil && f.brokers == "" {
		// The demo starts from an empty table and an empty broker.
		_, err = conn.Exec(ctx, `TRUNCATE `+table)
	}
	conns <- conn
	if err != nil {
		return fmt.Errorf("creating table %s: %w", f.table, err)
	}
	s := &pgSink{
		conns: conns,
		upsert: `INSERT INTO ` + table + ` (id, customer, amount, src_partition, src_offset) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET customer = EXCLUDED.customer, amount = EXCLUDED.amount,
			src_partition = EXCLUDED.src_partition, src_offset = EXCLUDED.src_offset`,
		writeDelay:      f.writeDelay,
		afterWriteDelay: f.afterWriteDelay,
		trace:           f.trace,
	}

	seeds := strings.Split(f.brokers, ",")
	demo := f.brokers == ""
	if demo {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Println("embedded broker at", seeds[0])
		if err := produceOrders(ctx, seeds, f); err != nil {
			return err
		}
	}

	logger := slog.New(slog.DiscardHandler)
	if f.verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	r, err := runner.NewSink(sink.New[Order](s, sink.Delivery(sink.AtLeastOnce)),
		runner.SeedBrokers(seeds...),
		runner.ApplicationID(f.app),
		runner.InputTopics(f.topic),
		runner.MaxPollRecords(f.maxPoll),
		runner.SessionTimeout(f.sessionTimeout),
		runner.WithLogger(logger),
	)
	if err != nil {
		return err
	}
	if !demo {
		return r.Run(ctx)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.After(time.Minute)
	for {
		var n int
		conn := <-conns
		err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
		conns <- conn
		if err != nil {
			cancel()
			return err
		}
		if n >= f.orders {
			break
		}
		select {
		case err := <-done:
			cancel()
			return fmt.Errorf("the sink stopped with %d of %d orders written: %w", n, f.orders, err)
		case <-deadline:
			cancel()
			return fmt.Errorf("only %d of %d orders written after a minute", n, f.orders)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	return printTable(ctx, conns, table)
}

func produceOrders(ctx context.Context, seeds []string, f flags) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, int32(f.partitions), -1, nil, f.topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating %s: %w", f.topic, err)
	}
	var recs []*kgo.Record
	for i := range f.orders {
		o := Order{ID: fmt.Sprintf("order-%04d", i), Customer: fmt.Sprintf("customer-%d", i%7), Amount: int64(10 + i)}
		v, _ := json.Marshal(o)
		recs = append(recs, &kgo.Record{Topic: f.topic, Key: []byte(o.ID), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing orders: %w", err)
	}
	fmt.Printf("produced %d orders to %s\n", len(recs), f.topic)
	return nil
}

func printTable(ctx context.Context, conns chan *pgx.Conn, table string) error {
	conn := <-conns
	defer func() { conns <- conn }()
	var n, total int64
	if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM `+table).Scan(&n, &total); err != nil {
		return err
	}
	fmt.Printf("table %s: %d orders, total amount %d\n", table, n, total)
	rows, err := conn.Query(ctx, `SELECT customer, count(*), sum(amount) FROM `+table+` GROUP BY customer ORDER BY customer`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c string
		var k, sum int64
		if err := rows.Scan(&c, &k, &sum); err != nil {
			return err
		}
		fmt.Printf("  %-12s %3d orders  %6d\n", c, k, sum)
	}
	return rows.Err()
}
