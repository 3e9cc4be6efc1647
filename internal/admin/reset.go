package admin

import (
	"bufio"
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
)

// ResetPlan is what reset APP does (and, once done, did): its --json form.
type ResetPlan struct {
	App     string        `json:"app"`
	To      string        `json:"to"`
	Offsets []ResetOffset `json:"offsets"`
	// State is set with --state: the offsets are committed marked as a
	// state reset (changelog.ResetMarker), so that the application starts
	// from empty state although its changelog is gone.
	State bool `json:"state,omitempty"`
	// DeleteChangelog is the changelog topic to delete (--state), empty
	// when none is deleted (none, or it is missing already).
	DeleteChangelog string `json:"delete_changelog,omitempty"`
	// OpenTransactions are transactions of {APP}-{N} still in flight: a
	// zombie that commits one would move offsets after the reset.
	OpenTransactions []Transaction `json:"open_transactions,omitempty"`
	DryRun           bool          `json:"dry_run,omitempty"`
	Done             bool          `json:"done"`
	Notes            []string      `json:"notes,omitempty"`
}

// ResetOffset is the reset of one input partition.
type ResetOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Current is the committed offset before the reset, nil without one.
	Current *int64 `json:"current"`
	New     int64  `json:"new"`
}

func resetCmd(ctx context.Context, args []string, env Env) error {
	var c common
	fs := newFlags("reset", env, &c)
	var (
		to, inputs         string
		state, yes, dryRun bool
	)
	fs.StringVar(&to, "to", "earliest", "earliest, latest or an RFC 3339 timestamp")
	fs.StringVar(&inputs, "input", "", "input topics, comma separated (default: the topics the group committed offsets for)")
	fs.BoolVar(&state, "state", false, "also delete the changelog topic {APP}-changelog")
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	fs.BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	pos, err := parse(fs, args, 1, "APP")
	if err != nil {
		return err
	}
	app := pos[0]
	var at *time.Time
	switch to {
	case "earliest", "latest":
	default:
		t, err := time.Parse(time.RFC3339, to)
		if err != nil {
			return usagef("reset: --to %q: want earliest, latest or an RFC 3339 timestamp (e.g. 2024-05-01T12:00:00Z)", to)
		}
		at = &t
	}
	adm, closeFn, err := c.connect()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	plan, err := PlanReset(ctx, adm, app, to, at, splitList(inputs), state)
	if err != nil {
		return fmt.Errorf("reset %s (brokers %s): %w", app, c.brokers, err)
	}
	plan.DryRun = dryRun
	if !c.json {
		printPlan(env.Stdout, plan)
	}
	if dryRun {
		if c.json {
			return writeJSON(env.Stdout, plan)
		}
		fmt.Fprintln(env.Stdout, "dry run: nothing changed")
		return nil
	}
	if !yes && !confirm(env.Stdin, env.Stderr) {
		if c.json {
			_ = writeJSON(env.Stdout, plan)
		}
		return fmt.Errorf("reset %s not confirmed: nothing changed", app)
	}
	if err := ApplyReset(ctx, adm, plan); err != nil {
		if c.json {
			_ = writeJSON(env.Stdout, plan)
		}
		return fmt.Errorf("reset %s (brokers %s): %w", app, c.brokers, err)
	}
	if c.json {
		return writeJSON(env.Stdout, plan)
	}
	fmt.Fprintf(env.Stdout, "done: committed %d offset(s) to group %s", len(plan.Offsets), app)
	if plan.DeleteChangelog != "" {
		fmt.Fprintf(env.Stdout, "; deleted topic %s", plan.DeleteChangelog)
	}
	fmt.Fprintln(env.Stdout)
	return nil
}

// confirm asks on w and reads the answer from r: only "y" or "yes" agree.
func confirm(r io.Reader, w io.Writer) bool {
	fmt.Fprint(w, "Proceed? [y/N] ")
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// errActiveMembers is returned while the group has members.
func activeMembers(app string, g Group) error {
	ids := make([]string, len(g.Members))
	for i, m := range g.Members {
		ids[i] = m.ClientID + "@" + m.Host
	}
	return fmt.Errorf("group %s has %d active member(s) (%s, state %s): stop every instance of the application before a reset",
		app, len(g.Members), strings.Join(ids, ", "), g.State)
}

// PlanReset works out the reset of application app's input offsets to
// to ("earliest", "latest", or the first offset at or after *at), and with
// state the deletion of its changelog. It fails while the group has
// members.
func PlanReset(ctx context.Context, adm *kadm.Client, app, to string, at *time.Time, inputs []string, state bool) (*ResetPlan, error) {
	g, err := describeGroup(ctx, adm, app)
	if err != nil {
		return nil, err
	}
	if len(g.Members) > 0 {
		return nil, activeMembers(app, g)
	}
	committed, err := committedOffsets(ctx, adm, app)
	if err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		inputs = committed.TopicsSet().Topics()
		if len(inputs) == 0 {
			return nil, fmt.Errorf("group %s has no committed offsets: name the input topics with --input", app)
		}
	}
	slices.Sort(inputs)
	inputs = slices.Compact(inputs)
	td, err := adm.ListTopics(ctx, inputs...)
	if err != nil {
		return nil, fmt.Errorf("listing input topics %v: %w", inputs, err)
	}
	tasks := int32(0)
	for _, t := range inputs {
		d, ok := td[t]
		if !ok || d.Err != nil {
			return nil, fmt.Errorf("input topic %s: %w", t, cmpErr(d.Err, kerr.UnknownTopicOrPartition))
		}
		tasks = max(tasks, int32(len(d.Partitions)))
	}

	var targets kadm.ListedOffsets
	switch {
	case at != nil:
		targets, err = listOffsets(ctx, "timestamp "+at.Format(time.RFC3339), func(ctx context.Context, ts ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), ts...)
		}, inputs...)
	case to == "latest":
		targets, err = listOffsets(ctx, "end", adm.ListEndOffsets, inputs...)
	default:
		targets, err = listOffsets(ctx, "start", adm.ListStartOffsets, inputs...)
	}
	if err != nil {
		return nil, err
	}
	var ends kadm.ListedOffsets
	if at != nil {
		if ends, err = listOffsets(ctx, "end", adm.ListEndOffsets, inputs...); err != nil {
			return nil, err
		}
	}
	plan := &ResetPlan{App: app, To: to, State: state}
	targets.Each(func(o kadm.ListedOffset) {
		if o.Partition < 0 {
			return
		}
		r := ResetOffset{Topic: o.Topic, Partition: o.Partition, New: o.Offset}
		if r.New < 0 { // no record at or after the timestamp
			e, _ := ends.Lookup(o.Topic, o.Partition)
			r.New = e.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok {
			cur := c.At
			r.Current = &cur
		}
		plan.Offsets = append(plan.Offsets, r)
	})
	slices.SortFunc(plan.Offsets, func(a, b ResetOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})

	if state {
		cl := changelog.Topic(app)
		ct, err := adm.ListTopics(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("listing changelog topic %s: %w", cl, err)
		}
		if d, ok := ct[cl]; ok && d.Err == nil {
			plan.DeleteChangelog = cl
		} else {
			plan.Notes = append(plan.Notes, fmt.Sprintf("changelog topic %s does not exist: no state to delete", cl))
		}
	}

	ids := make([]string, tasks)
	for n := range tasks {
		ids[n] = fencing.TransactionalID(app, n)
	}
	txns, err := describeTransactions(ctx, adm, ids)
	if err != nil {
		plan.Notes = append(plan.Notes, fmt.Sprintf("open transactions not checked (DescribeTransactions): %v", err))
	}
	for _, t := range txns {
		if t.Open {
			plan.OpenTransactions = append(plan.OpenTransactions, t)
		}
	}
	return plan, nil
}

// ApplyReset commits plan's offsets to the group (marked as a state reset
// when plan.State is set) and deletes the changelog it names. The broker
// rejects the commit if a member joined since the plan was made.
func ApplyReset(ctx context.Context, adm *kadm.Client, plan *ResetPlan) error {
	g, err := describeGroup(ctx, adm, plan.App)
	if err != nil {
		return err
	}
	if len(g.Members) > 0 {
		return activeMembers(plan.App, g)
	}
	meta := ""
	if plan.State {
		meta = changelog.ResetMarker
	}
	os := kadm.Offsets{}
	for _, o := range plan.Offsets {
		os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.New, LeaderEpoch: -1, Metadata: meta})
	}
	if err := adm.CommitAllOffsets(ctx, plan.App, os); err != nil {
		hint := ""
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) {
			hint = " (an instance joined the group meanwhile? stop every instance)"
		}
		return fmt.Errorf("committing reset offsets to group %s: %w%s", plan.App, err, hint)
	}
	if plan.DeleteChangelog != "" {
		resp, err := adm.DeleteTopic(ctx, plan.DeleteChangelog)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("offsets were reset, but deleting changelog topic %s failed: %w", plan.DeleteChangelog, err)
		}
	}
	plan.Done = true
	return nil
}

func printPlan(w io.Writer, p *ResetPlan) {
	fmt.Fprintf(w, "Reset of application %s (group %s) to %s:\n", p.App, p.App, p.To)
	tw := table(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
	for _, o := range p.Offsets {
		c := "-"
		if o.Current != nil {
			c = fmt.Sprint(*o.Current)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", o.Topic, o.Partition, c, o.New)
	}
	tw.Flush()
	switch {
	case p.DeleteChangelog != "":
		fmt.Fprintf(w, "Delete changelog topic %s: all state of %s is lost (the next start recreates it empty).\n", p.DeleteChangelog, p.App)
	case p.State:
		fmt.Fprintf(w, "State is reset: the next start of %s creates an empty changelog.\n", p.App)
	default:
		fmt.Fprintf(w, "State is kept (use --state to delete the changelog).\n")
	}
	if len(p.OpenTransactions) > 0 {
		fmt.Fprintln(w, "warning: transactions still open; if their producer commits one, it moves offsets after this reset:")
		printTransactions(w, p.OpenTransactions)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}
