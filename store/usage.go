package store

// DiskUsage returns the disk space the store's files take (Pebble's
// DiskSpaceUsage), for metrics.
func (s *Store) DiskUsage() uint64 { return s.db.Metrics().DiskSpaceUsage() }
