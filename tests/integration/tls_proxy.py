"""A throwaway CA (``cryptography``) and a TLS-terminating proxy in front of the plain dev broker.

The proxy accepts TLS connections (optionally requiring a client certificate), records the SNI name each
client sent, and pipes the decrypted bytes to the broker's plaintext port.  With the broker's
``advertised.listeners`` pointing at the proxy, every connection a client makes goes through TLS, so the
client's TLS code is exercised against a real broker without a broker-side TLS listener.
"""

from __future__ import annotations

import datetime
import ipaddress
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


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


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None = None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    cn: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    dns: list[str],
    ips: list[str] = (),  # type: ignore[assignment]
    server: bool = True,
    expired: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=3), now - datetime.timedelta(days=2))
        if expired
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=2))
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [
                    x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
                    if server
                    else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    ca, ca_key = _ca("handoff test CA")
    other, _other_key = _ca("some other CA")
    server, server_key = _leaf("localhost", ca, ca_key, dns=["localhost"])
    client, client_key = _leaf("client", ca, ca_key, dns=[], server=False)
    expired, expired_key = _leaf("localhost", ca, ca_key, dns=["localhost"], expired=True)
    pem = serialization.Encoding.PEM
    p = Pki(
        ca_pem=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key_encrypted=directory / "client.key",
        client_key_password="key-pass-7",
        other_ca_pem=directory / "other-ca.pem",
        expired_cert=directory / "expired.pem",
        expired_key=directory / "expired.key",
    )
    p.ca_pem.write_bytes(ca.public_bytes(pem))
    p.other_ca_pem.write_bytes(other.public_bytes(pem))
    p.server_cert.write_bytes(server.public_bytes(pem))
    _write_key(p.server_key, server_key)
    p.client_cert.write_bytes(client.public_bytes(pem))
    _write_key(p.client_key_encrypted, client_key, p.client_key_password)
    p.expired_cert.write_bytes(expired.public_bytes(pem))
    _write_key(p.expired_key, expired_key)
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
