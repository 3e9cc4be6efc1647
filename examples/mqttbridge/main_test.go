package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExample runs the example on its embedded brokers (or on the MQTT
// broker of MQTT_BROKER): every reading reaches Kafka.
func TestExample(t *testing.T) {
	args := []string{"mqttbridge", "-n", "300", "-client-id", "example-" + time.Now().Format("150405.000")}
	if u := os.Getenv("MQTT_BROKER"); u != "" {
		args = append(args, "-mqtt", u)
	}
	os.Args = args
	require.NoError(t, run())
}
