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
// reads any id: one it has not seen is fetched from the registry once
// (concurrent decodes of it wait for one request) and kept, and a value
// written with another schema of the subject is read into the codec's
// type (Avro by schema resolution).
//
// # References
//
// An Avro schema that uses named types of schemas registered under other
// subjects declares them with Reference, which gives each referenced
// schema's text (in dependency order) so that the constructor can parse
// the codec's schema; Open registers the schema with those references.
// Decode reads a writer schema with references by fetching the schemas
// it references, directly or not, by subject and version, each once.
// References declares references without their text: enough for a
// Protobuf import (the codec does not parse .proto text); a JSON Schema's
// external $ref is not resolved by the codec.
//
// # Lifecycle and errors
//
// A Codec implements flechtwerk.Lifecycle; the runner opens a stage's
// state codec and the codecs of the outputs it declares
// (transformer.DeclareOutput, transformer.Produces) before it processes
// anything, and a test or a program calls Open itself. An input codec
// needs no Open (Decode fetches the writer's schema by id) and the runner
// does not open it, so a consumer never registers its schema on the
// producer's subject. Open fails with a *flechtwerk.ConfigError-coded
// error that names the subject: flechtwerk.CodeSchemaRefused when the
// registry refuses the schema or the request (incompatible with the
// subject's versions, invalid, not authorized: 4xx), not to be retried;
// flechtwerk.CodeSchemaRegistryUnavailable when it cannot be reached,
// times out or answers 408, 429 or 5xx, safe to retry. Encode before Open
// fails with ErrNotOpen.
//
// Bytes that are not a value of the codec's format fail Decode with an
// error matching ErrWireFormat and flechtwerk.ErrInvalidRecord; as an
// input codec's error it makes the record invalid, handled by the
// runner's invalid-record policy. A schema id is proven unknown only by
// the registry's "schema not found" (error code 40403), remembered for a
// few seconds. Every other failure to fetch a schema (no answer, a
// timeout, another 404, a 5xx) is an error matching
// flechtwerk.ErrUnavailable: never an invalid record, whatever the
// policy; Run ends with the record not committed. Decode takes no
// context: each fetch is bounded by RequestTimeout.
//
// # Example
//
// An Avro codec for a declared output topic's values and one for a
// stateful transformer's state, on one registry client:
//
//	cl, err := sr.NewClient(sr.URLs("http://registry:8081"))
//	if err != nil { ... }
//	totals, err := schemaregistry.Avro[Total](cl, "totals", totalSchema)
//	if err != nil { ... }
//	state, err := schemaregistry.Avro[Total](cl, "", totalSchema,
//		schemaregistry.Subject("orders-app-state"))
//	if err != nil { ... }
//	totalsOut := transformer.DeclareOutput[[]byte, Total]("totals", transformer.Bytes(), totals)
//	stage := transformer.NewTyped(func(ctx context.Context, rec *transformer.TypedRecord[Order],
//		t Total, out *transformer.Emitter[Total]) error {
//		t.Amount += rec.Value.Amount
//		out.SetState(t)
//		return totalsOut.Send(out, rec.Key, t)
//	}, transformer.StateCodec[Total](state), transformer.Produces(totalsOut))
//
// The runner opens both codecs before the stage runs: an output schema
// the subject refuses ends Run at start, before anything is consumed.
// A codec used outside a runner, or whose Encode a transform calls
// directly, must be opened by its user.
//
// # Concurrency
//
// Encode and Decode are safe for concurrent use. Open and Close must not
// run concurrently with them or with each other.
package schemaregistry
