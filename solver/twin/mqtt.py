"""Live sensor messages from an MQTT broker (paho-mqtt), for the twin's run loop.

Delivery: QoS 1 on a persistent session (MQTT 3.1.1, ``clean_session=False``, a fixed client
id), so the broker keeps messages published while this client is away and delivers them when it
returns. Acknowledgement is manual: a message is acknowledged only after the run loop has taken
it (``drain`` then ``acknowledge``, i.e. after it was accepted or quarantined), so a crash
before that leaves it with the broker, which delivers it again; the validator drops the
redelivered copy as a duplicate. Reconnection is paho's, with exponential backoff between
``reconnect_min_s`` and ``reconnect_max_s``; the simulation never waits for the network.

Credentials come from environment variables or files named in the config (never the values
themselves) and are never logged.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger("solver.twin")


@dataclass(frozen=True)
class MqttSettings:
    """Attributes:
    host, port: the broker.
    topics: topic filters to subscribe to (``+``/``#`` wildcards allowed).
    client_id: fixed, so the broker can keep the session between connections.
    keepalive_s: MQTT keepalive.
    reconnect_min_s, reconnect_max_s: the backoff between reconnection attempts.
    tls: connect with TLS; ca_file: the broker's CA (None: the system's); cert_file, key_file:
        a client certificate (both or neither).
    username_env, password_env: names of environment variables holding the credentials;
    username_file, password_file: or files holding them (first line). None: not used.
    """

    host: str
    port: int
    topics: tuple[str, ...]
    client_id: str
    keepalive_s: int = 30
    reconnect_min_s: float = 0.5
    reconnect_max_s: float = 30.0
    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    username_env: str | None = None
    password_env: str | None = None
    username_file: str | None = None
    password_file: str | None = None


class Delivery(NamedTuple):
    topic: str
    payload: bytes
    received: float  # wall clock, s since the epoch
    mid: int  # paho's message id, for the acknowledgement


def _secret(env: str | None, path: str | None, what: str) -> str | None:
    """A credential from an environment variable or the first line of a file (never logged)."""
    if env:
        value = os.environ.get(env)
        if value is None:
            raise ValueError(f"twin.mqtt.{what}_env names {env!r}, which is not set")
        return value
    if path:
        try:
            return Path(path).read_text().splitlines()[0] if Path(path).stat().st_size else ""
        except OSError as err:
            raise ValueError(f"twin.mqtt.{what}_file {path!r}: {err.strerror}") from None
    return None


class MqttSource:
    """A background MQTT client; the run loop drains it between chunks."""

    def __init__(self, settings: MqttSettings) -> None:
        import paho.mqtt.client as mqtt

        self.settings = settings
        self._queue: deque[Delivery] = deque()
        self._lock = threading.Lock()
        self.connected = threading.Event()
        self.connects = 0
        self.disconnects = 0
        self.last_message_wall: float | None = None
        self._subscription: int | None = None
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2,
            client_id=settings.client_id,
            protocol=mqtt.MQTTv311,
            clean_session=False,
            manual_ack=True,
        )
        client.reconnect_delay_set(settings.reconnect_min_s, settings.reconnect_max_s)
        username = _secret(settings.username_env, settings.username_file, "username")
        password = _secret(settings.password_env, settings.password_file, "password")
        if username is not None or password is not None:
            client.username_pw_set(username or "", password)
        if settings.tls:
            if bool(settings.cert_file) != bool(settings.key_file):
                raise ValueError("twin.mqtt.cert_file and twin.mqtt.key_file go together")
            client.tls_set(
                ca_certs=settings.ca_file,
                certfile=settings.cert_file,
                keyfile=settings.key_file,
                cert_reqs=ssl.CERT_REQUIRED,
                tls_version=ssl.PROTOCOL_TLS_CLIENT,
            )
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        self._client = client

    # --- paho callbacks (its network thread) ---

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            log.warning("MQTT broker %s:%d refused the connection: %s", self.settings.host,
                        self.settings.port, reason_code)  # fmt: skip
            return
        self.connects += 1
        # connected means subscribed: the broker drops what is published before it has the
        # subscription (the first reading of a fresh session was lost that way under load)
        _, self._subscription = client.subscribe([(topic, 1) for topic in self.settings.topics])
        log.info("MQTT connected to %s:%d (session present: %s)", self.settings.host,
                 self.settings.port, flags.session_present)  # fmt: skip

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        if mid != self._subscription:
            return
        if any(code.is_failure for code in reason_codes):
            log.warning("MQTT broker refused a subscription to %s: %s",
                        self.settings.topics, reason_codes)  # fmt: skip
        self.connected.set()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        if self.connected.is_set():
            self.disconnects += 1
            log.warning("MQTT disconnected (%s); reconnecting with backoff", reason_code)
        self.connected.clear()

    def _on_message(self, client, userdata, message) -> None:
        now = time.time()
        with self._lock:
            self._queue.append(Delivery(message.topic, bytes(message.payload), now, message.mid))
            self.last_message_wall = now

    # --- the run loop's side ---

    def start(self) -> None:
        """Connect in the background (the first attempt may fail: paho keeps retrying)."""
        self._client.connect_async(self.settings.host, self.settings.port,
                                   self.settings.keepalive_s)  # fmt: skip
        self._client.loop_start()

    def drain(self, limit: int | None = None) -> list[Delivery]:
        """Take the waiting messages, oldest first (at most ``limit``)."""
        with self._lock:
            count = len(self._queue) if limit is None else min(limit, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def oldest_arrival(self) -> float | None:
        """Wall-clock arrival time of the oldest waiting message (None: nothing waits)."""
        with self._lock:
            return self._queue[0].received if self._queue else None

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def acknowledge(self, deliveries: list[Delivery]) -> None:
        """PUBACK the messages the run loop has kept (accepted or quarantined)."""
        for delivery in deliveries:
            self._client.ack(delivery.mid, 1)

    def publish(self, topic: str, payload: bytes) -> None:
        """Send with QoS 1; paho queues it while disconnected and sends it on reconnection."""
        self._client.publish(topic, payload, qos=1)

    def stop(self) -> None:
        self.connected.clear()  # a disconnect asked for is not a loss of connection
        self._client.disconnect()
        self._client.loop_stop()
