// Package fencing owns the static transactional IDs and the fence that makes
// an ownership handover safe.
//
// Every task (one input partition number N of a transformer, or one
// ownership token of an extractor) writes through a transactional producer
// with the static ID {application id}-{N}. Initializing that producer's ID
// (InitProducerId) bumps the ID's epoch: the broker aborts any transaction a
// previous owner left open and rejects every later write or commit of that
// owner. Init is that fence; only after it has returned is the task's
// changelog final and its committed offset stable.
//
// The broker reports a fenced producer as PRODUCER_FENCED (coordinator
// paths) or INVALID_PRODUCER_EPOCH (produce path); Classify turns both into
// ErrFenced, keeping the kerr value in the chain.
//
// # Concurrency
//
// The functions here are safe for concurrent use; the *kgo.Client returned
// by Init belongs to one task.
//
// The engine opens every transactional producer of a task through Init. A
// tool or a test that must take a task's transactional ID over (fence a
// running instance, play a zombie) does the same with TransactionalID and
// Init, and recognizes a fence with IsFenced.
package fencing
