"""A real Mosquitto broker on a loopback port for the twin tests (Debian's `mosquitto`).

``Mosquitto(workdir)`` writes a config (persistence on, so queued QoS 1 messages of persistent
sessions survive a restart), starts the broker and waits until it accepts connections.
``tls=True`` adds a CA, a server certificate for 127.0.0.1 (made here with openssl) and a TLS
listener; ``users`` a password file (mosquitto_passwd) with anonymous access off.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest


def mosquitto_or_skip() -> str:
    path = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
    if path is None:
        pytest.skip("mosquitto not found (make test installs it when run as root)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(args, cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found")
    folder.mkdir(parents=True, exist_ok=True)
    ext = folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=folder)  # fmt: skip
    for name, extra in (("server", ["-extfile", str(ext)]), ("client", [])):
        _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)  # fmt: skip
        _run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey",
             "ca.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", *extra,
             cwd=folder)  # fmt: skip
    return {k: folder / f"{k}" for k in ("ca.crt", "server.crt", "server.key", "client.crt",
                                          "client.key")}  # fmt: skip


class Mosquitto:
    def __init__(
        self,
        workdir: Path,
        tls: bool = False,
        users: dict[str, str] | None = None,
        require_certificate: bool = False,
    ) -> None:
        self.binary = mosquitto_or_skip()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.certs = make_certificates(self.workdir / "certs") if tls else {}
        lines = [
            f"listener {self.port} 127.0.0.1",
            "persistence true",
            f"persistence_location {self.workdir}/",
            "autosave_interval 1",
            "max_queued_messages 100000",
            f"log_dest file {self.workdir}/mosquitto.log",
            "log_type all",
        ]
        if os.geteuid() == 0:
            lines.append("user root")  # keep write access to the test's folder
        if tls:
            lines += [
                f"cafile {self.certs['ca.crt']}",
                f"certfile {self.certs['server.crt']}",
                f"keyfile {self.certs['server.key']}",
                f"require_certificate {'true' if require_certificate else 'false'}",
            ]
        if users:
            passwords = self.workdir / "passwords"
            passwords.write_text("")
            for user, password in users.items():
                _run("mosquitto_passwd", "-b", str(passwords), user, password, cwd=self.workdir)
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        self.conf = self.workdir / "mosquitto.conf"
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.workdir / "mosquitto.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}:\n{log}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"mosquitto did not listen on {self.port} within {timeout} s")

    def stop(self) -> None:
        """SIGTERM: the broker saves its persistent sessions and queued messages, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)
        self.process = None

    def restart(self, down_for: float = 0.5) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()
