// Package mqtttest gives tests an MQTT broker: Mosquitto (or any broker)
// when MQTT_BROKER names one (tcp://host:port), else an embedded broker
// (mochi-mqtt) on a loopback port, stopped when the test ends; and a QoS 1
// publisher. Helpers are safe for concurrent use by one test.
package mqtttest
