package group

import (
	"cmp"
	"slices"
)

// MemberState is what the balancer knows of one member when it balances:
// the tasks it claims to own (from the cooperative protocol's owned
// partitions), the generation of that claim, and the changelog offsets of
// the stores it holds locally.
type MemberState struct {
	ID string
	// Tasks the member owns now (any order, duplicates ignored).
	Tasks []int32
	// Generation of the member's claim: a claim of a task beaten by a
	// claim at a higher generation is stale.
	Generation int32
	// Offsets: per task, the next changelog offset the member's local
	// store reflects (nil: none known).
	Offsets map[int32]int64
}

// Assignment is a balance of tasks 0..tasks-1 over members: Active[id]
// and Standby[id] are the tasks of member id, sorted.
type Assignment struct {
	Active  map[string][]int32
	Standby map[string][]int32
}

// Assign balances tasks 0..tasks-1 over members (a task is partition N of
// every input topic, given as one unit):
//
//   - every task has exactly one owner, and owners' counts differ by at
//     most one;
//   - sticky: a member keeps the tasks it owns as far as its share allows
//     (the members that own the most get the larger shares);
//   - a task that has to move (its owner left, or its owner is above its
//     share) goes to the member with the highest local changelog offset
//     for it, else to the member with the fewest tasks so far;
//   - when standbys > 0, each task gets up to standbys standby members,
//     never its owner, preferring members that hold the task's store
//     locally (highest offset first), then the members with the fewest
//     standbys; no member gets more than ceil(tasks*standbys/members).
//
// Assign is deterministic: the same input gives the same output whatever
// the order of members.
func Assign(members []MemberState, tasks int32, standbys int) Assignment {
	out := Assignment{Active: map[string][]int32{}, Standby: map[string][]int32{}}
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b MemberState) int { return cmp.Compare(a.ID, b.ID) })
	n := len(ms)
	for _, m := range ms {
		out.Active[m.ID] = nil
		out.Standby[m.ID] = nil
	}
	if tasks <= 0 {
		return out
	}

	// The valid claim of each task: the highest generation wins, the
	// first member in ID order among equals.
	owner := make([]int, tasks) // index into ms, -1 when unclaimed
	gen := make([]int32, tasks)
	for t := range owner {
		owner[t] = -1
	}
	for i, m := range ms {
		for _, t := range m.Tasks {
			if t < 0 || t >= tasks {
				continue
			}
			if owner[t] == -1 || m.Generation > gen[t] {
				owner[t], gen[t] = i, m.Generation
			}
		}
	}
	claimed := make([][]int32, n)
	for t, i := range owner {
		if i >= 0 {
			claimed[i] = append(claimed[i], int32(t))
		}
	}

	// Shares: tasks/n each, one more for the tasks%n members that own
	// the most (ties in ID order), so that they give up the least.
	base, rem := int(tasks)/n, int(tasks)%n
	byClaims := make([]int, n)
	for i := range byClaims {
		byClaims[i] = i
	}
	slices.SortStableFunc(byClaims, func(a, b int) int { return cmp.Compare(len(claimed[b]), len(claimed[a])) })
	share := make([]int, n)
	for k, i := range byClaims {
		share[i] = base
		if k < rem {
			share[i]++
		}
	}

	// offset returns member i's local offset of task t.
	offset := func(i int, t int32) (int64, bool) {
		o, ok := ms[i].Offsets[t]
		return o, ok && o >= 0
	}
	// bestElsewhere is the highest local offset of t among the members
	// other than i: the task a member gives up is the one another member
	// can take over most cheaply.
	bestElsewhere := func(i int, t int32) int64 {
		best := int64(-1)
		for j := range ms {
			if j == i {
				continue
			}
			if o, ok := offset(j, t); ok && o > best {
				best = o
			}
		}
		return best
	}

	assigned := make([][]int32, n)
	var free []int32
	for i := range ms {
		keep := claimed[i]
		if len(keep) > share[i] {
			// Give up the tasks that others hold most closely; keep the
			// rest (ties: keep the lower task numbers).
			keep = slices.Clone(keep)
			slices.SortStableFunc(keep, func(a, b int32) int {
				if c := cmp.Compare(bestElsewhere(i, a), bestElsewhere(i, b)); c != 0 {
					return c
				}
				return cmp.Compare(a, b)
			})
			free = append(free, keep[share[i]:]...)
			keep = keep[:share[i]]
		}
		assigned[i] = slices.Clone(keep)
	}
	for t, i := range owner {
		if i == -1 {
			free = append(free, int32(t))
		}
	}
	slices.Sort(free)
	for _, t := range free {
		best := -1
		var bestOff int64
		var bestHas bool
		for i := range ms {
			if len(assigned[i]) >= share[i] {
				continue
			}
			o, has := offset(i, t)
			switch {
			case best == -1:
			case has != bestHas:
				if !has {
					continue
				}
			case has && o != bestOff:
				if o < bestOff {
					continue
				}
			case len(assigned[i]) >= len(assigned[best]):
				continue
			}
			best, bestOff, bestHas = i, o, has
		}
		assigned[best] = append(assigned[best], t)
	}
	ownerOf := make([]int, tasks)
	for i := range ms {
		slices.Sort(assigned[i])
		out.Active[ms[i].ID] = assigned[i]
		for _, t := range assigned[i] {
			ownerOf[t] = i
		}
	}

	if standbys <= 0 || n < 2 {
		return out
	}
	per := min(standbys, n-1)
	limit := (int(tasks)*per + n - 1) / n
	counts := make([]int, n)
	// of[t][i]: member i is a standby of task t.
	of := make([][]bool, tasks)
	for t := range of {
		of[t] = make([]bool, n)
	}
	eligible := func(i int, t int32) bool { return i != ownerOf[t] && !of[t][i] }
	for t := range tasks {
		for range per {
			best := -1
			var bestOff int64
			var bestHas bool
			for i := range ms {
				if !eligible(i, t) || counts[i] >= limit {
					continue
				}
				o, has := offset(i, t)
				if best == -1 {
					best, bestOff, bestHas = i, o, has
					continue
				}
				// A local store beats none, a higher offset a lower;
				// then fewer standbys; then ID order.
				switch {
				case has != bestHas:
					if !has {
						continue
					}
				case has && o != bestOff:
					if o < bestOff {
						continue
					}
				case counts[i] >= counts[best]:
					continue
				}
				best, bestOff, bestHas = i, o, has
			}
			if best == -1 {
				best = shiftStandby(t, n, tasks, limit, counts, of, eligible)
			}
			of[t][best] = true
			counts[best]++
		}
	}
	standby := make([][]int32, n)
	for t := range tasks {
		for i := range n {
			if of[t][i] {
				standby[i] = append(standby[i], t)
			}
		}
	}
	for i := range ms {
		out.Standby[ms[i].ID] = standby[i]
	}
	return out
}

// shiftStandby makes room for a standby of task t when every member that
// may take it (not its owner, not yet its standby) is at the limit: it
// looks for a chain of members X0 → X1 → … → Xk, X0 eligible for t and Xk
// under the limit, where each Xj hands one of its standby tasks to Xj+1,
// and shifts along it; X0 is returned (the caller gives it t). Without
// such a chain, the eligible member with the fewest standbys is returned
// (over the limit). The caller counts X0's new standby.
func shiftStandby(t int32, n int, tasks int32, limit int, counts []int, of [][]bool, eligible func(int, int32) bool) int {
	type step struct {
		from int   // previous member, -1 for a start
		task int32 // task handed from the previous member to this one
	}
	prev := make([]step, n)
	seen := make([]bool, n)
	var queue []int
	for i := range n {
		if eligible(i, t) {
			seen[i], prev[i] = true, step{from: -1}
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		if counts[x] < limit && prev[x].from != -1 {
			// Shift back along the chain: each member takes the task
			// of its predecessor.
			end := x
			for prev[x].from != -1 {
				u, from := prev[x].task, prev[x].from
				of[u][from], of[u][x] = false, true
				x = from
			}
			counts[end]++
			counts[x]--
			return x
		}
		for u := range tasks {
			if !of[u][x] {
				continue
			}
			for y := range n {
				if !seen[y] && eligible(y, u) {
					seen[y], prev[y] = true, step{from: x, task: u}
					queue = append(queue, y)
				}
			}
		}
	}
	best := -1
	for i := range n {
		if eligible(i, t) && (best == -1 || counts[i] < counts[best]) {
			best = i
		}
	}
	return best
}
