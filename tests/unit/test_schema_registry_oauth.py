"""``bearer.auth.credentials.source=OAUTHBEARER``: the Schema Registry client gets its token from a real OAuth
token endpoint (the dev broker's ``_oidc_server.py``, client-credentials grant) through the token provider
the Kafka clients use, and sends it as ``Authorization: Bearer``; a refused client is a
SchemaRegistryError caused by the token source's AuthenticationError."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.errors import AuthenticationError
from kafka_handoff.schema_registry import SchemaRegistryClient, SchemaRegistryError

pytestmark = pytest.mark.threads  # a real token endpoint process and the token refresher thread, no broker


class RecordingPool:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    def request(
        self, base: str, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Any:
        self.headers.append(dict(headers))
        return 200, b"[]"

    def close(self) -> None:
        pass


@pytest.fixture
def token_endpoint(tmp_path: Path) -> Iterator[str]:
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from kafka_handoff.devbroker import _oidc_server

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "signing.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {
        "port": port,
        "issuer": "handoff-test",
        "audience": "registry",
        "kid": "k1",
        "key_file": str(key_file),
        "token_lifetime_s": 600,
        "clients": {"sr-client": {"secret": "sr-secret-1", "subject": "sr-user"}},
    }
    config_file = tmp_path / "oidc.json"
    config_file.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [sys.executable, "-I", _oidc_server.__file__, str(config_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and "serving" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}/token"
    finally:
        proc.terminate()
        proc.wait(10)


def conf(url: str, secret: str) -> dict[str, Any]:
    return {
        "url": "http://127.0.0.1:1",
        "bearer.auth.credentials.source": "OAUTHBEARER",
        "bearer.auth.issuer.endpoint.url": url,
        "bearer.auth.client.id": "sr-client",
        "bearer.auth.client.secret": secret,
        "bearer.auth.scope": "registry",
        "bearer.auth.logical.cluster": "lsrc-1",
    }


def test_token_from_the_endpoint_is_sent_as_bearer(token_endpoint: str) -> None:
    pool = RecordingPool()
    client = SchemaRegistryClient(conf(token_endpoint, "sr-secret-1"), _pool=pool)
    try:
        client.get_subjects()
        client.get_subjects()
    finally:
        client.close()
    first, second = pool.headers
    assert first["Authorization"] == second["Authorization"]  # fetched once, reused until it ages
    token = first["Authorization"].removeprefix("Bearer ")
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert (claims["sub"], claims["scope"]) == ("sr-user", "registry")
    assert first["target-sr-cluster"] == "lsrc-1"


def test_a_refused_client_is_an_authentication_error_without_the_secret(token_endpoint: str) -> None:
    client = SchemaRegistryClient(conf(token_endpoint, "wrong-secret-9"), _pool=RecordingPool())
    try:
        with pytest.raises(SchemaRegistryError) as info:
            client.get_subjects()
    finally:
        client.close()
    assert isinstance(info.value.__cause__, AuthenticationError)
    assert "HTTP 401" in str(info.value) and "sr-client" in str(info.value)
    assert "wrong-secret-9" not in str(info.value)
