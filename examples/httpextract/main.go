// Command httpextract extracts a paginated HTTP JSON API into a Kafka topic
// with exactly-once delivery, one config record per tenant.
//
// It serves the API itself on 127.0.0.1: GET /tenants/{tenant}/items?after=ID
// returns up to -page items with ids after ID and a "next" token while more
// follow. The extractor polls every tenant once per -interval, sends each
// page's items and commits its cursor (the last id read) with the page, so
// a restart resumes after the last committed page.
//
// With no flags it starts an embedded broker (kfake), creates the topics,
// writes the config records, runs the extractor until every item is in,
// reads the output with a read_committed consumer, prints a summary and
// exits 0 (1 when an item is missing or duplicated):
//
//	go run ./examples/httpextract
//
// With -brokers it runs against a real cluster (topics are created when
// missing; a second run resumes from the committed cursors and adds
// nothing):
//
//	go run ./examples/httpextract -brokers localhost:9092
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flechtwerk/flechtwerk/extractor"
	"github.com/flechtwerk/flechtwerk/runner"
)

// Tenant is the config record of one tenant: where its items are.
type Tenant struct {
	URL string `json:"url"`
}

// Cursor is a tenant's resume point: the id of the last item read.
type Cursor struct {
	After string `json:"after"`
}

// Item is one item of the API.
type Item struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
}

// Page is one response of the API.
type Page struct {
	Items []Item `json:"items"`
	Next  string `json:"next,omitempty"`
}

func main() {
	var (
		brokers  = flag.String("brokers", "", "comma-separated seed brokers; empty starts an embedded kfake broker")
		app      = flag.String("app", "httpextract", "application id (consumer group, transactional ids, changelog)")
		tenants  = flag.Int("tenants", 4, "number of tenants (config records)")
		items    = flag.Int("items", 57, "items per tenant")
		pageSize = flag.Int("page", 10, "items per API page")
		interval = flag.Duration("interval", time.Second, "poll interval per tenant")
		timeout  = flag.Duration("timeout", 2*time.Minute, "give up after this long")
		verbose  = flag.Bool("v", false, "log the runner's progress")
	)
	flag.Parse()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if err := run(ctx, log, *brokers, *app, *tenants, *items, *pageSize, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "httpextract:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, brokers, app string, tenants, items, pageSize int, interval time.Duration) error {
	seeds := strings.Split(brokers, ",")
	if brokers == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return fmt.Errorf("starting embedded broker: %w", err)
		}
		defer cluster.Close()
		seeds = cluster.ListenAddrs()
		fmt.Printf("embedded broker (kfake) on %v\n", seeds)
	}

	// The API.
	api := newAPI(tenants, items, pageSize)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fmt.Printf("API on %s: %d tenants x %d items, %d per page\n", base, tenants, items, pageSize)

	// Topics and config records.
	configTopic, itemsTopic := app+"-tenants", app+"-items"
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := createTopic(ctx, adm, configTopic, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}); err != nil {
		return err
	}
	if err := createTopic(ctx, adm, itemsTopic, 3, nil); err != nil {
		return err
	}
	var configs []*kgo.Record
	for _, t := range api.tenants() {
		v, _ := json.Marshal(Tenant{URL: base + "/tenants/" + t + "/items"})
		configs = append(configs, &kgo.Record{Topic: configTopic, Key: []byte(t), Value: v})
	}
	if err := cl.ProduceSync(ctx, configs...).FirstErr(); err != nil {
		return fmt.Errorf("writing config records: %w", err)
	}

	// The extractor.
	hc := &http.Client{Timeout: 10 * time.Second}
	var (
		pagesMu sync.Mutex
		pages   = map[string]int{}
	)
	ex := extractor.New(func(ctx context.Context, cfg extractor.Config[Tenant], cur Cursor, out *extractor.Emitter[Cursor]) error {
		for {
			page, err := fetch(ctx, hc, cfg.Config.URL, cur.After)
			if err != nil {
				return err // the open page is aborted; Run ends naming the tenant
			}
			for _, it := range page.Items {
				v, _ := json.Marshal(it)
				out.Send(itemsTopic, []byte(it.ID), v)
			}
			if len(page.Items) == 0 {
				return nil // nothing new since the cursor
			}
			cur.After = page.Items[len(page.Items)-1].ID
			if err := out.Commit(ctx, cur); err != nil {
				return err
			}
			pagesMu.Lock()
			pages[string(cfg.Key)]++
			pagesMu.Unlock()
			if page.Next == "" {
				return nil
			}
		}
	})
	r, err := runner.NewExtractor(ex,
		runner.SeedBrokers(seeds...),
		runner.ApplicationID(app),
		runner.ConfigTopics(configTopic),
		runner.PollInterval(interval),
		runner.PageTimeout(20*time.Second),
		runner.TransactionTimeout(30*time.Second),
		runner.StateDir(os.TempDir()+"/flechtwerk-httpextract"),
		runner.WithLogger(log),
	)
	if err != nil {
		return err
	}
	runCtx, stopRunner := context.WithCancel(ctx)
	defer stopRunner()
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(runCtx) }()

	// Read the output, read_committed, until every item is in.
	began := time.Now()
	want := tenants * items
	seen, err := readUntil(ctx, seeds, itemsTopic, want, runErr)
	if err != nil {
		return err
	}
	stopRunner()
	if err := <-runErr; err != nil {
		return fmt.Errorf("extractor: %w", err)
	}

	// Summary.
	perTenant := map[string]int{}
	dups := 0
	for id, n := range seen {
		perTenant[id[:strings.LastIndexByte(id, '-')]] += 1
		dups += n - 1
	}
	names := api.tenants()
	fmt.Printf("%d items from %d tenants in %v (read_committed)\n", len(seen), len(names), time.Since(began).Round(time.Millisecond))
	pagesMu.Lock()
	for _, t := range names {
		fmt.Printf("  %-10s %3d items  %2d pages committed in this run\n", t, perTenant[t], pages[t])
	}
	pagesMu.Unlock()
	fmt.Printf("duplicates: %d, missing: %d\n", dups, want-len(seen))
	if dups != 0 || len(seen) != want {
		return errors.New("not exactly once")
	}
	fmt.Println("exactly once: ok")
	return nil
}

func createTopic(ctx context.Context, adm *kadm.Client, name string, partitions int32, configs map[string]*string) error {
	_, err := adm.CreateTopic(ctx, partitions, -1, configs, name)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %s: %w", name, err)
	}
	return nil
}

// readUntil reads topic read_committed from the start until it has seen
// want distinct keys, and returns how often it saw each key.
func readUntil(ctx context.Context, seeds []string, topic string, want int, runErr <-chan error) (map[string]int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	seen := map[string]int{}
	for len(seen) < want {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		select {
		case err := <-runErr:
			return nil, fmt.Errorf("extractor ended early: %v", err)
		default:
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("waiting for items: %d of %d in: %w", len(seen), want, err)
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", t, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++ })
	}
	// Drain what else is already committed, so duplicates would show.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { seen[string(r.Key)]++ })
	}
	return seen, nil
}

func fetch(ctx context.Context, hc *http.Client, base, after string) (*Page, error) {
	u := base
	if after != "" {
		u += "?after=" + url.QueryEscape(after)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var p Page
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("GET %s: decoding: %w", u, err)
	}
	return &p, nil
}

// api serves GET /tenants/{tenant}/items?after=ID: up to pageSize items
// with ids after ID, in id order, and "next" while more follow.
type api struct {
	*http.ServeMux
	items    map[string][]Item
	pageSize int
}

func newAPI(tenants, items, pageSize int) *api {
	a := &api{ServeMux: http.NewServeMux(), items: map[string][]Item{}, pageSize: pageSize}
	for t := range tenants {
		name := "tenant" + strconv.Itoa(t)
		for i := range items {
			a.items[name] = append(a.items[name], Item{
				ID: fmt.Sprintf("%s-%04d", name, i), Tenant: name, Name: fmt.Sprintf("item %d of %s", i, name),
			})
		}
	}
	a.HandleFunc("GET /tenants/{tenant}/items", a.list)
	return a
}

func (a *api) tenants() []string {
	out := make([]string, 0, len(a.items))
	for t := range a.items {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	all, ok := a.items[r.PathValue("tenant")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	after := r.URL.Query().Get("after")
	i := sort.Search(len(all), func(i int) bool { return all[i].ID > after })
	end := min(i+a.pageSize, len(all))
	p := Page{Items: all[i:end]}
	if end < len(all) {
		p.Next = all[end-1].ID
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p)
}
