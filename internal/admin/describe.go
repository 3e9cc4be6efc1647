package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/flechtwerk/flechtwerk/changelog"
	"github.com/flechtwerk/flechtwerk/fencing"
	"github.com/flechtwerk/flechtwerk/internal/retry"
)

// Description is the result of describe APP (its --json form).
type Description struct {
	App       string         `json:"app"`
	Group     Group          `json:"group"`
	Inputs    []string       `json:"inputs"`
	Tasks     []Task         `json:"tasks"`
	Lag       []PartitionLag `json:"lag"`
	TotalLag  int64          `json:"total_lag"`
	Changelog Changelog      `json:"changelog"`
	// Stores are the changelogs of the application's named stores and
	// of its timer store ("timers"), by store name.
	Stores       []Changelog   `json:"stores,omitempty"`
	Transactions []Transaction `json:"transactions"`
	// Notes are parts that could not be described, with the reason.
	Notes []string `json:"notes,omitempty"`
}

// Group is the consumer group named after the application id.
type Group struct {
	State    string   `json:"state"`
	Protocol string   `json:"protocol"`
	Members  []Member `json:"members"`
}

// Member is one instance in the group.
type Member struct {
	MemberID   string             `json:"member_id"`
	InstanceID string             `json:"instance_id,omitempty"`
	ClientID   string             `json:"client_id"`
	Host       string             `json:"host"`
	Tasks      []int32            `json:"tasks"`
	Assigned   map[string][]int32 `json:"assigned"`
}

// Task is task N: partition N of every input, transactional ID {APP}-{N}.
type Task struct {
	Task            int32  `json:"task"`
	TransactionalID string `json:"transactional_id"`
	MemberID        string `json:"member_id,omitempty"`
	ClientID        string `json:"client_id,omitempty"`
	Host            string `json:"host,omitempty"`
}

// PartitionLag is the lag of the group on one input partition.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Committed is the group's committed offset, nil when it has none.
	Committed *int64 `json:"committed"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	// Lag is End - Committed, or End - Start without a commit.
	Lag int64 `json:"lag"`
}

// Changelog describes the changelog topic {APP}-changelog of the default
// store, or {APP}-{STORE}-changelog of the named store Store.
type Changelog struct {
	Store      string               `json:"store,omitempty"`
	Topic      string               `json:"topic"`
	Exists     bool                 `json:"exists"`
	Partitions []ChangelogPartition `json:"partitions,omitempty"`
	Records    int64                `json:"records"`
	Bytes      *int64               `json:"bytes,omitempty"`
}

// ChangelogPartition is one changelog partition: offsets span End-Start
// (records and transaction markers, before compaction removes any).
type ChangelogPartition struct {
	Partition int32  `json:"partition"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	Records   int64  `json:"records"`
	Bytes     *int64 `json:"bytes,omitempty"`
}

// Transaction is the coordinator's view of transactional ID {APP}-{N}.
type Transaction struct {
	TransactionalID string             `json:"transactional_id"`
	Task            int32              `json:"task"`
	State           string             `json:"state"`
	Open            bool               `json:"open"`
	ProducerID      int64              `json:"producer_id"`
	ProducerEpoch   int16              `json:"producer_epoch"`
	Started         *time.Time         `json:"started,omitempty"`
	TimeoutMillis   int32              `json:"timeout_ms"`
	Partitions      map[string][]int32 `json:"partitions,omitempty"`
	Err             string             `json:"error,omitempty"`
}

func describeCmd(ctx context.Context, args []string, env Env) error {
	var c common
	fs := newFlags("describe", env, &c)
	var inputs string
	fs.StringVar(&inputs, "input", "", "input `TOPICS`, comma separated (default: the group's committed and assigned topics)")
	pos, err := parse(fs, args, 1, "APP")
	if err != nil {
		return err
	}
	adm, closeFn, err := c.connect()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	d, err := Describe(ctx, adm, pos[0], splitList(inputs))
	if err != nil {
		return fmt.Errorf("describe %s (brokers %s): %w", pos[0], c.brokers, err)
	}
	if c.json {
		return writeJSON(env.Stdout, d)
	}
	d.Print(env.Stdout)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Describe gathers the description of application app. inputs, if not
// empty, are its input topics; otherwise they are the topics the group
// committed offsets for or has assigned.
func Describe(ctx context.Context, adm *kadm.Client, app string, inputs []string) (*Description, error) {
	d := &Description{App: app, Changelog: Changelog{Topic: changelog.Topic(app)}}

	g, err := describeGroup(ctx, adm, app)
	if err != nil {
		return nil, err
	}
	d.Group = g
	committed, err := committedOffsets(ctx, adm, app)
	if err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		inputs = committed.TopicsSet().Topics()
		for _, m := range g.Members {
			for t := range m.Assigned {
				inputs = append(inputs, t)
			}
		}
		slices.Sort(inputs)
		inputs = slices.Compact(inputs)
	}
	d.Inputs = inputs

	// Input partitions: the tasks are partition numbers 0..n-1.
	tasks := int32(0)
	if len(inputs) > 0 {
		td, err := adm.ListTopics(ctx, inputs...)
		if err != nil {
			return nil, fmt.Errorf("listing input topics %v: %w", inputs, err)
		}
		for _, t := range inputs {
			td, ok := td[t]
			if !ok || td.Err != nil {
				d.Notes = append(d.Notes, fmt.Sprintf("input topic %s: %v", t, cmpErr(td.Err, kerr.UnknownTopicOrPartition)))
				continue
			}
			tasks = max(tasks, int32(len(td.Partitions)))
		}
		if err := d.describeLag(ctx, adm, committed); err != nil {
			return nil, err
		}
	}

	if err := d.describeChangelog(ctx, adm, &d.Changelog); err != nil {
		return nil, err
	}
	names, notes, err := storeChangelogs(ctx, adm, app)
	if err != nil {
		return nil, err
	}
	d.Notes = append(d.Notes, notes...)
	for _, name := range names {
		cl := Changelog{Store: name, Topic: changelog.StoreTopic(app, name)}
		if err := d.describeChangelog(ctx, adm, &cl); err != nil {
			return nil, err
		}
		if cl.Exists {
			d.Stores = append(d.Stores, cl)
		}
	}
	if tasks == 0 {
		tasks = int32(len(d.Changelog.Partitions))
	}
	if tasks == 0 && len(g.Members) == 0 && !d.Changelog.Exists {
		return nil, fmt.Errorf("no application %q: group %s has no members and no committed offsets, and topic %s does not exist", app, app, d.Changelog.Topic)
	}

	owner := map[int32]Member{}
	for _, m := range g.Members {
		for _, n := range m.Tasks {
			owner[n] = m
		}
	}
	ids := make([]string, 0, tasks)
	for n := range tasks {
		t := Task{Task: n, TransactionalID: fencing.TransactionalID(app, n)}
		if m, ok := owner[n]; ok {
			t.MemberID, t.ClientID, t.Host = m.MemberID, m.ClientID, m.Host
		}
		d.Tasks = append(d.Tasks, t)
		ids = append(ids, t.TransactionalID)
	}
	d.describeTransactions(ctx, adm, ids)
	return d, nil
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

func describeGroup(ctx context.Context, adm *kadm.Client, app string) (Group, error) {
	var gs kadm.DescribedGroups
	err := retrying(ctx, func() (err error) {
		gs, err = adm.DescribeGroups(ctx, app)
		if err == nil {
			err = gs[app].Err
			if errors.Is(err, kerr.GroupIDNotFound) {
				err = nil
			}
		}
		return err
	})
	if err != nil {
		return Group{}, fmt.Errorf("describing group %s: %w", app, err)
	}
	dg, ok := gs[app]
	if !ok {
		return Group{State: "Dead"}, nil
	}
	if dg.Err != nil && !errors.Is(dg.Err, kerr.GroupIDNotFound) {
		return Group{}, fmt.Errorf("describing group %s on broker %d: %w", app, dg.Coordinator.NodeID, dg.Err)
	}
	g := Group{State: dg.State, Protocol: dg.Protocol, Members: []Member{}}
	for _, m := range dg.Members {
		mm := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assigned: map[string][]int32{}, Tasks: []int32{}}
		if m.InstanceID != nil {
			mm.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				ps := slices.Clone(t.Partitions)
				slices.Sort(ps)
				mm.Assigned[t.Topic] = ps
				mm.Tasks = append(mm.Tasks, ps...)
			}
		}
		slices.Sort(mm.Tasks)
		mm.Tasks = slices.Compact(mm.Tasks)
		g.Members = append(g.Members, mm)
	}
	return g, nil
}

// committedOffsets returns the group's committed offsets (none for a group
// that does not exist).
func committedOffsets(ctx context.Context, adm *kadm.Client, app string) (kadm.Offsets, error) {
	var resp kadm.OffsetResponses
	err := retrying(ctx, func() (err error) {
		resp, err = adm.FetchOffsets(ctx, app)
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		return kadm.Offsets{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetching committed offsets of group %s: %w", app, err)
	}
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("fetching committed offsets of group %s: %w", app, err)
	}
	out := kadm.Offsets{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			out.Add(o.Offset)
		}
	})
	return out, nil
}

func listOffsets(ctx context.Context, what string, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics ...string) (kadm.ListedOffsets, error) {
	l, err := list(ctx, topics...)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s offsets of %v: %w", what, topics, err)
	}
	return l, nil
}

func (d *Description) describeLag(ctx context.Context, adm *kadm.Client, committed kadm.Offsets) error {
	starts, err := listOffsets(ctx, "start", adm.ListStartOffsets, d.Inputs...)
	if err != nil {
		return err
	}
	ends, err := listOffsets(ctx, "end", adm.ListEndOffsets, d.Inputs...)
	if err != nil {
		return err
	}
	ends.Each(func(e kadm.ListedOffset) {
		if e.Partition < 0 {
			return
		}
		s, _ := starts.Lookup(e.Topic, e.Partition)
		pl := PartitionLag{Topic: e.Topic, Partition: e.Partition, Start: s.Offset, End: e.Offset, Lag: e.Offset - s.Offset}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok {
			at := c.At
			pl.Committed = &at
			pl.Lag = max(e.Offset-at, 0)
		}
		d.Lag = append(d.Lag, pl)
		d.TotalLag += pl.Lag
	})
	slices.SortFunc(d.Lag, func(a, b PartitionLag) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return nil
}

// describeChangelog fills cl, whose Topic is set.
func (d *Description) describeChangelog(ctx context.Context, adm *kadm.Client, cl *Changelog) error {
	topic := cl.Topic
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("listing changelog topic %s: %w", topic, err)
	}
	if t, ok := td[topic]; !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return nil
	} else if t.Err != nil {
		return fmt.Errorf("listing changelog topic %s: %w", topic, t.Err)
	}
	cl.Exists = true
	starts, err := listOffsets(ctx, "start", adm.ListStartOffsets, topic)
	if err != nil {
		return err
	}
	ends, err := listOffsets(ctx, "end", adm.ListEndOffsets, topic)
	if err != nil {
		return err
	}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, e.Partition)
		cp := ChangelogPartition{Partition: e.Partition, Start: s.Offset, End: e.Offset, Records: e.Offset - s.Offset}
		cl.Partitions = append(cl.Partitions, cp)
		cl.Records += cp.Records
	})
	slices.SortFunc(cl.Partitions, func(a, b ChangelogPartition) int { return int(a.Partition - b.Partition) })

	// Bytes on disk, one replica per partition (the largest).
	set := kadm.TopicsSet{}
	for _, p := range cl.Partitions {
		set.Add(topic, p.Partition)
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, set)
	if err == nil {
		dirs.Each(func(ld kadm.DescribedLogDir) {
			if ld.Err != nil && err == nil {
				err = fmt.Errorf("broker %d dir %s: %w", ld.Broker, ld.Dir, ld.Err)
			}
		})
	}
	if err != nil {
		d.Notes = append(d.Notes, fmt.Sprintf("changelog bytes not available (DescribeLogDirs): %v", err))
		return nil
	}
	size := map[int32]int64{}
	dirs.Each(func(ld kadm.DescribedLogDir) {
		for p, dp := range ld.Topics[topic] {
			size[p] = max(size[p], dp.Size)
		}
	})
	if len(size) == 0 {
		d.Notes = append(d.Notes, fmt.Sprintf("changelog bytes not available: DescribeLogDirs listed no replica of %s", topic))
		return nil
	}
	var total int64
	for i := range cl.Partitions {
		if b, ok := size[cl.Partitions[i].Partition]; ok {
			cl.Partitions[i].Bytes = &b
			total += b
		}
	}
	cl.Bytes = &total
	return nil
}

func (d *Description) describeTransactions(ctx context.Context, adm *kadm.Client, ids []string) {
	d.Transactions = []Transaction{}
	if len(ids) == 0 {
		return
	}
	txns, err := describeTransactions(ctx, adm, ids)
	if err != nil {
		d.Notes = append(d.Notes, fmt.Sprintf("transactions not available (DescribeTransactions): %v", err))
		return
	}
	d.Transactions = txns
}

// describeTransactions returns the coordinator's view of each id.
// Transactional IDs the coordinator does not know are listed with state
// "Unknown" (a task that never ran, or an expired ID).
func describeTransactions(ctx context.Context, adm *kadm.Client, ids []string) ([]Transaction, error) {
	var dt kadm.DescribedTransactions
	err := retrying(ctx, func() (err error) {
		dt, err = adm.DescribeTransactions(ctx, ids...)
		return err
	})
	if err != nil && len(dt) == 0 {
		return nil, err
	}
	var out []Transaction
	for n, id := range ids {
		t := Transaction{TransactionalID: id, Task: int32(n), State: "Unknown"}
		x, ok := dt[id]
		switch {
		case !ok:
			t.Err = fmt.Sprintf("not described: %v", err)
		case errors.Is(x.Err, kerr.TransactionalIDNotFound):
		case x.Err != nil:
			t.Err = x.Err.Error()
		default:
			t.State, t.Open = x.State, isOpen(x.State)
			t.ProducerID, t.ProducerEpoch, t.TimeoutMillis = x.ProducerID, x.ProducerEpoch, x.TimeoutMillis
			if t.Open && x.StartTimestamp > 0 {
				st := time.UnixMilli(x.StartTimestamp).UTC()
				t.Started = &st
			}
			if len(x.Topics) > 0 {
				t.Partitions = map[string][]int32{}
				for _, tp := range x.Topics.Sorted() {
					t.Partitions[tp.Topic] = tp.Partitions
				}
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Print writes d as describe APP prints it (tables of the members, tasks,
// input lag, changelog and transactions).
func (d *Description) Print(w io.Writer) {
	fmt.Fprintf(w, "Application %s: group state %s, %d member(s), inputs %s\n\n", d.App, d.Group.State, len(d.Group.Members), orNone(strings.Join(d.Inputs, ", ")))

	if len(d.Group.Members) > 0 {
		tw := table(w)
		fmt.Fprintln(tw, "MEMBER\tCLIENT ID\tHOST\tTASKS\tASSIGNED")
		for _, m := range d.Group.Members {
			var as []string
			for _, t := range sortedKeys(m.Assigned) {
				as = append(as, fmt.Sprintf("%s%v", t, m.Assigned[t]))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, m.ClientID, m.Host, ints(m.Tasks), strings.Join(as, " "))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}

	if len(d.Tasks) > 0 {
		tw := table(w)
		fmt.Fprintln(tw, "TASK\tTRANSACTIONAL ID\tHELD BY MEMBER\tCLIENT ID\tHOST")
		for _, t := range d.Tasks {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", t.Task, t.TransactionalID, orDash(t.MemberID), orDash(t.ClientID), orDash(t.Host))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}

	if len(d.Lag) > 0 {
		tw := table(w)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
		for _, l := range d.Lag {
			c := "-"
			if l.Committed != nil {
				c = fmt.Sprint(*l.Committed)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\n", l.Topic, l.Partition, c, l.End, l.Lag)
		}
		tw.Flush()
		fmt.Fprintf(w, "total lag %d\n\n", d.TotalLag)
	}

	if !d.Changelog.Exists {
		fmt.Fprintf(w, "Changelog %s: does not exist (stateless application, or deleted)\n\n", d.Changelog.Topic)
	} else {
		printChangelog(w, "Changelog", d.Changelog)
	}
	for _, cl := range d.Stores {
		printChangelog(w, fmt.Sprintf("Store %s, changelog", cl.Store), cl)
	}

	if len(d.Transactions) > 0 {
		printTransactions(w, d.Transactions)
	}
	if len(d.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// printChangelog prints an existing changelog, titled title.
func printChangelog(w io.Writer, title string, cl Changelog) {
	fmt.Fprintf(w, "%s %s: %d partition(s), %d offsets", title, cl.Topic, len(cl.Partitions), cl.Records)
	if cl.Bytes != nil {
		fmt.Fprintf(w, ", %d bytes", *cl.Bytes)
	}
	fmt.Fprintln(w)
	tw := table(w)
	fmt.Fprintln(tw, "PARTITION\tSTART\tEND\tOFFSETS\tBYTES")
	for _, p := range cl.Partitions {
		b := "-"
		if p.Bytes != nil {
			b = fmt.Sprint(*p.Bytes)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\n", p.Partition, p.Start, p.End, p.Records, b)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

func printTransactions(w io.Writer, txns []Transaction) {
	tw := table(w)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tSTATE\tOPEN\tPRODUCER\tSTARTED\tTIMEOUT\tPARTITIONS")
	for _, t := range txns {
		started := "-"
		if t.Started != nil {
			started = t.Started.Format(time.RFC3339)
		}
		var ps []string
		for _, tp := range sortedKeys(t.Partitions) {
			ps = append(ps, fmt.Sprintf("%s%v", tp, t.Partitions[tp]))
		}
		state := t.State
		if t.Err != "" {
			state += " (" + t.Err + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d/%d\t%s\t%s\t%s\n", t.TransactionalID, state, t.Open, t.ProducerID, t.ProducerEpoch,
			started, time.Duration(t.TimeoutMillis)*time.Millisecond, orDash(strings.Join(ps, " ")))
	}
	tw.Flush()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func ints(xs []int32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return orDash(strings.Join(s, ","))
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return strings.TrimSpace(s)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// retrying calls fn until it returns nil or an error that is not
// retriable (a coordinator still loading or moving, as on a fresh
// cluster), or ctx ends.
func retrying(ctx context.Context, fn func() error) error {
	var last error
	err := retry.Doubling(50*time.Millisecond, time.Second, retriable).Do(ctx, func() error { last = fn(); return last }, nil)
	if err != nil {
		return last // ctx's end returns fn's error, not ctx's
	}
	return nil
}

func retriable(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) ||
		errors.Is(err, kerr.NotCoordinator)
}
