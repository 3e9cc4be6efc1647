// Package sinkstage is the engine's side of the sinks users build (package
// sink): the interface through which the sink runner decodes records and
// hands them to the user's Sink, and the registry package sink fills from
// its init. It is package stage's twin for sinks, kept apart so that the
// sink package's types never reach the transformer engine.
//
// Users never import this package; the engine may change it freely.
// Registration happens at init; lookups are safe for concurrent use.
package sinkstage
