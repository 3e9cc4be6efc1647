package transformer_test

import "github.com/twmb/franz-go/pkg/kgo"

func kgoRecord(key, value string) *kgo.Record {
	return &kgo.Record{Topic: "in", Key: []byte(key), Value: []byte(value)}
}
