package schemaregistry_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/flechtwerk/flechtwerk"
	"github.com/flechtwerk/flechtwerk/schemaregistry"
)

const (
	countryAvro = `{"type":"record","name":"Country","namespace":"flechtwerk.ref","fields":[{"name":"code","type":"string"}]}`
	addressAvro = `{"type":"record","name":"Address","namespace":"flechtwerk.ref","fields":[
 {"name":"city","type":"string"},{"name":"country","type":"flechtwerk.ref.Country"}]}`
	personAvro = `{"type":"record","name":"Person","namespace":"flechtwerk.ref","fields":[
 {"name":"name","type":"string"},{"name":"home","type":"flechtwerk.ref.Address"}]}`
	// personInline is personAvro with its references inlined, and a
	// field added with a default.
	personInline = `{"type":"record","name":"Person","namespace":"flechtwerk.ref","fields":[
 {"name":"name","type":"string"},
 {"name":"home","type":{"type":"record","name":"Address","fields":[
  {"name":"city","type":"string"},
  {"name":"country","type":{"type":"record","name":"Country","fields":[{"name":"code","type":"string"}]}}]}},
 {"name":"age","type":"int","default":-1}]}`
)

type country struct {
	Code string `avro:"code"`
}

type address struct {
	City    string  `avro:"city"`
	Country country `avro:"country"`
}

type person struct {
	Name string  `avro:"name"`
	Home address `avro:"home"`
}

type personV2 struct {
	Name string  `avro:"name"`
	Home address `avro:"home"`
	Age  int     `avro:"age"`
}

// Avro schema references: a codec whose schema uses named types of other
// subjects constructs with their texts (Reference, in dependency order),
// registers with them and round-trips; a reader of another schema reads a
// writer schema with nested references by fetching them, each once; a
// reference the registry lacks is not the record's fault; and a reference
// declared without its text fails the constructor with a coded error
// that names it.
func TestAvroReferences(t *testing.T) {
	for _, reg := range registries(t) {
		t.Run(reg.name, func(t *testing.T) {
			ctx := context.Background()
			tp := topic(t)
			countrySubj, addrSubj := tp+"-country", tp+"-address"
			cs, err := reg.cl.CreateSchema(ctx, countrySubj, sr.Schema{Schema: countryAvro, Type: sr.TypeAvro})
			require.NoError(t, err)
			countryRef := sr.SchemaReference{Name: "flechtwerk.ref.Country", Subject: countrySubj, Version: cs.Version}
			as, err := reg.cl.CreateSchema(ctx, addrSubj, sr.Schema{Schema: addressAvro, Type: sr.TypeAvro,
				References: []sr.SchemaReference{countryRef}})
			require.NoError(t, err)
			addrRef := sr.SchemaReference{Name: "flechtwerk.ref.Address", Subject: addrSubj, Version: as.Version}

			// Declared without text: a coded error naming the reference.
			_, err = schemaregistry.Avro[person](reg.cl, tp, personAvro, schemaregistry.References(addrRef))
			require.ErrorIs(t, err, flechtwerk.ErrInvalidOption)
			require.ErrorContains(t, err, "flechtwerk.ref.Address (subject "+addrSubj)
			require.ErrorContains(t, err, "schemaregistry.Reference")

			// With the texts, in dependency order.
			w, err := schemaregistry.Avro[person](reg.cl, tp, personAvro,
				schemaregistry.Reference(countryRef, countryAvro), schemaregistry.Reference(addrRef, addressAvro))
			open(t, w, err)
			p := person{Name: "Ada", Home: address{City: "Bern", Country: country{Code: "CH"}}}
			b, err := w.Encode(p)
			require.NoError(t, err)
			got, err := w.Decode(b)
			require.NoError(t, err)
			require.Equal(t, p, got)
			s, err := reg.cl.SchemaByID(ctx, w.ID())
			require.NoError(t, err)
			require.ElementsMatch(t, []sr.SchemaReference{countryRef, addrRef}, s.References)

			// A writer schema registered with only its direct reference
			// (Address), which references Country in turn.
			ws, err := reg.cl.CreateSchema(ctx, tp+"-other", sr.Schema{Schema: personAvro, Type: sr.TypeAvro,
				References: []sr.SchemaReference{addrRef}})
			require.NoError(t, err)
			payload, err := avro.Marshal(avro.MustParse(`{"type":"record","name":"P","fields":[{"name":"name","type":"string"},
 {"name":"home","type":{"type":"record","name":"A","fields":[{"name":"city","type":"string"},
 {"name":"country","type":{"type":"record","name":"C","fields":[{"name":"code","type":"string"}]}}]}}]}`), p)
			require.NoError(t, err)
			hdr, _ := new(sr.ConfluentHeader).AppendEncode(nil, ws.ID, nil)
			written := append(hdr, payload...)

			var refFetches atomic.Int32
			if reg.fake != nil {
				reg.fake.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
					if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/subjects/"+tp) && strings.Contains(r.URL.Path, "/versions/") {
						refFetches.Add(1)
					}
					return false
				})
			}
			rd, err := schemaregistry.Avro[personV2](reg.cl, tp+"-reader", personInline)
			require.NoError(t, err)
			for range 3 {
				v, err := rd.Decode(written)
				require.NoError(t, err)
				require.Equal(t, personV2{Name: "Ada", Home: p.Home, Age: -1}, v)
			}
			v, err := rd.Decode(b) // the codec's schema, with both references
			require.NoError(t, err)
			require.Equal(t, personV2{Name: "Ada", Home: p.Home, Age: -1}, v)
			if reg.fake == nil {
				return
			}
			require.Equal(t, int32(2), refFetches.Load(), "Address and Country, each fetched once")

			// A reference the registry does not answer for: unavailable,
			// not an invalid record.
			reg.fake.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/subjects/"+countrySubj+"/versions/") {
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(`{"error_code":40401,"message":"Subject not found"}`))
					return true
				}
				return false
			})
			fresh, err := schemaregistry.Avro[personV2](reg.cl, tp+"-reader", personInline)
			require.NoError(t, err)
			_, err = fresh.Decode(written)
			require.ErrorIs(t, err, flechtwerk.ErrUnavailable)
			require.NotErrorIs(t, err, flechtwerk.ErrInvalidRecord)
			require.ErrorContains(t, err, "referenced schema "+countrySubj)
		})
	}
}
