// Package schemaregistry provides codecs that encode and decode values in
// the Confluent Schema Registry wire format — Avro, Protobuf and JSON
// Schema — for a transformer's inputs (transformer.InputCodec), its
// outputs and its state (transformer.StateCodec). They run over franz-go's
// registry client (github.com/twmb/franz-go/pkg/sr) and work with any
// registry that speaks Confluent's REST API: Confluent Schema Registry,
// Apicurio Registry (/apis/ccompat/v7), Redpanda, Karapace.
//
// # Wire format
//
// A value is a zero "magic" byte, the schema id as 4 bytes big endian,
// for Protobuf the message index (zig-zag varints: a count then the path
// of the message in its .proto file, or a single 0 for the file's first
// message), then the value in the schema's binary form (Avro binary
// encoding, Protobuf, or JSON text). Confluent's serializers, franz-go's
// sr.Serde and the other registry clients read and write the same bytes.
//
// # Subjects and schema ids
//
// A codec's schema lives under a subject named by TopicNameStrategy:
// "<topic>-value", or "<topic>-key" with the Key option; Subject names one
// outright (for a state codec, pass the changelog topic, or any name of
// your choice). Open registers the schema under the subject (the registry
// returns the existing id when it has the schema already) or, with
// AutoRegister(false), only looks it up; Encode writes that id. Decode
// reads any id: one it has not seen is fetched from the registry once and
// kept, and a value written with another schema of the subject is read
// into the codec's type (Avro by schema resolution).
//
// # Lifecycle and errors
//
// A Codec implements flechtwerk.Lifecycle; the runner opens a stage's
// state and output codecs before it processes anything, and a test or a
// program calls Open itself. An input codec needs no Open (Decode fetches
// the writer's schema by id) and the runner does not open it, so a
// consumer never registers its schema on the producer's subject. Open fails with a *flechtwerk.ConfigError-coded error that
// names the subject: flechtwerk.CodeSchemaRefused when the registry
// refuses the schema (incompatible with the subject's versions, invalid),
// flechtwerk.CodeSchemaRegistryUnavailable when it cannot be reached.
// Encode before Open fails with ErrNotOpen. Bytes that are not a value of
// the codec's format fail Decode with an error matching ErrWireFormat and
// flechtwerk.ErrInvalidRecord; as an input codec's error it makes the
// record invalid, handled by the runner's invalid-record policy.
//
// # Example
//
// An Avro codec for an output topic's values and one for a stateful
// transformer's state, on one registry client:
//
//	cl, err := sr.NewClient(sr.URLs("http://registry:8081"))
//	if err != nil { ... }
//	totals, err := schemaregistry.Avro[Total](cl, "totals", totalSchema)
//	if err != nil { ... }
//	state, err := schemaregistry.Avro[Total](cl, "", totalSchema,
//		schemaregistry.Subject("orders-app-state"))
//	if err != nil { ... }
//	stage := transformer.NewTyped(func(ctx context.Context, rec *transformer.TypedRecord[Order],
//		t Total, out *transformer.Emitter[Total]) error {
//		t.Amount += rec.Value.Amount
//		out.SetState(t)
//		b, err := totals.Encode(t)
//		if err != nil {
//			return err
//		}
//		out.Send("totals", rec.Key, b)
//		return nil
//	}, transformer.StateCodec[Total](state))
//
// Both codecs must be open before the stage runs (the runner opens those
// it is given as a stage's codecs; open the others yourself):
// totals.Open(ctx) and state.Open(ctx).
//
// # Concurrency
//
// Encode and Decode are safe for concurrent use. Open and Close must not
// run concurrently with them or with each other.
package schemaregistry
