"""A throwaway CA (``cryptography``) and a TLS-terminating proxy in front of the plain dev broker.

The proxy accepts TLS connections (optionally requiring a client certificate), records the SNI name each
client sent, and pipes the decrypted bytes to the broker's plaintext port.  With the broker's
``advertised.listeners`` pointing at the proxy, every connection a client makes goes through TLS, so the
client's TLS code is exercised against a real broker without a broker-side TLS listener.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from kafka_handoff.devbroker.security import generate_ca


@dataclass
class Pki:
    ca_pem: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key_encrypted: Path
    client_key_password: str
    other_ca_pem: Path
    expired_cert: Path
    expired_key: Path


def make_pki(directory: Path) -> Pki:
    """Certificates for the TLS tests, made by the dev broker's own CA code."""
    ca = generate_ca("handoff test CA")
    other = generate_ca("some other CA")
    server_cert, server_key = ca.issue("localhost", dns=["localhost"])
    password = "key-pass-7"
    client_cert, client_key = ca.issue("client", server=False, key_password=password.encode())
    expired_cert, expired_key = ca.issue("localhost", dns=["localhost"], expired=True)
    p = Pki(
        ca_pem=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key_encrypted=directory / "client.key",
        client_key_password=password,
        other_ca_pem=directory / "other-ca.pem",
        expired_cert=directory / "expired.pem",
        expired_key=directory / "expired.key",
    )
    for path, data in (
        (p.ca_pem, ca.cert_pem),
        (p.other_ca_pem, other.cert_pem),
        (p.server_cert, server_cert),
        (p.server_key, server_key),
        (p.client_cert, client_cert),
        (p.client_key_encrypted, client_key),
        (p.expired_cert, expired_cert),
        (p.expired_key, expired_key),
    ):
        path.write_bytes(data)
    return p


class TlsProxy:
    """TLS on ``127.0.0.1:port`` -> plaintext to ``target`` (set later with :meth:`set_target`)."""

    def __init__(self, cert: Path, key: Path, *, client_ca: Path | None = None, port: int = 0) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(cert), str(key))
        if client_ca is not None:
            ctx.load_verify_locations(cafile=str(client_ca))
            ctx.verify_mode = ssl.CERT_REQUIRED
        self.sni_names: list[str | None] = []
        self.client_subjects: list[str] = []
        self.handshake_errors: list[str] = []

        def on_sni(sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
            self.sni_names.append(name)

        ctx.sni_callback = on_sni
        self._ctx = ctx
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._target: tuple[str, int] | None = None
        self._target_set = threading.Event()
        self._closed = False
        self._socks: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True, name="tls-proxy")
        self._thread.start()

    def set_target(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._target_set.set()

    def _accept(self) -> None:
        while not self._closed:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        try:
            tls = self._ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.handshake_errors.append(str(exc))
            raw.close()
            return
        peer = tls.getpeercert()
        if peer:
            self.client_subjects.append(str(peer.get("subject")))
        if not self._target_set.wait(60):
            tls.close()
            return
        assert self._target is not None
        try:
            upstream = socket.create_connection(self._target, timeout=10)
        except OSError:
            tls.close()
            return
        self._socks += [tls, upstream]
        tls.setblocking(True)
        tls.settimeout(None)
        upstream.settimeout(None)
        try:
            while not self._closed:
                ready, _, _ = select.select([tls, upstream], [], [], 0.5)
                if tls in ready or tls.pending():
                    data = tls.recv(65536)
                    if not data:
                        break
                    upstream.sendall(data)
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        break
                    tls.sendall(data)
        except OSError:
            pass
        finally:
            for s in (tls, upstream):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass
