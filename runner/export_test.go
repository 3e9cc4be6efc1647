package runner

import "time"

// SetPipelineTimings sets how often a pipeline purges its repartition
// topics and how long Run waits for their leaders, until the returned
// function restores them.
func SetPipelineTimings(purge, leaders time.Duration) (restore func()) {
	p, l := purgeInterval, repartitionTimeout
	purgeInterval, repartitionTimeout = purge, leaders
	return func() { purgeInterval, repartitionTimeout = p, l }
}
