package configtopic

import "time"

// SetPartitionCheck sets how often Run looks for added partitions.
func (t *Table[C]) SetPartitionCheck(d time.Duration) { t.cfg.partitionCheck = d }
