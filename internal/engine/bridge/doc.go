// Package bridge is the engine of the MQTT→Kafka bridge (package
// mqttbridge is its user API): one MQTT connection with one persistent
// session per process, subscriptions reconciled against the active configs
// of the config topics, and a cycle that relays what arrived, commits the
// records in one Kafka transaction and only then acknowledges the MQTT
// messages they came from.
//
// Concurrency: the MQTT client's router goroutine only appends to the
// inbound queue (it never blocks); one goroutine, Run's, drains the queue,
// reconciles, commits and acknowledges. Registration happens at init;
// lookups are safe for concurrent use. Users never import this package.
package bridge
