"""PKCS#12 key and trust stores (Java's names), JKS refused with the conversion command, private keys handed
to ``ssl`` from memory only, and one warning for each weakened TLS/SASL setting."""

from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff import security
from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import ConfigError
from kafka_handoff.security import build_security

pytestmark = pytest.mark.unit
pytest.importorskip("cryptography")

BOOT = {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SSL"}
STORE_PASSWORD = "store-pw-4711"


def make_stores(directory: Path) -> dict[str, Any]:
    """A CA, a client key and certificate, and from them a PKCS#12 key store and trust store."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    from kafka_handoff.devbroker.security import generate_ca

    ca = generate_ca()
    cert_pem, key_pem = ca.issue("alice", server=False)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    from cryptography.hazmat.primitives.asymmetric import rsa

    assert isinstance(key, rsa.RSAPrivateKey)
    encryption = serialization.BestAvailableEncryption(STORE_PASSWORD.encode())
    keystore = directory / "client.keystore.p12"
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"alice", key, x509.load_pem_x509_certificate(cert_pem), [ca_cert], encryption
        )
    )
    truststore = directory / "client.truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [ca_cert], encryption))
    return {
        "keystore": keystore,
        "truststore": truststore,
        "ca": ca,
        "cert_pem": cert_pem,
        "key_pem": key_pem,
    }


def test_pkcs12_key_and_trust_stores_build_a_mutual_tls_context(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    props = {
        **BOOT,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(stores["keystore"]),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(stores["truststore"]),
        "ssl.truststore.password": STORE_PASSWORD,
    }
    settings = build_security(parse_consumer_config(props))
    assert settings is not None and settings.ssl_context is not None
    (trusted,) = settings.ssl_context.get_ca_certs()
    assert "(('commonName', 'kafka-handoff dev CA'),)" in str(trusted["subject"])
    # The type may be left out (Java's client.properties often do; librdkafka's keystore is PKCS#12).
    untyped = {k: v for k, v in props.items() if not k.endswith(".type")}
    assert build_security(parse_consumer_config(untyped)) is not None
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["client.keystore.p12", "client.truststore.p12"]  # nothing written beside them


@pytest.mark.parametrize("prefix", ["ssl.keystore", "ssl.truststore"])
def test_a_wrong_store_password_is_a_clear_error_without_the_password(tmp_path: Path, prefix: str) -> None:
    stores = make_stores(tmp_path)
    path = stores["keystore" if prefix == "ssl.keystore" else "truststore"]
    props = {**BOOT, f"{prefix}.type": "PKCS12", f"{prefix}.location": str(path),
             f"{prefix}.password": "not-the-pw-0815"}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        build_security(parse_consumer_config(props))
    text = str(info.value)
    assert f"'{prefix}.location'" in text and str(path) in text and f"wrong {prefix}.password" in text
    assert "not-the-pw-0815" not in text and STORE_PASSWORD not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_jks_is_refused_naming_the_keytool_conversion(tmp_path: Path) -> None:
    jks = tmp_path / "client.keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(64))  # a JKS file's magic and version
    for props in (
        {**BOOT, "ssl.keystore.location": str(jks), "ssl.keystore.password": STORE_PASSWORD},  # by content
        {**BOOT, "ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks)},  # by name
    ):
        with pytest.raises(ConfigError) as info:
            build_security(parse_consumer_config(props))
        text = str(info.value)
        assert "'ssl.keystore.type'" in text and "allowed: PEM, PKCS12" in text
        assert f"keytool -importkeystore -srckeystore {jks} -srcstoretype JKS" in text
        assert "-deststoretype PKCS12" in text and STORE_PASSWORD not in text


def test_a_pkcs12_file_declared_pem_names_the_type_to_set(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    props = {**BOOT, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(stores["truststore"])}
    with pytest.raises(ConfigError, match=r"not a PEM file.*PKCS#12.*ssl\.truststore\.type=PKCS12"):
        build_security(parse_consumer_config(props))


CRASH_WHILE_LOADING = """
import os, ssl, sys
from kafka_handoff.config import parse_consumer_config
from kafka_handoff.security import build_security

def crash(self, *args, **kwargs):
    os._exit(9)  # killed while ssl reads the key

ssl.SSLContext.load_cert_chain = crash
key, cert = open(sys.argv[1]).read(), open(sys.argv[2]).read()
build_security(parse_consumer_config({"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SSL",
                                      "ssl.key.pem": key, "ssl.certificate.pem": cert}))
"""


def test_an_inline_pem_key_leaves_no_file_behind_when_the_process_dies_loading_it(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    (tmp_path / "key.pem").write_bytes(stores["key_pem"])
    (tmp_path / "cert.pem").write_bytes(stores["cert_pem"])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = subprocess.run([sys.executable, "-c", CRASH_WHILE_LOADING, str(tmp_path / "key.pem"),
                          str(tmp_path / "cert.pem")], env=env, capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    assert run.returncode == 9, run.stderr
    assert list(tmp.iterdir()) == []  # no copy of the private key left on disk


def test_inline_pem_keys_still_load(tmp_path: Path) -> None:
    stores = make_stores(tmp_path)
    props = {
        **BOOT,
        "ssl.key.pem": stores["key_pem"].decode(),
        "ssl.certificate.pem": stores["cert_pem"].decode(),
    }
    settings = build_security(parse_consumer_config(props))
    assert settings is not None and isinstance(settings.ssl_context, ssl.SSLContext)


# ----------------------------------------------------------------------------------------- warnings
WEAK = [
    ({**BOOT, "enable.ssl.certificate.verification": "false"}, "enable.ssl.certificate.verification=false"),
    ({**BOOT, "ssl.endpoint.identification.algorithm": ""}, "host names are not checked"),
    (
        {**BOOT, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
         "sasl.password": "plain-pw-99"},
        "PLAIN over security.protocol=SASL_PLAINTEXT",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("props", "fragment"), WEAK, ids=["no-verification", "no-hostname", "plain-in-clear"]
)
def test_one_warning_for_a_weakened_setting(
    props: dict[str, Any], fragment: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(security, "_warned", set(), raising=False)  # a fresh process
    caplog.set_level(logging.WARNING, logger="kafka_handoff")
    for _client in range(3):  # e.g. a pipeline's consumer, its dead-letter producer, an admin client
        build_security(parse_consumer_config(props))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and fragment in warnings[0], warnings
    assert "plain-pw-99" not in warnings[0]


def test_no_warning_for_sound_settings(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(security, "_warned", set(), raising=False)
    caplog.set_level(logging.WARNING, logger="kafka_handoff")
    build_security(parse_consumer_config(BOOT))
    build_security(
        parse_consumer_config(
            {**BOOT, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
             "sasl.password": "p"}
        )
    )  # fmt: skip
    build_security(
        parse_consumer_config(
            {**BOOT, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
             "sasl.username": "u", "sasl.password": "p"}
        )
    )  # fmt: skip
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
