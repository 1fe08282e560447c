"""Key and trust stores in Java's formats, and private keys that never land on a file system.

* PKCS#12 (``ssl.keystore.type=PKCS12``, ``ssl.truststore.type=PKCS12``; what ``keytool`` makes by default
  since Java 9, and what librdkafka's ``ssl.keystore.location`` is) is read with ``cryptography``'s PKCS#12
  loader: a key store gives the private key and its certificate chain, a trust store its certificates.
* JKS is refused with a :class:`~kafka_handoff.errors.ConfigError` naming the ``keytool`` command that
  converts it to PKCS#12.  The one Python JKS reader (``pyjks``) had its last release in 2020 and pulls in
  unmaintained native code (``twofish``) for formats Kafka never uses; JKS itself is Java's deprecated
  proprietary format (``keytool`` warns to migrate it), so converting once is the sound way.
* :func:`memory_file` hands ``ssl`` (which loads keys from paths only) a path to bytes that are in memory
  only -- an anonymous ``memfd`` on Linux -- so a private key from a PKCS#12 store or an inline PEM
  (``ssl.keystore.key``) never sits in a temporary file a crash would leave behind.  Elsewhere the fallback
  is a private temporary file removed as soon as ``ssl`` has read it.

Errors name the key and the file, never a password.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from typing import Any

from kafka_handoff.errors import ConfigError

__all__ = [
    "STORE_TYPES",
    "detect_store_type",
    "jks_error",
    "memory_file",
    "pkcs12_key_and_chain",
    "pkcs12_trusted_certificates",
]

#: The values of ``ssl.keystore.type`` and ``ssl.truststore.type`` (JKS only to name the conversion).
STORE_TYPES = ("PEM", "PKCS12", "JKS")

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"


def detect_store_type(data: bytes) -> str:
    """``PEM``, ``PKCS12`` (DER: a SEQUENCE with a long-form or indefinite length) or ``JKS`` (also for
    JCEKS) from a store's first bytes."""
    if data[:4] in (_JKS_MAGIC, _JCEKS_MAGIC):
        return "JKS"
    if len(data) >= 2 and data[0] == 0x30 and 0x80 <= data[1] <= 0x84:
        return "PKCS12"
    return "PEM"


def jks_error(prefix: str, path: str) -> ConfigError:
    """The error for a JKS store at ``path`` (``prefix``: ``ssl.keystore`` or ``ssl.truststore``)."""
    target = f"{os.path.splitext(path)[0]}.p12"
    return ConfigError(
        f"Invalid value 'JKS' for configuration '{prefix}.type' ({path}): JKS key stores are not supported "
        f"(allowed: PEM, PKCS12). Convert it once with: keytool -importkeystore -srckeystore {path} "
        f"-srcstoretype JKS -destkeystore {target} -deststoretype PKCS12, then set {prefix}.type=PKCS12 "
        f"and {prefix}.location={target}"
    )


def _pkcs12(key: str) -> Any:
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigError(
            f"Invalid value 'PKCS12' for configuration '{key}.type': PKCS#12 stores need the 'cryptography' "
            "package (pip install 'kafka-handoff[pkcs12]'; allowed without it: PEM)"
        ) from None
    return pkcs12


def _load(path: str, password: str | None, key: str, what: str) -> tuple[Any, Any, list[Any]]:
    pkcs12 = _pkcs12(key)

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(
            f"Invalid value {path!r} for configuration '{key}.location': cannot read the {what} "
            f"({exc.strerror or exc.__class__.__name__})"
        ) from None
    if detect_store_type(data) == "JKS":
        raise jks_error(key, path)
    try:
        private_key, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password is not None else None
        )
    except (ValueError, TypeError):
        hint = f"wrong {key}.password" if password is not None else f"no {key}.password given"
        raise ConfigError(
            f"Invalid value {path!r} for configuration '{key}.location': cannot open the PKCS#12 {what} "
            f"({hint}, or not a PKCS#12 file; allowed: a PKCS#12 file and its password)"
        ) from None
    return private_key, cert, list(extra)


def pkcs12_key_and_chain(path: str, password: str | None) -> tuple[bytes, bytes, str]:
    """The private key of the PKCS#12 key store at ``path`` (PEM, encrypted with a one-time password), its
    certificate chain (PEM, leaf first) and that one-time password."""
    from cryptography.hazmat.primitives import serialization

    private_key, cert, extra = _load(path, password, "ssl.keystore", "key store")
    if private_key is None or cert is None:
        raise ConfigError(
            f"Invalid value {path!r} for configuration 'ssl.keystore.location': the PKCS#12 key store has "
            "no private key with its certificate (allowed: a key store with the client's key entry)"
        )
    one_time = secrets.token_urlsafe(24)
    key_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time.encode()),
    )
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    return key_pem, chain, one_time


def pkcs12_trusted_certificates(path: str, password: str | None) -> str:
    """The certificates of the PKCS#12 trust store at ``path``, as PEM text for ``cadata``."""
    from cryptography.hazmat.primitives import serialization

    _key, cert, extra = _load(path, password, "ssl.truststore", "trust store")
    certs = ([cert] if cert is not None else []) + extra
    if not certs:
        raise ConfigError(
            f"Invalid value {path!r} for configuration 'ssl.truststore.location': the PKCS#12 trust store "
            "holds no certificates (allowed: a trust store with the CA certificates)"
        )
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certs)


@contextlib.contextmanager
def memory_file(data: bytes) -> Iterator[str]:
    """A path whose content is ``data``, valid inside the block: an anonymous in-memory file (``memfd``,
    opened through ``/proc/self/fd``) where there is one, so nothing is left on any file system even if the
    process dies inside the block; else a private (0600) temporary file removed at the block's end."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("kafka-handoff-tls", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="handoff-tls-", suffix=".pem")
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
