package group

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireBalanced checks that a gives every task 0..tasks-1 exactly one
// owner and that the owners' counts differ by at most one.
func requireBalanced(t *testing.T, a Assignment, tasks int32) {
	t.Helper()
	seen := map[int32]string{}
	lo, hi := int(tasks)+1, -1
	for id, ts := range a.Active {
		require.True(t, slices.IsSorted(ts), "tasks of %s sorted: %v", id, ts)
		for _, n := range ts {
			require.True(t, n >= 0 && n < tasks, "task %d out of range", n)
			prev, dup := seen[n]
			require.False(t, dup, "task %d owned by %s and %s", n, prev, id)
			seen[n] = id
		}
		lo, hi = min(lo, len(ts)), max(hi, len(ts))
	}
	require.Len(t, seen, int(tasks), "every task has an owner")
	require.LessOrEqual(t, hi-lo, 1, "counts differ by at most one: %v", a.Active)
}

func states(owned map[string][]int32) []MemberState {
	var out []MemberState
	for id, ts := range owned {
		out = append(out, MemberState{ID: id, Tasks: ts, Generation: 5})
	}
	return out
}

// moved counts the tasks whose owner changed from before to after
// (tasks without an owner before do not count).
func moved(before map[string][]int32, after Assignment) int {
	owner := map[int32]string{}
	for id, ts := range after.Active {
		for _, n := range ts {
			owner[n] = id
		}
	}
	var k int
	for id, ts := range before {
		for _, n := range ts {
			if owner[n] != id {
				k++
			}
		}
	}
	return k
}

func TestAssignInitial(t *testing.T) {
	a := Assign(states(map[string][]int32{"a": nil, "b": nil, "c": nil}), 12, 0)
	requireBalanced(t, a, 12)
	for _, ts := range a.Active {
		require.Len(t, ts, 4)
	}
	require.Equal(t, a, Assign(states(map[string][]int32{"c": nil, "a": nil, "b": nil}), 12, 0), "deterministic")
}

// TestAssignJoin: a fourth member joins three that own 4 tasks each; each
// of the three gives up exactly one task, to the new member, and keeps
// the rest.
func TestAssignJoin(t *testing.T) {
	before := map[string][]int32{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": {8, 9, 10, 11}}
	ms := states(before)
	ms = append(ms, MemberState{ID: "d"})
	a := Assign(ms, 12, 0)
	requireBalanced(t, a, 12)
	require.Equal(t, 3, moved(before, a), "only the new member's share moves")
	for id, ts := range before {
		require.Len(t, a.Active[id], 3)
		require.Subset(t, ts, a.Active[id], "%s keeps three of its own", id)
	}
}

// TestAssignLeave: one of four members leaves; only its tasks move, spread
// over the others.
func TestAssignLeave(t *testing.T) {
	before := map[string][]int32{"a": {0, 1, 2}, "b": {3, 4, 5}, "c": {6, 7, 8}, "d": {9, 10, 11}}
	left := map[string][]int32{"a": before["a"], "b": before["b"], "c": before["c"]}
	a := Assign(states(left), 12, 0)
	requireBalanced(t, a, 12)
	require.Equal(t, 0, moved(left, a), "no task of a remaining member moves")
	for id, ts := range left {
		require.Subset(t, a.Active[id], ts)
		require.Len(t, a.Active[id], 4)
	}
}

// TestAssignUneven: shares of an uneven split go to the members that own
// the most, so the fewest tasks move.
func TestAssignUneven(t *testing.T) {
	before := map[string][]int32{"a": {0, 1, 2, 3, 4}, "b": {5, 6, 7, 8}, "c": {9, 10, 11}}
	ms := append(states(before), MemberState{ID: "d"}, MemberState{ID: "e"})
	a := Assign(ms, 12, 0)
	requireBalanced(t, a, 12)
	// Shares 3,3,2,2,2: a and b get the 3s, c gives up one.
	require.Equal(t, 2+1+1, moved(before, a))
}

// TestAssignStaleClaim: two members claim a task; the claim of the higher
// generation wins, the stale claimant gets it only if balance requires.
func TestAssignStaleClaim(t *testing.T) {
	ms := []MemberState{
		{ID: "a", Tasks: []int32{0, 1}, Generation: 3},
		{ID: "b", Tasks: []int32{1, 2, 3}, Generation: 4},
	}
	a := Assign(ms, 4, 0)
	requireBalanced(t, a, 4)
	// a's stale claim of 1 does not count: b keeps 1 and 2 (its share),
	// a keeps 0 and gets the task b gave up.
	require.Equal(t, []int32{0, 3}, a.Active["a"])
	require.Equal(t, []int32{1, 2}, a.Active["b"])

	ms[0].Generation = 4 // equal generations: the first in ID order
	a = Assign(ms, 4, 0)
	requireBalanced(t, a, 4)
	require.Equal(t, []int32{0, 1}, a.Active["a"])
}

// TestAssignOutOfRange: claims of tasks that do not exist are ignored.
func TestAssignOutOfRange(t *testing.T) {
	a := Assign([]MemberState{{ID: "a", Tasks: []int32{-1, 7, 0}}, {ID: "b"}}, 2, 0)
	requireBalanced(t, a, 2)
	require.Equal(t, []int32{0}, a.Active["a"])
	require.Empty(t, Assign(nil, 4, 1).Active)
	require.Equal(t, map[string][]int32{"a": nil}, Assign([]MemberState{{ID: "a"}}, 0, 0).Active)
}

// TestAssignPrefersHighestOffset: a task that must move goes to the member
// whose local store of it is closest to the changelog's end.
func TestAssignPrefersHighestOffset(t *testing.T) {
	// c left; its tasks 4 and 5 move. b holds 4 at offset 90, a at 10; a
	// holds 5 at 50 and b has nothing of it.
	ms := []MemberState{
		{ID: "a", Tasks: []int32{0, 1}, Offsets: map[int32]int64{4: 10, 5: 50}},
		{ID: "b", Tasks: []int32{2, 3}, Offsets: map[int32]int64{4: 90}},
	}
	a := Assign(ms, 6, 0)
	requireBalanced(t, a, 6)
	require.Equal(t, []int32{0, 1, 5}, a.Active["a"])
	require.Equal(t, []int32{2, 3, 4}, a.Active["b"])

	// Balance wins over offsets: b has the best store of both, but can
	// take only one.
	ms[1].Offsets = map[int32]int64{4: 90, 5: 90}
	a = Assign(ms, 6, 0)
	requireBalanced(t, a, 6)
	require.Len(t, a.Active["b"], 3)

	// When a member must give one up, it gives up the one another member
	// holds most closely: d joins holding task 2 at 70.
	ms = []MemberState{
		{ID: "a", Tasks: []int32{0, 1, 2}},
		{ID: "d", Offsets: map[int32]int64{2: 70, 1: 5}},
	}
	a = Assign(ms, 4, 0)
	requireBalanced(t, a, 4)
	require.Equal(t, []int32{0, 1}, a.Active["a"])
	require.Equal(t, []int32{2, 3}, a.Active["d"])
}

// TestAssignStandbys: standbys are never the owner, balanced, and prefer
// members holding the task locally.
func TestAssignStandbys(t *testing.T) {
	owned := map[string][]int32{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": {8, 9, 10, 11}}
	ms := states(owned)
	a := Assign(ms, 12, 1)
	requireBalanced(t, a, 12)
	requireStandbys(t, a, 12, 1)

	a = Assign(ms, 12, 5) // more than members-1: each task on every other member
	requireStandbys(t, a, 12, 2)

	require.Empty(t, Assign(states(map[string][]int32{"a": nil}), 4, 1).Standby["a"], "no standby without a second member")

	// c holds task 0 locally; it is 0's standby rather than b.
	for i := range ms {
		if ms[i].ID == "c" {
			ms[i].Offsets = map[int32]int64{0: 40}
		}
	}
	a = Assign(ms, 12, 1)
	requireStandbys(t, a, 12, 1)
	require.Contains(t, a.Standby["c"], int32(0))
}

// requireStandbys checks that every task has per standbys, none its owner
// or twice the same member, and that no member has more than its share.
func requireStandbys(t *testing.T, a Assignment, tasks int32, per int) {
	t.Helper()
	owner := map[int32]string{}
	for id, ts := range a.Active {
		for _, n := range ts {
			owner[n] = id
		}
	}
	count := map[int32]int{}
	limit := (int(tasks)*per + len(a.Active) - 1) / len(a.Active)
	for id, ts := range a.Standby {
		require.LessOrEqual(t, len(ts), limit, "standbys of %s: %v", id, ts)
		require.Len(t, slices.Compact(slices.Clone(ts)), len(ts), "%s twice standby of a task", id)
		for _, n := range ts {
			require.NotEqual(t, id, owner[n], "%s is owner and standby of %d", id, n)
			count[n]++
		}
	}
	for n := range tasks {
		require.Equal(t, per, count[n], "standbys of task %d", n)
	}
}

// TestAssignRandom: random ownership, offsets and memberships always give
// a balanced assignment in which every member keeps min(owned, share) of
// its valid claims, and valid standbys.
func TestAssignRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		tasks := int32(1 + r.IntN(40))
		n := 1 + r.IntN(8)
		var ms []MemberState
		owner := map[int32]int{}
		for j := range n {
			m := MemberState{ID: fmt.Sprintf("m%02d", j), Offsets: map[int32]int64{}}
			for k := range tasks {
				if r.IntN(3) == 0 {
					m.Offsets[k] = r.Int64N(100)
				}
			}
			ms = append(ms, m)
		}
		for k := range tasks {
			if j := r.IntN(n + 1); j < n { // some tasks orphaned
				ms[j].Tasks = append(ms[j].Tasks, k)
				owner[k] = j
			}
		}
		per := r.IntN(3)
		a := Assign(ms, tasks, per)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			requireBalanced(t, a, tasks)
			if n > 1 {
				requireStandbys(t, a, tasks, min(per, n-1))
			}
			hi := (int(tasks) + n - 1) / n
			for _, m := range ms {
				kept := 0
				for _, k := range m.Tasks {
					if slices.Contains(a.Active[m.ID], k) {
						kept++
					}
				}
				require.GreaterOrEqual(t, kept, min(len(m.Tasks), int(tasks)/n), "sticky: %s kept %d of %v in %v", m.ID, kept, m.Tasks, a.Active[m.ID])
				if len(m.Tasks) <= int(tasks)/n {
					require.Equal(t, len(m.Tasks), kept, "a member within its share keeps everything")
				}
				require.LessOrEqual(t, len(a.Active[m.ID]), hi)
			}
		})
	}
}
