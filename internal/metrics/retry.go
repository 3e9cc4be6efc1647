package metrics

import "time"

// PollRetried records a poll on token tried again after a transient error.
func (r *Recorder) PollRetried(token int32) {
	if r == nil {
		return
	}
	r.pollRetries.WithLabelValues(part(token)).Inc()
}

// Quarantined sets the number of quarantined configs.
func (r *Recorder) Quarantined(n int) {
	if r == nil {
		return
	}
	r.quarantined.Set(float64(n))
}

// SinkWrite records a Write of n outputs of topic's partition that took d
// and ended with err.
func (r *Recorder) SinkWrite(topic string, partition int32, n int, d time.Duration, err error) {
	if r == nil {
		return
	}
	p := part(partition)
	r.sinkWriteTime.Observe(d.Seconds())
	if err != nil {
		r.sinkErrors.WithLabelValues(topic, p).Inc()
		return
	}
	r.sinkWrites.WithLabelValues(topic, p).Inc()
	r.sinkRecords.WithLabelValues(topic, p).Add(float64(n))
}

// SinkRetried records a Write of topic's partition tried again.
func (r *Recorder) SinkRetried(topic string, partition int32) {
	if r == nil {
		return
	}
	r.sinkRetries.WithLabelValues(topic, part(partition)).Inc()
}

// SinkCommitted records the offset committed for topic's partition.
func (r *Recorder) SinkCommitted(topic string, partition int32, offset int64) {
	if r == nil {
		return
	}
	r.sinkCommitted.WithLabelValues(topic, part(partition)).Set(float64(offset))
}
