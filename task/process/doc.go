// Package process is the contract between a task (package task) and the
// transformer it runs: a Processor prepares each fetched record once
// (Prepare: its state key and the transformer's view of it) and processes
// it against the encoded state of its key (Process), returning the encoded
// outputs and what happened to the state (a Result). A Policy says what
// the task does with the records they reject as invalid (a
// *flechtwerk.InvalidRecordError): crash, skip, substitute or dead-letter.
//
// Package transformer implements it for every *transformer.Stage;
// the engine finds that implementation for the value a user passed to
// runner.NewTransformer. Tests and tools can drive a task (task.Start)
// with any Processor.
//
// # Concurrency
//
// Process is called concurrently for records of different state keys, and
// serially, in input-topic then offset order, for records of one state
// key. Prepare is called from one goroutine per task. An implementation
// runs user code and may panic: the task recovers the panic into the
// record's error. A Policy's counts are atomic; its hook (Substitute) is
// called concurrently for records of different state keys.
package process
