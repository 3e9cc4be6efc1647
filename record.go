package flechtwerk

import "time"

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record as read (read_committed) from a Kafka topic: the
// input record of a transformer (transformer.Record) and a config record
// (configtopic.Record) are this type, so a stage can use either as it is.
// The slices belong to the record's reader: a stage may keep them but must
// not modify them.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
}
