// Package config holds the options of a runner for both stage kinds
// (transformers and extractors): their defaults (Defaults), their checks
// (Options.Validate, every problem at once, coded), and the names derived
// from the application id (group, changelog topic, transactional ID and
// store directory of task N). Package runner fills it from its public
// options; the engines (task, the extractor engine) read it. Users never
// see it.
package config
