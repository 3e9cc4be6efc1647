package task

// Sizes calls output with the key plus value size of every output record
// of the batch and state with the value size of every state put (not
// tombstones), for metrics.
func (b *Batch) Sizes(output, state func(n int)) {
	for _, r := range b.outputs {
		output(len(r.Key) + len(r.Value))
	}
	for _, w := range b.writes {
		if !w.Delete {
			state(len(w.Value))
		}
	}
}
