// Package topics validates the topics an application reads before anything
// runs: they exist and have equal partition counts.
package topics
