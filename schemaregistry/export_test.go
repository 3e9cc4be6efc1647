package schemaregistry

import "time"

// AbsentFor is how long Decode keeps a schema id as absent.
const AbsentFor = absentFor

// SetClock makes c read the time from now.
func SetClock[T any](c *Codec[T], now func() time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}
