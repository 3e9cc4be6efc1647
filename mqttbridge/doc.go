// Package mqttbridge is the MQTT→Kafka bridge stage: it relays the messages
// of MQTT topic filters, declared by the configs of config topics, into
// Kafka, and acknowledges an MQTT message only after the Kafka transaction
// holding its record committed. runner.NewBridge runs a *Bridge (its options are the
// runner's BridgeOpt: SeedBrokers, ApplicationID, ConfigTopics,
// TransactionTimeout, Metrics, WithKafkaOpts, WithLogger).
//
// The contract (docs/mqtt.md has it in full):
//
//   - One MQTT connection per process with one stable client id
//     (ClientID): a persistent session (clean session off), so the broker
//     keeps what was not acknowledged for the same client id. The bridge
//     speaks MQTT 3.1.1 (github.com/eclipse/paho.mqtt.golang); the
//     session's lifetime is the broker's setting (Mosquitto:
//     persistent_client_expiration), not the client's.
//   - Replicas share the work through shared subscriptions
//     $share/{application id}/{filter}; the broker dispatches, nothing is
//     owned through Kafka, and the bridge keeps no state.
//   - Each cycle drains up to MaxBatch received messages, relays them,
//     commits the records in one transaction of the transactional ID
//     {application id}-mqtt-{client id} and only then acknowledges every
//     message of the batch, in arrival order. A crash before the commit
//     leaves nothing visible; a crash after it and before the
//     acknowledgements makes the broker deliver the batch again: delivery
//     is at-least-once, and a publisher's dedupe key closes the window
//     downstream (see Dedupe).
//   - Subscriptions follow the active (not suspended, see
//     extractor.SuspendedHeader) configs, reconciled whenever the config
//     table changes: new filters are subscribed in their share form (and
//     their bare form unsubscribed), removed ones unsubscribed. Shutdown
//     never unsubscribes.
//   - Until the first reconciliation every received message is held
//     unacknowledged (the session's replayed backlog); after it, a message
//     no active config's filter matches is acknowledged and dropped
//     ("stale").
//   - A lost connection ends Run with ErrDisconnected: no reconnect
//     in-process; restart the process with the same client id.
//
// Metrics (runner.Metrics): flechtwerk_mqtt_received_total,
// _forwarded_total, _dropped_total{reason}, _pending_acks, _connected,
// _session_present, _subscriptions, _commits_total, _commit_seconds.
// Runner.Ready reports nil once the first reconciliation subscribed.
//
// A Bridge is immutable after New and safe to hand to one runner.
package mqttbridge
