package admin

import (
	"bufio"
	"context"
	"errors"
	"flag"
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
	// DeleteStoreChangelogs are the changelog topics of the named stores
	// and of the timer store to delete with it (--state).
	DeleteStoreChangelogs []string `json:"delete_store_changelogs,omitempty"`
	// Changelog reports whether the changelog topic {APP}-changelog exists
	// (the application has state to keep).
	Changelog bool `json:"changelog"`
	// Replay is the number of offsets the reset moves back over, summed
	// over the partitions: records the kept state already counts, processed
	// again onto it. Without State it needs KeepState.
	Replay int64 `json:"replay,omitempty"`
	// KeepState is set with --keep-state: the user accepts the replay onto
	// the kept state.
	KeepState bool `json:"keep_state,omitempty"`
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
	// StateReset marks the new offset as a state reset
	// (changelog.ResetMarker): with --state, or carried over from the
	// current offset while the changelog is missing (the state is still
	// empty).
	StateReset bool `json:"state_reset,omitempty"`
	// Stores is the current offset's metadata naming the application's
	// stores (changelog.StoresMetadata), kept by a reset that keeps the
	// state: the next start then still refuses a lost store changelog.
	Stores string `json:"stores,omitempty"`
}

// ResetOptions says what PlanReset plans. Exactly one target is used: Offset,
// Shift, At, else To.
type ResetOptions struct {
	// To is "earliest" or "latest".
	To string
	// At resets to the first offset at or after this time (--to TIME,
	// --by-duration).
	At *time.Time
	// Offset resets every partition to this offset, clamped to the
	// partition's start and end (--to-offset).
	Offset *int64
	// Shift moves every committed offset by this many, clamped to the
	// partition's start and end (--shift-by); partitions without a
	// committed offset are an error.
	Shift *int64
	// Inputs are the input topics; empty means those the group committed
	// offsets for.
	Inputs []string
	// State deletes the changelog and marks the offsets as a state reset.
	State bool
	// KeepState accepts offsets moving back onto kept state.
	KeepState bool
	// Describe is the target as the plan prints it; empty means To.
	Describe string
}

// ErrReplayOntoState is returned by reset when offsets would move back while
// the state is kept, without --keep-state.
var ErrReplayOntoState = errors.New("the reset would replay records onto state that already counts them")

func resetCmd(ctx context.Context, args []string, env Env) error {
	var c common
	fs := newFlags("reset", env, &c)
	var (
		to, inputs                    string
		toOffset, shiftBy             int64
		byDuration                    time.Duration
		state, keepState, yes, dryRun bool
	)
	fs.StringVar(&to, "to", "earliest", "`WHERE`: earliest, latest or an RFC 3339 time (the first offset at or after it)")
	fs.Int64Var(&toOffset, "to-offset", -1, "reset every partition to offset `N` (clamped to the partition's start and end)")
	fs.Int64Var(&shiftBy, "shift-by", 0, "move each committed offset by `N` (negative: back), clamped to start and end")
	fs.DurationVar(&byDuration, "by-duration", 0, "reset to the first offset at or after now minus `D` (e.g. 90m, 36h)")
	fs.StringVar(&inputs, "input", "", "input `TOPICS`, comma separated (default: the topics the group committed offsets for)")
	fs.BoolVar(&state, "state", false, "reset the state too: delete the changelog topics {APP}-changelog and {APP}-{STORE}-changelog of its stores and mark the offsets as a state reset")
	fs.BoolVar(&keepState, "keep-state", false, "keep the state although offsets move back: replayed records are counted again onto it")
	fs.BoolVar(&yes, "yes", false, "do not ask for confirmation")
	fs.BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	pos, err := parse(fs, args, 1, "APP")
	if err != nil {
		return err
	}
	app := pos[0]
	o, err := resetOptions(fs, to, toOffset, shiftBy, byDuration, time.Now())
	if err != nil {
		return err
	}
	if state && keepState {
		return &usageError{msg: "reset: --state and --keep-state contradict each other", fs: fs}
	}
	o.Inputs, o.State, o.KeepState = splitList(inputs), state, keepState
	adm, closeFn, err := c.connect()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	plan, err := PlanReset(ctx, adm, app, o)
	if err != nil {
		return fmt.Errorf("reset %s (brokers %s): %w", app, c.brokers, err)
	}
	plan.DryRun = dryRun
	if !c.json {
		printPlan(env.Stdout, plan)
	}
	if err := plan.check(); err != nil {
		if c.json {
			_ = writeJSON(env.Stdout, plan)
		}
		return fmt.Errorf("reset %s refused, nothing changed: %w", app, err)
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
	for _, topic := range plan.DeleteStoreChangelogs {
		fmt.Fprintf(env.Stdout, "; deleted topic %s", topic)
	}
	fmt.Fprintln(env.Stdout)
	return nil
}

// resetOptions turns the target flags into ResetOptions: at most one of
// --to, --to-offset, --shift-by and --by-duration.
func resetOptions(fs *flag.FlagSet, to string, toOffset, shiftBy int64, byDuration time.Duration, now time.Time) (ResetOptions, error) {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "to", "to-offset", "shift-by", "by-duration":
			set = append(set, "--"+f.Name)
		}
	})
	bad := func(format string, args ...any) (ResetOptions, error) {
		return ResetOptions{}, &usageError{msg: "reset: " + fmt.Sprintf(format, args...), fs: fs}
	}
	if len(set) > 1 {
		return bad("%s: give one target", strings.Join(set, ", "))
	}
	o := ResetOptions{To: "earliest"}
	target := ""
	if len(set) == 1 {
		target = set[0]
	}
	switch target {
	case "--to-offset":
		if toOffset < 0 {
			return bad("--to-offset %d: want an offset >= 0", toOffset)
		}
		o.Offset, o.Describe = &toOffset, fmt.Sprintf("offset %d", toOffset)
	case "--shift-by":
		if shiftBy == 0 {
			return bad("--shift-by 0 changes nothing")
		}
		o.Shift, o.Describe = &shiftBy, fmt.Sprintf("committed offset %+d", shiftBy)
	case "--by-duration":
		if byDuration <= 0 {
			return bad("--by-duration %v: want a positive duration (e.g. 90m)", byDuration)
		}
		at := now.Add(-byDuration).UTC().Truncate(time.Millisecond)
		o.At, o.Describe = &at, fmt.Sprintf("%v ago (%s)", byDuration, at.Format(time.RFC3339Nano))
	default:
		switch to {
		case "earliest", "latest":
			o.To = to
		default:
			t, err := time.Parse(time.RFC3339, to)
			if err != nil {
				return bad("--to %q: want earliest, latest or an RFC 3339 time (e.g. 2024-05-01T12:00:00Z)", to)
			}
			o.At, o.Describe = &t, to
		}
	}
	return o, nil
}

// check refuses a plan that moves offsets back onto kept state without
// KeepState.
func (p *ResetPlan) check() error {
	if p.Changelog && !p.State && p.Replay > 0 && !p.KeepState {
		return fmt.Errorf("%w: %d offset(s) back with the state of %s kept; pass --state to reset the state too, or --keep-state to replay onto it",
			ErrReplayOntoState, p.Replay, p.App)
	}
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

// PlanReset works out the reset of application app's input offsets as o
// says, and with o.State the deletion of its changelog. It fails while the
// group has members. The plan's check refuses offsets moving back onto
// kept state without o.KeepState; ApplyReset checks again.
func PlanReset(ctx context.Context, adm *kadm.Client, app string, o ResetOptions) (*ResetPlan, error) {
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
	inputs := slices.Clone(o.Inputs)
	if len(inputs) == 0 {
		inputs = committed.TopicsSet().Topics()
		if len(inputs) == 0 {
			return nil, fmt.Errorf("group %s has no committed offsets: name the input topics with --input", app)
		}
	}
	slices.Sort(inputs)
	inputs = slices.Compact(inputs)
	if o.State {
		// Offsets left unmarked would still account for the deleted state:
		// the next start would refuse with CHANGELOG_MISSING.
		var left []string
		for _, t := range committed.TopicsSet().Topics() {
			if !slices.Contains(inputs, t) {
				left = append(left, t)
			}
		}
		if len(left) > 0 {
			slices.Sort(left)
			return nil, fmt.Errorf("--state resets all state, but --input leaves the committed offsets of %s: reset every input (omit --input)", strings.Join(left, ", "))
		}
	}
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

	starts, err := listOffsets(ctx, "start", adm.ListStartOffsets, inputs...)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(ctx, "end", adm.ListEndOffsets, inputs...)
	if err != nil {
		return nil, err
	}
	var targets kadm.ListedOffsets
	switch {
	case o.At != nil:
		targets, err = listOffsets(ctx, "timestamp "+o.At.Format(time.RFC3339Nano), func(ctx context.Context, ts ...string) (kadm.ListedOffsets, error) {
			return adm.ListOffsetsAfterMilli(ctx, o.At.UnixMilli(), ts...)
		}, inputs...)
	case o.To == "latest":
		targets = ends
	default:
		targets = starts
	}
	if err != nil {
		return nil, err
	}
	changelogExists, err := topicExists(ctx, adm, changelog.Topic(app))
	if err != nil {
		return nil, err
	}
	to := o.Describe
	if to == "" {
		to = o.To
	}
	plan := &ResetPlan{App: app, To: to, State: o.State, KeepState: o.KeepState, Changelog: changelogExists}
	var noCommit []string
	var clamped int
	targets.Each(func(l kadm.ListedOffset) {
		if l.Partition < 0 {
			return
		}
		start, _ := starts.Lookup(l.Topic, l.Partition)
		end, _ := ends.Lookup(l.Topic, l.Partition)
		r := ResetOffset{Topic: l.Topic, Partition: l.Partition, New: l.Offset}
		c, hasCommit := committed.Lookup(l.Topic, l.Partition)
		if hasCommit {
			cur := c.At
			r.Current = &cur
			// While the changelog is missing the state is still empty:
			// a state reset not yet started from stays one.
			r.StateReset = !changelogExists && c.Metadata == changelog.ResetMarker
			if changelog.HasStores(c.Metadata) {
				r.Stores = c.Metadata
			}
		}
		switch {
		case o.Offset != nil:
			r.New = *o.Offset
		case o.Shift != nil:
			if !hasCommit {
				noCommit = append(noCommit, fmt.Sprintf("%s/%d", l.Topic, l.Partition))
				return
			}
			r.New = c.At + *o.Shift
		case r.New < 0: // no record at or after the time
			r.New = end.Offset
		}
		if n := min(max(r.New, start.Offset), end.Offset); n != r.New {
			r.New = n
			clamped++
		}
		if r.Current != nil && r.New < *r.Current {
			plan.Replay += *r.Current - r.New
		}
		plan.Offsets = append(plan.Offsets, r)
	})
	if len(noCommit) > 0 {
		slices.Sort(noCommit)
		return nil, fmt.Errorf("--shift-by: no committed offset to shift on %s (use --to-offset, --to or --by-duration)", strings.Join(noCommit, ", "))
	}
	if clamped > 0 {
		plan.Notes = append(plan.Notes, fmt.Sprintf("%d offset(s) clamped to their partition's start or end offset", clamped))
	}
	slices.SortFunc(plan.Offsets, func(a, b ResetOffset) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})

	if o.State {
		if changelogExists {
			plan.DeleteChangelog = changelog.Topic(app)
		} else {
			plan.Notes = append(plan.Notes, fmt.Sprintf("changelog topic %s does not exist: no state to delete", changelog.Topic(app)))
		}
		names, notes, err := storeChangelogs(ctx, adm, app)
		if err != nil {
			return nil, err
		}
		plan.Notes = append(plan.Notes, notes...)
		for _, name := range names {
			plan.DeleteStoreChangelogs = append(plan.DeleteStoreChangelogs, changelog.StoreTopic(app, name))
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

// topicExists reports whether topic exists.
func topicExists(ctx context.Context, adm *kadm.Client, topic string) (bool, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("listing topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	return ok && d.Err == nil, nil
}

// ApplyReset commits plan's offsets to the group (marked as a state reset
// when plan.State is set, else with the store names their current offsets
// carry) and deletes the changelog it names, then waits
// until the topic is gone, so that the next start creates it anew. It
// refuses a plan that moves offsets back onto kept state without
// plan.KeepState (ErrReplayOntoState). The broker rejects the commit if a
// member joined since the plan was made.
func ApplyReset(ctx context.Context, adm *kadm.Client, plan *ResetPlan) error {
	if err := plan.check(); err != nil {
		return err
	}
	g, err := describeGroup(ctx, adm, plan.App)
	if err != nil {
		return err
	}
	if len(g.Members) > 0 {
		return activeMembers(plan.App, g)
	}
	os := kadm.Offsets{}
	for _, o := range plan.Offsets {
		meta := o.Stores
		if plan.State || o.StateReset {
			meta = changelog.ResetMarker
		}
		os.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.New, LeaderEpoch: -1, Metadata: meta})
	}
	if err := adm.CommitAllOffsets(ctx, plan.App, os); err != nil {
		hint := ""
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) {
			hint = " (an instance joined the group meanwhile? stop every instance)"
		}
		return fmt.Errorf("committing reset offsets to group %s: %w%s", plan.App, err, hint)
	}
	del := plan.DeleteStoreChangelogs
	if plan.DeleteChangelog != "" {
		del = append([]string{plan.DeleteChangelog}, del...)
	}
	for _, topic := range del {
		resp, err := adm.DeleteTopic(ctx, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("offsets were reset, but deleting changelog topic %s failed: %w", topic, err)
		}
		if err := waitDeleted(ctx, adm, topic); err != nil {
			return fmt.Errorf("offsets were reset and changelog topic %s deleted, but it is still listed: %w", topic, err)
		}
	}
	plan.Done = true
	return nil
}

// waitDeleted waits until topic is no longer listed: until then, creating
// it again fails.
func waitDeleted(ctx context.Context, adm *kadm.Client, topic string) error {
	for {
		exists, err := topicExists(ctx, adm, topic)
		if err == nil && !exists {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
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
	cl := changelog.Topic(p.App)
	switch {
	case p.DeleteChangelog != "" || len(p.DeleteStoreChangelogs) > 0:
		all := p.DeleteStoreChangelogs
		if p.DeleteChangelog != "" {
			all = append([]string{p.DeleteChangelog}, all...)
		}
		fmt.Fprintf(w, "Delete changelog topic %s: all state of %s is lost (the next start recreates it empty).\n", strings.Join(all, ", "), p.App)
	case p.State:
		fmt.Fprintf(w, "State is reset: the next start of %s creates an empty changelog.\n", p.App)
	case !p.Changelog:
		fmt.Fprintf(w, "No state: changelog topic %s does not exist (a stateful %s whose offsets account for lost state needs --state to start).\n", cl, p.App)
	case p.Replay > 0 && p.KeepState:
		fmt.Fprintf(w, "State is kept (--keep-state): %d record offset(s) move back, and the records replayed are counted again onto state that already counts them.\n", p.Replay)
	case p.Replay > 0:
		fmt.Fprintf(w, "Refused: %d record offset(s) move back while the state is kept, so replayed records would be counted twice. Pass --state to reset the state too, or --keep-state to replay onto it.\n", p.Replay)
	default:
		fmt.Fprintf(w, "State is kept: no offset moves back, so no record is counted twice (records skipped are not counted).\n")
	}
	if len(p.OpenTransactions) > 0 {
		fmt.Fprintln(w, "warning: transactions still open; if their producer commits one, it moves offsets after this reset:")
		printTransactions(w, p.OpenTransactions)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}
