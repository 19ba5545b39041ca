"""HTTP liveness and readiness endpoints of a twin service (stdlib ``http.server`` in a thread).

- ``GET /livez``: 200 while the run loop advances: a chunk ended within ``deadline`` s, or, before
  the first chunk end (imports, compilation, the start-up check, a resume), the health server
  started less than ``startup_deadline`` s ago. Otherwise 503: the loop is stuck (a hung device,
  a chunk or checkpoint save longer than the deadline), and an orchestrator should restart it.
- ``GET /readyz``: 200 when the twin serves its purpose: the source is connected (MQTT: subscribed
  to its topics; a replay needs no connection), at least one chunk ended since the start, and the
  loop is live. Otherwise 503. A broker outage makes the twin unready but not dead: the model
  keeps stepping and the client reconnects by itself.

Both answer JSON: ``{"status": "ok" | "starting" | "stalled" | "not_ready", "reason": ...}`` with
the figures behind it (chunks, step, seconds since the last chunk end, the deadline). Nothing of
the broker's address, user or credentials is in a body. The run loop calls ``Health.advanced`` at
each chunk end (``solver.twin.session``); the server thread only reads. The server binds
127.0.0.1 unless configured otherwise (``twin.health.address``): it has no authentication.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LIVE_PATH = "/livez"
READY_PATH = "/readyz"


@dataclass(frozen=True)
class HealthConfig:
    """Attributes:
    port: serve ``/livez`` and ``/readyz`` on this port (0: any free port, logged); None: off.
    address: the bind address (127.0.0.1: this machine only; 0.0.0.0 in a container).
    deadline: s; live while a chunk ended less than this long ago. Choose it above the longest
        wall time between chunk ends: a chunk, a paced twin's wait, a checkpoint save.
    startup_deadline: s; before the first chunk end, live for this long after the server started
        (compilation, the start-up check and a resume happen there).
    """

    port: int | None = None
    address: str = "127.0.0.1"
    deadline: float = 30.0
    startup_deadline: float = 600.0


class Health:
    """What the probes report, shared between the run loop (writes) and the server (reads).

    ``connected``: whether the source is connected (``None``: a source without a connection, a
    replay). ``clock``: monotonic seconds (``time.monotonic``).
    """

    def __init__(
        self,
        deadline: float,
        startup_deadline: float,
        connected: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deadline = deadline
        self.startup_deadline = startup_deadline
        self._connected = connected
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._last_advance: float | None = None
        self._chunks = 0
        self._step: int | None = None

    def advanced(self, step: int) -> None:
        """The run loop ended a chunk at ``step`` (called between chunks only)."""
        now = self._clock()
        with self._lock:
            self._last_advance = now
            self._chunks += 1
            self._step = step

    def liveness(self) -> tuple[bool, dict]:
        """(live, JSON body) as ``/livez`` answers now."""
        now = self._clock()
        with self._lock:
            last, chunks, step = self._last_advance, self._chunks, self._step
        if last is None:
            waited = now - self._started
            body = {"chunks": 0, "seconds_since_start": round(waited, 3),
                    "startup_deadline_s": self.startup_deadline}  # fmt: skip
            if waited <= self.startup_deadline:
                return True, {"status": "starting", "reason": "no chunk has ended yet", **body}
            return False, {
                "status": "stalled",
                "reason": f"no chunk ended within the start-up deadline of "
                f"{self.startup_deadline:g} s",
                **body,
            }
        since = now - last
        body = {"chunks": chunks, "step": step, "seconds_since_chunk": round(since, 3),
                "deadline_s": self.deadline}  # fmt: skip
        if since <= self.deadline:
            return True, {"status": "ok", "reason": "the loop is advancing", **body}
        return False, {
            "status": "stalled",
            "reason": f"no chunk ended for {since:.3g} s (deadline {self.deadline:g} s)",
            **body,
        }

    def readiness(self) -> tuple[bool, dict]:
        """(ready, JSON body) as ``/readyz`` answers now."""
        live, body = self.liveness()
        connected = None if self._connected is None else bool(self._connected())
        body = {**body, "source_connected": connected}
        if connected is False:
            return False, {**body, "status": "not_ready",
                           "reason": "the MQTT broker is not connected (reconnecting)"}  # fmt: skip
        if not live:
            return False, {**body, "status": "not_ready", "reason": body["reason"]}
        if body["chunks"] == 0:
            return False, {**body, "status": "not_ready", "reason": "no chunk has ended yet"}
        return True, {**body, "status": "ok", "reason": "connected and stepping"}


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HealthServer:
    """``/livez`` and ``/readyz`` of ``health`` over HTTP on ``address:port`` (port 0: any free
    one; ``self.port`` says which), in a daemon thread until ``close``.

    Raises:
        OSError: the address cannot be bound (in use, not an address of this machine).
    """

    def __init__(self, health: Health, port: int, address: str = "127.0.0.1") -> None:
        self.health = health
        routes = {LIVE_PATH: health.liveness, READY_PATH: health.readiness}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                probe = routes.get(self.path.split("?", 1)[0])
                if probe is None:
                    code, body = 404, {"status": "not_found", "paths": sorted(routes)}
                else:
                    ok, body = probe()
                    code = 200 if ok else 503
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args) -> None:
                """No line per probe (a kubelet asks every few seconds)."""

        server_class = _IPv6Server if ":" in address else ThreadingHTTPServer
        self._server = server_class((address, port), Handler)
        self._server.daemon_threads = True
        self.address = address
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
            name="twin-health", daemon=True,
        )  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
