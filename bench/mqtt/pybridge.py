"""The Python library's MQTT bridge (flechtwerk 0.17.0, flechtwerk.mqtt), the
baseline of bench/mqtt/run.sh: it relays every message of the configs'
topic filters to one Kafka topic, the same records as the Go bench's relay
(key: the MQTT topic; value: the payload, re-encoded).

Usage: pybridge.py BOOTSTRAP MQTT_HOST MQTT_PORT APP CLIENT_ID CONFIG_TOPIC OUT_TOPIC
"""
import asyncio
import json
import sys
from datetime import timedelta

from flechtwerk import Flechtwerk, Message, MqttBrokerConfig
from flechtwerk.mqtt import MqttExtractor


def main() -> None:
    bootstrap, host, port, app, client_id, config_topic, out = sys.argv[1:8]

    def relay(_config, topic, payload):
        return Message(key=topic, topic=out, value=json.dumps(payload.raw, separators=(",", ":")))

    stage = MqttExtractor.of(config_topics=[config_topic], relay=relay)
    module = Flechtwerk.of(
        application_id=app,
        bootstrap_servers=bootstrap,
        client_id=client_id,
        stage=stage,
        compression_type=None,
        mqtt=MqttBrokerConfig(broker=host, port=int(port)),
        poll_interval=timedelta(milliseconds=100),
    )
    asyncio.run(module.run())


if __name__ == "__main__":
    main()
