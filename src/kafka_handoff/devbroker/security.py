"""Secured listeners for the dev broker: TLS, mutual TLS, SASL (PLAIN, SCRAM, OAUTHBEARER/OIDC), ACLs.

``devbroker.start(security="sasl_ssl")`` (or ``handoff broker start --security sasl_ssl``) adds secured
listeners beside the PLAINTEXT one, which stays for inter-broker traffic, the readiness probes and
test set-up (its principal ``User:ANONYMOUS`` is a super user).  Everything is throwaway and made here:

* a CA, a broker certificate (SAN ``localhost`` and ``127.0.0.1``), a client certificate (``CN=alice``,
  key encrypted with a password) and, for the hostname-mismatch listener, a broker certificate for
  ``wrong-host.invalid`` only -- all with the ``cryptography`` package.  The broker reads PEM key and
  trust stores (``ssl.keystore.type=PEM``, ``ssl.truststore.type=PEM``).
* SASL users ``admin`` (a super user), ``alice`` and ``bob`` with random passwords, for PLAIN (in the
  listener's JAAS config, in a 0600 ``server.properties``) and SCRAM-SHA-256/512 (credentials written into
  the metadata log at storage format time: ``kafka-storage format --add-scram``, given through a 0600
  java argument file, not the command line).
* OAUTHBEARER validated by Kafka's own ``OAuthBearerValidatorCallbackHandler`` against a JWKS file; an
  RS256 token endpoint (client-credentials grant; client id = user name, client secret = its password,
  ``sub`` = user name) served on 127.0.0.1 by ``_oidc_server.py`` in its own process, which lives as long
  as the broker (supervised like the JVMs, or detached with ``handoff broker start``).
* the ``StandardAuthorizer`` with ``super.users=User:ANONYMOUS;User:admin`` and
  ``allow.everyone.if.no.acl.found=true``: a resource without ACLs is open to everyone, so only the
  tests that add ACLs to their own topic or group see denials.

Listener per mode (``MODES``): ``ssl`` (SSL), ``mtls`` (SSL with ``ssl.client.auth=required``),
``sasl_plaintext``, ``sasl_ssl`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER on both).
``kerberos`` (not part of ``all``: it needs MIT Kerberos installed) is SASL_PLAINTEXT with GSSAPI against a
throwaway KDC (:mod:`.kdc`) that lives as long as the broker; the broker's principal is
``kafka/127.0.0.1@HANDOFF.TEST`` and each user has a keytab; clients need ``KRB5_CONFIG`` set to the KDC's
``krb5.conf`` (:attr:`DevSecurity.krb5_conf`).  For tests
also ``ssl_wrong_host`` (a certificate without 127.0.0.1/localhost) and ``sasl_ssl_reauth`` (SASL_SSL with a
short ``connections.max.reauth.ms``).  ``DATA_DIR/client.json`` holds the settings of the first mode in
librdkafka's names, ``client-<mode>.json`` those of each, ``client-<mode>-<mechanism>.json`` each SASL
mechanism's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_handoff.devbroker._procs import pid_alive, process_args
from kafka_handoff.devbroker.config import NodeSpec
from kafka_handoff.devbroker.kdc import SERVICE_NAME, Kdc, free_port, kdc_binaries
from kafka_handoff.errors import ConfigError

__all__ = [
    "ALL_MODES",
    "MODES",
    "SASL_MECHANISMS",
    "TEST_MODES",
    "USERS",
    "DevSecurity",
    "clear",
    "generate_ca",
    "load",
    "mechanisms_of",
    "normalize_modes",
]

#: The modes ``handoff broker start --security`` offers.
MODES = ("ssl", "mtls", "sasl_plaintext", "sasl_ssl")
#: Extra listeners for the failure and re-authentication tests.
TEST_MODES = ("ssl_wrong_host", "sasl_ssl_reauth")
ALL_MODES = MODES + TEST_MODES
#: Modes outside ``all`` (they need system packages: MIT Kerberos's KDC).
KERBEROS_MODES = ("kerberos",)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
#: SASL users (and OIDC clients); ``admin`` is a super user.
USERS = ("admin", "alice", "bob")
ADMIN_USER = "admin"
DEFAULT_USER = "alice"
#: ``connections.max.reauth.ms`` of the ``sasl_ssl_reauth`` listener unless given.
DEFAULT_TEST_REAUTH_MS = 5000
AUDIENCE = "kafka-handoff-dev"
ISSUER = "kafka-handoff-devbroker"
WRONG_HOST = "wrong-host.invalid"
CLIENT_CN = "alice"

# mode -> (listener name, security protocol)
_LISTENERS: dict[str, tuple[str, str]] = {
    "ssl": ("SSL", "SSL"),
    "mtls": ("MTLS", "SSL"),
    "sasl_plaintext": ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
    "sasl_ssl": ("SASL_SSL", "SASL_SSL"),
    "ssl_wrong_host": ("WRONG_HOST", "SSL"),
    "sasl_ssl_reauth": ("SASL_REAUTH", "SASL_SSL"),
    "kerberos": ("KERBEROS", "SASL_PLAINTEXT"),
}
# The mechanism of client-<mode>.json on SASL listeners.
_DEFAULT_MECHANISM = {
    "sasl_plaintext": "PLAIN",
    "sasl_ssl": "SCRAM-SHA-256",
    "sasl_ssl_reauth": "SCRAM-SHA-256",
    "kerberos": "GSSAPI",
}

# SASL mechanisms per listener (default: all of SASL_MECHANISMS).  The re-authentication listener leaves
# OAUTHBEARER out, so that a test sees a mechanism the broker does not enable.
_LISTENER_MECHANISMS = {
    "sasl_ssl_reauth": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "kerberos": ("GSSAPI",),
}

_SECURITY_DIR = "security"
_STATE = "security.json"
_SERVICE_STATE = "oidc-service.json"
_KDC_STATE = "kdc-service.json"
_KDC_DIR = "kdc"
_OIDC_SCRIPT = Path(__file__).with_name("_oidc_server.py")
_SUPERVISOR = Path(__file__).with_name("_supervisor.py")
_OIDC_READY_TIMEOUT_S = 20.0

# Token-endpoint processes started (supervised) by this Python process: security dir -> supervisor.
_owned: dict[Path, subprocess.Popen[bytes]] = {}
# The same for KDCs (mode kerberos).
_owned_kdc: dict[Path, subprocess.Popen[bytes]] = {}


def normalize_modes(security: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"``, one mode or several -> a tuple of modes without duplicates, in the given order."""
    items = [security] if isinstance(security, str) else list(security)
    out: list[str] = []
    for item in items:
        names = MODES if item == "all" else (item,)
        for name in names:
            if name not in ALL_MODES + KERBEROS_MODES:
                raise ConfigError(
                    f"security: {name!r} is not allowed; allowed values: all, "
                    f"{', '.join(ALL_MODES + KERBEROS_MODES)}"
                )
            if name not in out:
                out.append(name)
    if not out:
        raise ConfigError(
            "security: no mode given; allowed values: all, " + ", ".join(ALL_MODES + KERBEROS_MODES)
        )
    return tuple(out)


def _is_sasl(mode: str) -> bool:
    return _LISTENERS[mode][1].startswith("SASL")


def mechanisms_of(mode: str) -> tuple[str, ...]:
    """The SASL mechanisms the listener of ``mode`` enables."""
    return _LISTENER_MECHANISMS.get(mode, SASL_MECHANISMS)


def _is_tls(mode: str) -> bool:
    return _LISTENERS[mode][1] in ("SSL", "SASL_SSL")


# --------------------------------------------------------------------------------------------------
# Certificates and keys


def _crypto() -> Any:
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "security: the secured dev broker needs the 'cryptography' package "
            "(pip install 'kafka-handoff[devbroker]')"
        ) from exc
    return None


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA's certificate and key (PEM bytes); :meth:`issue` signs leaf certificates."""

    cert_pem: bytes
    key_pem: bytes

    def issue(
        self,
        common_name: str,
        *,
        dns: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = True,
        key_password: bytes | None = None,
        days: int = 30,
        expired: bool = False,
    ) -> tuple[bytes, bytes]:
        """A new RSA key and a certificate for it: ``(cert_pem, key_pem)``; the key in PKCS#8,
        encrypted when given ``key_password``.  ``expired``: valid only in the past (for tests of
        certificate validation)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        assert isinstance(ca_key, rsa.RSAPrivateKey)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = dt.datetime.now(dt.UTC)
        start, end = now - dt.timedelta(hours=1), now + dt.timedelta(days=days)
        if expired:
            start, end = now - dt.timedelta(days=3), now - dt.timedelta(days=2)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if server:
            usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(key_password)
            if key_password
            else serialization.NoEncryption()
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


def generate_ca(common_name: str = "kafka-handoff dev CA", days: int = 30) -> CertificateAuthority:
    """A new self-signed CA (RSA 2048, SHA-256)."""
    _crypto()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return CertificateAuthority(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def _write_secret(path: Path, data: bytes | str) -> None:
    """Write a file only its owner can read."""
    raw = data.encode() if isinstance(data, str) else data
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        if hasattr(os, "fchmod"):
            os.fchmod(f.fileno(), 0o600)  # also when an earlier file had a looser mode
        f.write(raw)


# --------------------------------------------------------------------------------------------------
# The security set-up of one data dir


@dataclass(slots=True)
class DevSecurity:
    """What a secured dev broker was set up with: files, users, listener ports, the token endpoint."""

    directory: Path
    modes: tuple[str, ...]
    users: dict[str, str] = field(repr=False)  # name -> password (never in reprs)
    oidc_port: int
    reauth_ms: int | None = None
    test_reauth_ms: int = DEFAULT_TEST_REAUTH_MS
    #: mode -> one port per node (node order)
    ports: dict[str, list[int]] = field(default_factory=dict)
    client_key_password: str = field(default="", repr=False)
    kid: str = ""
    #: The KDC's port (mode ``kerberos``), else None.
    kdc_port: int | None = None

    # -- files ---------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.directory.parent

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.directory / "broker-keystore.pem"

    @property
    def wrong_host_keystore(self) -> Path:
        return self.directory / "wrong-host-keystore.pem"

    @property
    def client_cert_file(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"

    @property
    def jwks_file(self) -> Path:
        return self.directory / "jwks.json"

    @property
    def oidc_key_file(self) -> Path:
        return self.directory / "oidc-signing.key"

    @property
    def oidc_config_file(self) -> Path:
        return self.directory / "oidc.json"

    @property
    def kdc(self) -> Kdc | None:
        """The KDC of mode ``kerberos`` (None without it)."""
        if self.kdc_port is None:
            return None
        return Kdc(self.directory / _KDC_DIR, self.kdc_port)

    @property
    def krb5_conf(self) -> Path | None:
        """The ``krb5.conf`` clients of mode ``kerberos`` need (``KRB5_CONFIG``)."""
        kdc = self.kdc
        return None if kdc is None else kdc.krb5_conf

    @property
    def token_endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.oidc_port}/token"

    @property
    def jwks_url(self) -> str:
        return self.jwks_file.resolve().as_uri()

    def client_json_path(self, mode: str | None = None, mechanism: str | None = None) -> Path:
        """``client.json`` (no mode), ``client-<mode>.json`` or ``client-<mode>-<mechanism>.json``."""
        if mode is None:
            return self.data_dir / "client.json"
        if mechanism is None:
            return self.data_dir / f"client-{mode}.json"
        return self.data_dir / f"client-{mode}-{mechanism.lower()}.json"

    # -- addresses and client settings -----------------------------------------------------------

    def bootstrap(self, mode: str) -> str:
        if mode not in self.ports:
            raise ConfigError(
                f"security: mode {mode!r} is not open on this broker (open: {', '.join(self.modes)})"
            )
        return ",".join(f"127.0.0.1:{p}" for p in self.ports[mode])

    def client_config(
        self,
        mode: str,
        *,
        user: str = DEFAULT_USER,
        mechanism: str | None = None,
        password: str | None = None,
    ) -> dict[str, str]:
        """The settings a client needs for ``mode`` in librdkafka's names (``user``'s credentials)."""
        protocol = _LISTENERS[mode][1] if mode in _LISTENERS else ""
        config = {"bootstrap.servers": self.bootstrap(mode), "security.protocol": protocol}
        if _is_tls(mode):
            config["ssl.ca.location"] = str(self.ca_file)
        if mode == "mtls":
            config["ssl.certificate.location"] = str(self.client_cert_file)
            config["ssl.key.location"] = str(self.client_key_file)
            config["ssl.key.password"] = self.client_key_password
        if _is_sasl(mode):
            mech = (mechanism or _DEFAULT_MECHANISM[mode]).upper()
            enabled = mechanisms_of(mode)
            if mech not in enabled:
                allowed = ", ".join(enabled)
                raise ConfigError(f"sasl.mechanism: {mech!r} is not enabled; allowed values: {allowed}")
            if user not in self.users:
                allowed = ", ".join(self.users)
                raise ConfigError(f"user: {user!r} is not a dev broker user; allowed values: {allowed}")
            secret = self.users[user] if password is None else password
            config["sasl.mechanism"] = mech
            if mech == "GSSAPI":
                kdc = self.kdc
                assert kdc is not None
                config["sasl.kerberos.service.name"] = SERVICE_NAME
                config["sasl.kerberos.principal"] = kdc.principal(user)
                config["sasl.kerberos.keytab"] = str(kdc.keytab(user))
            elif mech == "OAUTHBEARER":
                config["sasl.oauthbearer.method"] = "oidc"
                config["sasl.oauthbearer.token.endpoint.url"] = self.token_endpoint_url
                config["sasl.oauthbearer.client.id"] = user
                config["sasl.oauthbearer.client.secret"] = secret
            else:
                config["sasl.username"] = user
                config["sasl.password"] = secret
        elif mechanism is not None:
            raise ConfigError(f"sasl.mechanism: mode {mode!r} has no SASL")
        return config

    def mint_token(self, subject: str = DEFAULT_USER, lifetime_s: int = 3600) -> tuple[str, float]:
        """A token the broker accepts for ``subject`` and its expiry (epoch seconds), without HTTP:
        what an ``oauth_cb`` callback returns."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        from kafka_handoff.devbroker import _oidc_server

        key = serialization.load_pem_private_key(self.oidc_key_file.read_bytes(), password=None)
        assert isinstance(key, rsa.RSAPrivateKey)
        claims = _oidc_server.issue_claims(subject, ISSUER, AUDIENCE, lifetime_s)
        return _oidc_server.sign_rs256(key, self.kid, claims), float(claims["exp"])

    # -- broker side -----------------------------------------------------------------------------

    def jvm_opts(self) -> list[str]:
        # Kafka 4.x only fetches JWKS/token URLs listed in this system property.
        opts = [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.jwks_url},{self.token_endpoint_url}"]
        if self.krb5_conf is not None:
            opts.append(f"-Djava.security.krb5.conf={self.krb5_conf}")
        return opts

    def format_args(self) -> list[str]:
        """``kafka-storage format`` arguments creating the SCRAM credentials of every user."""
        args: list[str] = []
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            for name, password in self.users.items():
                args += ["--add-scram", f"{mech}=[name={name},password={password}]"]
        return args

    def assign_ports(self, ports: Sequence[int], num_nodes: int) -> None:
        """Hand out ``len(modes) * num_nodes`` ports: node-major, mode-minor."""
        if len(ports) != len(self.modes) * num_nodes:
            raise ValueError("wrong number of ports")
        width = len(self.modes)
        self.ports = {
            mode: [ports[n * width + i] for n in range(num_nodes)] for i, mode in enumerate(self.modes)
        }

    def broker_overrides(self, node: NodeSpec, index: int) -> dict[str, str]:
        """The settings of node number ``index`` (0-based) replacing/adding to the plaintext ones."""
        host = node.host
        names = [(mode, *_LISTENERS[mode]) for mode in self.modes]
        listeners = [f"PLAINTEXT://{host}:{node.port}", f"CONTROLLER://{host}:{node.controller_port}"]
        advertised = [f"PLAINTEXT://{host}:{node.port}"]
        protocol_map = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        for mode, name, protocol in names:
            port = self.ports[mode][index]
            listeners.append(f"{name}://{host}:{port}")
            advertised.append(f"{name}://{host}:{port}")
            protocol_map.append(f"{name}:{protocol}")
        out = {
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocol_map),
            "inter.broker.listener.name": "PLAINTEXT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:ANONYMOUS;User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "true",
        }
        if any(_is_tls(m) for m in self.modes):
            out.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(self.broker_keystore),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(self.ca_file),
                    "ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
                }
            )
        if any(_is_sasl(m) for m in self.modes):
            out["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
            out["sasl.oauthbearer.jwks.endpoint.url"] = self.jwks_url
            out["sasl.oauthbearer.expected.audience"] = AUDIENCE
            out["sasl.oauthbearer.expected.issuer"] = ISSUER
        plain_users = " ".join(f'user_{name}="{password}"' for name, password in self.users.items())
        for mode, name, _protocol in names:
            prefix = f"listener.name.{name.lower()}."
            if mode == "mtls":
                out[prefix + "ssl.client.auth"] = "required"
            if mode == "ssl_wrong_host":
                out[prefix + "ssl.keystore.type"] = "PEM"
                out[prefix + "ssl.keystore.location"] = str(self.wrong_host_keystore)
            if not _is_sasl(mode):
                continue
            out[prefix + "sasl.enabled.mechanisms"] = ",".join(mechanisms_of(mode))
            kdc = self.kdc
            if mode == "kerberos" and kdc is not None:
                out[prefix + "gssapi.sasl.jaas.config"] = (
                    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
                    f'keyTab="{kdc.broker_keytab}" principal="{kdc.service_principal}";'
                )
                out[prefix + "sasl.kerberos.service.name"] = SERVICE_NAME
                if self.reauth_ms is not None:
                    out[prefix + "connections.max.reauth.ms"] = str(self.reauth_ms)
                continue
            out[prefix + "plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            )
            for mech in ("scram-sha-256", "scram-sha-512"):
                out[prefix + f"{mech}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            out[prefix + "oauthbearer.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            )
            out[prefix + "oauthbearer.sasl.server.callback.handler.class"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
            )
            reauth = self.reauth_ms
            if mode == "sasl_ssl_reauth":
                reauth = self.test_reauth_ms if reauth is None else reauth
            if reauth is not None:
                out[prefix + "connections.max.reauth.ms"] = str(reauth)
        return out

    # -- state -----------------------------------------------------------------------------------

    def save(self) -> None:
        state = {
            "modes": list(self.modes),
            "users": self.users,
            "oidc_port": self.oidc_port,
            "reauth_ms": self.reauth_ms,
            "test_reauth_ms": self.test_reauth_ms,
            "ports": self.ports,
            "client_key_password": self.client_key_password,
            "kid": self.kid,
            "kdc_port": self.kdc_port,
        }
        _write_secret(self.directory / _STATE, json.dumps(state, indent=2) + "\n")

    def write_client_files(self) -> list[Path]:
        """``client.json`` (the first mode), ``client-<mode>.json`` and, on SASL listeners,
        ``client-<mode>-<mechanism>.json``; returns the paths written."""
        written: list[Path] = []

        def put(path: Path, config: Mapping[str, str]) -> None:
            _write_secret(path, json.dumps(dict(config), indent=2) + "\n")
            written.append(path)

        put(self.client_json_path(), self.client_config(self.modes[0]))
        for mode in self.modes:
            put(self.client_json_path(mode), self.client_config(mode))
            if _is_sasl(mode):
                for mech in mechanisms_of(mode):
                    put(self.client_json_path(mode, mech), self.client_config(mode, mechanism=mech))
        return written

    # -- the KDC (mode kerberos) ------------------------------------------------------------------

    def start_kdc(self, *, supervised: bool) -> None:
        """Start ``krb5kdc`` (supervised: dies with this process; else detached) and wait until it
        accepts connections."""
        kdc = self.kdc
        assert kdc is not None
        pid = _launch(
            kdc.command(),
            what="the KDC",
            log_file=self.directory / "kdc-out.log",
            state_file=self.directory / _KDC_STATE,
            owned=_owned_kdc,
            directory=self.directory,
            supervised=supervised,
            env=kdc.env(),
        )
        try:
            kdc.wait_ready(alive=lambda: pid_alive(pid))
        except ConfigError:
            _stop_kdc(self.directory)
            raise

    # -- the token endpoint ----------------------------------------------------------------------

    def start_token_endpoint(self, *, supervised: bool) -> None:
        """Start ``_oidc_server.py`` (supervised: dies with this process; else detached) and wait until
        it answers."""
        log_file = self.directory / "oidc.log"
        pid = _launch(
            [sys.executable, "-I", str(_OIDC_SCRIPT), str(self.oidc_config_file)],
            what="the token endpoint",
            log_file=log_file,
            state_file=self.directory / _SERVICE_STATE,
            owned=_owned,
            directory=self.directory,
            supervised=supervised,
        )
        deadline = time.monotonic() + _OIDC_READY_TIMEOUT_S
        url = f"http://127.0.0.1:{self.oidc_port}/jwks"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() >= deadline or not pid_alive(pid):
                tail = ""
                if log_file.exists():
                    tail = log_file.read_text(encoding="utf-8", errors="replace")[-2000:]
                stop_services(self.data_dir)
                raise ConfigError(
                    f"security: the token endpoint on 127.0.0.1:{self.oidc_port} did not start:\n{tail}"
                )
            time.sleep(0.05)


def _launch(
    cmd: Sequence[str],
    *,
    what: str,
    log_file: Path,
    state_file: Path,
    owned: dict[Path, subprocess.Popen[bytes]],
    directory: Path,
    supervised: bool,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start the helper ``cmd`` in its own session, its output to ``log_file``: supervised (under
    ``_supervisor.py``, which dies with this process; kept in ``owned[directory]``) or detached.  Records its
    pid (and the supervisor's) in ``state_file`` and returns the pid."""
    sup_pid: int | None = None
    if supervised:
        sup = subprocess.Popen(
            [sys.executable, "-I", str(_SUPERVISOR), "5", str(log_file), "-", "--", *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        assert sup.stdout is not None
        line = sup.stdout.readline()
        try:
            pid = int(line.strip())
        except ValueError:
            sup.kill()
            sup.wait()
            raise ConfigError(f"security: {what} did not start; see {log_file}") from None
        owned[directory] = sup
        sup_pid = sup.pid
    else:
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        pid = proc.pid
    state_file.write_text(json.dumps({"pid": pid, "supervisor_pid": sup_pid}) + "\n")
    return pid


def _is_token_server(pid: int, config_file: Path) -> bool:
    args = process_args(pid)
    if args is None:
        return True
    return str(config_file).encode() in args and any(a.endswith(b"_oidc_server.py") for a in args)


def _is_kdc(pid: int, directory: Path) -> bool:
    args = process_args(pid)
    if args is None:
        return True
    return any(a.endswith(b"krb5kdc") for a in args)


def _stop_service(
    state_file: Path,
    sup: subprocess.Popen[bytes] | None,
    is_ours: Callable[[int], bool],
    timeout: float,
) -> None:
    """Stop the helper process recorded in ``state_file`` (only if ``is_ours`` recognises its pid: SIGTERM,
    then SIGKILL after ``timeout``), reap this process's supervisor ``sup`` if any, and drop the file."""
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    pid = state.get("pid")
    if isinstance(pid, int) and is_ours(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if sup is not None:
        try:
            sup.wait(timeout)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()
        for stream in (sup.stdin, sup.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    with contextlib.suppress(FileNotFoundError):
        state_file.unlink()


def _stop_kdc(directory: Path, timeout: float = 5.0) -> None:
    sup = _owned_kdc.pop(directory, None)
    _stop_service(directory / _KDC_STATE, sup, lambda pid: _is_kdc(pid, directory), timeout)


def stop_services(data_dir: Path, timeout: float = 5.0) -> None:
    """Stop the token endpoint (and the KDC) of ``data_dir``'s secured broker, if they run (any process
    may call this)."""
    directory = Path(data_dir) / _SECURITY_DIR
    if (directory / _KDC_STATE).exists() or directory in _owned_kdc:
        _stop_kdc(directory, timeout)
    sup = _owned.pop(directory, None)
    oidc_config = directory / "oidc.json"
    _stop_service(directory / _SERVICE_STATE, sup, lambda pid: _is_token_server(pid, oidc_config), timeout)


def clear(data_dir: Path) -> None:
    """Remove what an earlier secured start left in ``data_dir`` (token endpoint, keys, client files)."""
    stop_services(data_dir)
    shutil.rmtree(data_dir / _SECURITY_DIR, ignore_errors=True)
    for stale in data_dir.glob("client*.json"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def prepare(
    data_dir: Path,
    modes: Sequence[str],
    *,
    oidc_port: int,
    reauth_ms: int | None = None,
    test_reauth_ms: int = DEFAULT_TEST_REAUTH_MS,
    supervised: bool = True,
) -> DevSecurity:
    """Make a fresh CA, certificates, users and OIDC signing key under ``data_dir/security``; with mode
    ``kerberos`` also a KDC with the broker's and the users' principals and keytabs, started now (the
    broker logs in at start-up) -- supervised or detached like the brokers."""
    _crypto()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from kafka_handoff.devbroker import _oidc_server

    if reauth_ms is not None and reauth_ms <= 0:
        raise ConfigError(
            f"connections.max.reauth.ms: {reauth_ms!r} must be a positive number of milliseconds"
        )
    if "kerberos" in modes:
        kdc_binaries()  # a clear error naming the packages before anything is made
    directory = Path(data_dir) / _SECURITY_DIR
    clear(Path(data_dir))
    directory.mkdir(parents=True, mode=0o700)
    sec = DevSecurity(
        directory=directory,
        modes=tuple(modes),
        users={name: secrets.token_hex(12) for name in USERS},
        oidc_port=oidc_port,
        reauth_ms=reauth_ms,
        test_reauth_ms=test_reauth_ms,
        client_key_password=secrets.token_hex(8),
        kid=secrets.token_hex(4),
    )
    ca = generate_ca()
    sec.ca_file.write_bytes(ca.cert_pem)
    _write_secret(directory / "ca.key", ca.key_pem)
    cert, key = ca.issue("localhost", dns=["localhost"], ips=["127.0.0.1"])
    _write_secret(sec.broker_keystore, key + cert + ca.cert_pem)
    if "ssl_wrong_host" in sec.modes:
        cert, key = ca.issue(WRONG_HOST, dns=[WRONG_HOST])
        _write_secret(sec.wrong_host_keystore, key + cert + ca.cert_pem)
    cert, key = ca.issue(CLIENT_CN, server=False, key_password=sec.client_key_password.encode())
    sec.client_cert_file.write_bytes(cert + ca.cert_pem)
    _write_secret(sec.client_key_file, key)
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_secret(
        sec.oidc_key_file,
        signing.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    sec.jwks_file.write_text(json.dumps(_oidc_server.jwks(signing, sec.kid)) + "\n", encoding="utf-8")
    oidc_config = {
        "port": oidc_port,
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "kid": sec.kid,
        "key_file": str(sec.oidc_key_file),
        "token_lifetime_s": 3600,
        "clients": {name: {"secret": pw, "subject": name} for name, pw in sec.users.items()},
    }
    _write_secret(sec.oidc_config_file, json.dumps(oidc_config, indent=2) + "\n")
    if "kerberos" in sec.modes:
        sec.kdc_port = free_port()
        kdc = sec.kdc
        assert kdc is not None
        kdc.create(USERS)
        sec.save()
        sec.start_kdc(supervised=supervised)
    sec.save()
    return sec


def load(data_dir: str | os.PathLike[str]) -> DevSecurity | None:
    """The security set-up recorded in ``data_dir`` (None for a plaintext broker)."""
    directory = Path(data_dir).resolve() / _SECURITY_DIR
    try:
        state = json.loads((directory / _STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return DevSecurity(
        directory=directory,
        modes=tuple(state["modes"]),
        users=dict(state["users"]),
        oidc_port=int(state["oidc_port"]),
        reauth_ms=state.get("reauth_ms"),
        test_reauth_ms=int(state.get("test_reauth_ms", DEFAULT_TEST_REAUTH_MS)),
        ports={k: [int(p) for p in v] for k, v in state.get("ports", {}).items()},
        client_key_password=str(state.get("client_key_password", "")),
        kid=str(state.get("kid", "")),
        kdc_port=state.get("kdc_port"),
    )
