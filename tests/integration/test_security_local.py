"""Against the real secured dev broker: what another local user could reach, and Java's PKCS#12 stores.

* ``server.properties`` (the listeners' JAAS lines hold every PLAIN password) is readable by its owner only,
  and the SCRAM users made at format time (their passwords went through a private argument file, not the
  ``kafka-storage`` command line) authenticate;
* mutual TLS through PKCS#12 key and trust stores converted in the test from the broker's PEM files (as
  ``keytool``/``openssl pkcs12`` would make them), with Java's names: admin, producer and a group consumer
  on both protocols; a wrong store password is a ConfigError naming the store, never the password.
"""

from __future__ import annotations

import json
import secrets
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from security_helpers import consume_keyed

from kafka_handoff import devbroker
from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.consumer import Consumer
from kafka_handoff.devbroker import security
from kafka_handoff.errors import ConfigError
from kafka_handoff.producer import Producer

pytestmark = pytest.mark.integration
pytest.importorskip("cryptography")


def sec_of(cluster: devbroker.Cluster) -> security.DevSecurity:
    assert cluster.security is not None
    return cluster.security


def test_broker_properties_are_private_and_scram_users_from_the_argument_file_work(
    secured: devbroker.Cluster,
) -> None:
    sec = sec_of(secured)
    for node in secured.nodes:
        info = node.properties_path.lstat()
        assert stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
        assert sec.users["alice"] in node.properties_path.read_text(encoding="utf-8")  # why it is private
        assert not (node.node_dir / "format.args").exists()  # the SCRAM passwords' file is gone
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        props: dict[str, Any] = json.loads(sec.client_json_path("sasl_ssl", mechanism).read_text("utf-8"))
        with AdminClient(props) as admin:
            assert admin.describe_cluster(timeout=60).brokers


def pkcs12_stores(sec: security.DevSecurity, directory: Path, password: str) -> tuple[Path, Path]:
    """The dev broker's client key and certificate, and its CA, as PKCS#12 key and trust stores."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import pkcs12

    key = serialization.load_pem_private_key(
        sec.client_key_file.read_bytes(), password=sec.client_key_password.encode()
    )
    assert isinstance(key, rsa.RSAPrivateKey)
    leaf, *chain = x509.load_pem_x509_certificates(sec.client_cert_file.read_bytes())
    ca = x509.load_pem_x509_certificate(sec.ca_file.read_bytes())
    encryption = serialization.BestAvailableEncryption(password.encode())
    keystore = directory / "client.keystore.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(b"alice", key, leaf, chain, encryption))
    truststore = directory / "client.truststore.p12"
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [ca], encryption))
    return keystore, truststore


def test_mutual_tls_through_pkcs12_key_and_trust_stores(secured: devbroker.Cluster, tmp_path: Path) -> None:
    sec = sec_of(secured)
    password = secrets.token_hex(8)
    keystore, truststore = pkcs12_stores(sec, tmp_path, password)
    props = {
        "bootstrap.servers": sec.bootstrap("mtls"),
        "security.protocol": "SSL",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": password,
        "ssl.key.password": password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": password,
    }
    topic = f"p12-{uuid.uuid4().hex[:10]}"
    with AdminClient(props) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)], timeout=60)
    sent = {b"k%03d" % i: b"v%03d-" % i + uuid.uuid4().bytes for i in range(40)}
    with Producer({**props, "linger.ms": 5}) as producer:
        futures = [producer.send(topic, value=v, key=k) for k, v in sent.items()]
        producer.flush(60)
        assert all(f.result(0).offset >= 0 for f in futures)
    for protocol in ("classic", "consumer"):
        group = f"p12-{protocol}-{uuid.uuid4().hex[:8]}"
        conf = {**props, "group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest"}
        with Consumer(conf) as consumer:
            consumer.subscribe([topic])
            got = consume_keyed(consumer, len(sent))
        assert got == sent, f"{protocol}: {len(got)} of {len(sent)}"


def test_a_wrong_pkcs12_password_is_a_clear_error_without_the_password(
    secured: devbroker.Cluster, tmp_path: Path
) -> None:
    sec = sec_of(secured)
    keystore, truststore = pkcs12_stores(sec, tmp_path, "right-pw-1234")
    props = {
        "bootstrap.servers": sec.bootstrap("mtls"),
        "security.protocol": "SSL",
        "ssl.keystore.location": str(keystore),  # type told from the file
        "ssl.keystore.password": "wrong-pw-5678",
        "ssl.truststore.location": str(truststore),
        "ssl.truststore.password": "right-pw-1234",
    }
    with pytest.raises(ConfigError) as info:
        Consumer({**props, "group.id": "never"})
    text = f"{info.value}\n{info.value!r}"
    assert "'ssl.keystore.location'" in text and str(keystore) in text
    assert "wrong ssl.keystore.password" in text
    assert "wrong-pw-5678" not in text and "right-pw-1234" not in text
