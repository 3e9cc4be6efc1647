// Package pollstage is the engine's side of the extractors users build
// (package extractor): the interface through which the extractor engine
// drives a poll function and its codecs, and the registry package
// extractor fills from its init. It is package stage's twin for
// extractors, kept apart because it names configtopic's types and
// configtopic imports transformer, which imports stage.
//
// Users never import this package; the engine may change it freely.
// Registration happens at init; lookups are safe for concurrent use.
package pollstage
