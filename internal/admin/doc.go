// Package admin implements the flechtwerk admin command (cmd/flechtwerk):
// describe an application (group members and the tasks they hold, input
// lag, changelog size, transactions of its transactional IDs), reset its
// input offsets (and with --state its changelog) while it is stopped, and
// read a key's committed state from its changelog; and, without a
// broker, manage keyring files and seal, open, sign and verify values
// (package secrets). Every Kafka command reaches the cluster through the
// same connection flags (conn.go: brokers, TLS, SASL PLAIN and SCRAM;
// secrets from a file or the environment).
//
// Run takes the arguments and the standard streams, so tests call it
// directly. It only reads and writes Kafka through an admin client and
// short-lived readers; it keeps no state between calls and is safe for
// concurrent use by separate calls.
package admin
