// Package errchain edits error chains: Without drops the errors that match
// a target from a chain and keeps their other causes. Its functions are
// safe for concurrent use.
package errchain
