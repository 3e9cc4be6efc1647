// Package config holds the options of a runner for every stage kind
// (transformers, extractors, sinks and MQTT bridges): their defaults
// (Defaults), the checks of their values (Options.Validate and
// Options.ValidateDelivery, every problem at once, coded), and the names
// derived from the application id (group, changelog topic, transactional
// ID and store directory of task N). Package runner fills it from its
// public options, whose types already keep each option to the kinds that
// read it; the engines read it. Users never see it.
package config
