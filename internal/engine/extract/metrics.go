package extract

import (
	"context"

	"github.com/flechtwerk/flechtwerk/configtopic"
	"github.com/flechtwerk/flechtwerk/internal/metrics"
	"github.com/flechtwerk/flechtwerk/store"
)

// source gives the scrape-time metrics of an extractor: the config table.
type source struct{ table *configtopic.Table[any] }

func (source) Lag(context.Context) (map[metrics.TP]int64, error) { return nil, nil }

func (source) Stores(func(int32, *store.Store)) {}

func (s source) Configs() (int, func([]byte) bool) {
	return s.table.Len(), func(k []byte) bool { _, ok := s.table.Get(k); return ok }
}
