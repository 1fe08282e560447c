"""The secured dev broker's pure parts: modes, broker settings, client settings, certificates, tokens."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from kafka_handoff.devbroker import security
from kafka_handoff.devbroker.config import NodeSpec
from kafka_handoff.errors import ConfigError

pytestmark = pytest.mark.unit
pytest.importorskip("cryptography")


def test_normalize_modes() -> None:
    assert security.normalize_modes("all") == security.MODES
    assert security.normalize_modes(["mtls", "ssl", "mtls"]) == ("mtls", "ssl")
    with pytest.raises(ConfigError, match="security: 'tls' is not allowed; allowed values: all, ssl"):
        security.normalize_modes("tls")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> security.DevSecurity:
    root = tmp_path_factory.mktemp("sec")
    sec = security.prepare(root, security.ALL_MODES, oidc_port=40000, reauth_ms=None)
    sec.assign_ports(list(range(50000, 50000 + 2 * len(sec.modes))), 2)
    return sec


def test_broker_overrides_add_listeners_beside_plaintext(prepared: security.DevSecurity) -> None:
    node = NodeSpec(2, 9092, 9093, Path("/tmp/n2"))
    out = prepared.broker_overrides(node, 1)
    width = len(prepared.modes)
    assert out["listeners"].startswith("PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SSL://")
    assert f"SSL://127.0.0.1:{50000 + width}" in out["listeners"]  # node index 1, first mode
    assert "CONTROLLER" not in out["advertised.listeners"]
    assert "MTLS:SSL" in out["listener.security.protocol.map"]
    assert out["inter.broker.listener.name"] == "PLAINTEXT"
    assert out["listener.name.mtls.ssl.client.auth"] == "required"
    assert out["listener.name.sasl_reauth.connections.max.reauth.ms"] == str(security.DEFAULT_TEST_REAUTH_MS)
    assert "listener.name.sasl_ssl.connections.max.reauth.ms" not in out
    assert out["super.users"] == "User:ANONYMOUS;User:admin"
    assert out["sasl.oauthbearer.jwks.endpoint.url"].startswith("file:///")
    jvm = prepared.jvm_opts()[0]
    assert jvm.startswith("-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=")
    assert out["sasl.oauthbearer.jwks.endpoint.url"] in jvm
    args = prepared.format_args()
    assert args.count("--add-scram") == 2 * len(security.USERS)


def test_client_config_names_and_errors(prepared: security.DevSecurity) -> None:
    conf = prepared.client_config("mtls")
    assert conf["security.protocol"] == "SSL"
    assert (
        conf["bootstrap.servers"]
        == f"127.0.0.1:{prepared.ports['mtls'][0]},127.0.0.1:{prepared.ports['mtls'][1]}"
    )
    oauth = prepared.client_config("sasl_ssl", mechanism="OAUTHBEARER", user="bob")
    assert oauth["sasl.oauthbearer.client.id"] == "bob"
    assert oauth["sasl.oauthbearer.client.secret"] == prepared.users["bob"]
    with pytest.raises(ConfigError, match=r"sasl\.mechanism: 'GSSAPI' is not enabled"):
        prepared.client_config("sasl_ssl", mechanism="GSSAPI")
    with pytest.raises(ConfigError, match=r"sasl\.mechanism: mode 'ssl' has no SASL"):
        prepared.client_config("ssl", mechanism="PLAIN")
    assert prepared.users["alice"] not in repr(prepared)
    assert prepared.client_key_password not in repr(prepared)


def test_certificates_verify_with_the_ssl_module(prepared: security.DevSecurity) -> None:
    import ssl

    from cryptography import x509

    ctx = ssl.create_default_context(cafile=str(prepared.ca_file))
    ctx.load_cert_chain(
        str(prepared.client_cert_file), str(prepared.client_key_file), password=prepared.client_key_password
    )
    pem = prepared.broker_keystore.read_bytes()
    cert = x509.load_pem_x509_certificates(pem)[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    wrong = x509.load_pem_x509_certificates(prepared.wrong_host_keystore.read_bytes())[0]
    wrong_san = wrong.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert wrong_san.get_values_for_type(x509.DNSName) == [security.WRONG_HOST]
    with pytest.raises(ssl.SSLError):  # the key is encrypted
        ssl.create_default_context().load_cert_chain(
            str(prepared.client_cert_file), str(prepared.client_key_file), password="wrong"
        )


def test_minted_token_verifies_against_the_jwks(prepared: security.DevSecurity) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    token, expiry = prepared.mint_token("bob", lifetime_s=60)
    header_b64, payload_b64, sig_b64 = token.split(".")

    def unb64(text: str) -> bytes:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    header, claims = json.loads(unb64(header_b64)), json.loads(unb64(payload_b64))
    assert header == {"alg": "RS256", "typ": "JWT", "kid": prepared.kid}
    assert claims["sub"] == "bob" and claims["exp"] == expiry
    assert claims["aud"] == security.AUDIENCE and claims["iss"] == security.ISSUER
    (jwk,) = json.loads(prepared.jwks_file.read_text())["keys"]
    public = rsa.RSAPublicNumbers(
        int.from_bytes(unb64(jwk["e"]), "big"), int.from_bytes(unb64(jwk["n"]), "big")
    ).public_key()
    public.verify(unb64(sig_b64), f"{header_b64}.{payload_b64}".encode(), padding.PKCS1v15(), hashes.SHA256())


def test_clear_removes_what_a_secured_start_left(tmp_path: Path) -> None:
    sec = security.prepare(tmp_path, ["ssl"], oidc_port=40001)
    sec.assign_ports([50001], 1)
    written = sec.write_client_files()
    assert (tmp_path / "client.json") in written and sec.ca_file.exists()
    (tmp_path / "state.json").write_text("{}")
    security.clear(tmp_path)
    assert not list(tmp_path.glob("client*.json")) and not sec.directory.exists()
    assert (tmp_path / "state.json").exists()  # nothing else is touched
    assert security.load(tmp_path) is None


def test_kerberos_mode_is_outside_all_and_configures_a_gssapi_listener(tmp_path: Path) -> None:
    """Without starting a KDC: the listener's settings and the client's, as ``prepare`` would set them."""
    assert "kerberos" not in security.normalize_modes("all")
    assert security.normalize_modes(["sasl_ssl", "kerberos"]) == ("sasl_ssl", "kerberos")
    sec = security.DevSecurity(
        directory=tmp_path / "security", modes=("kerberos",), users={"alice": "x"}, oidc_port=1, kdc_port=4088
    )
    sec.assign_ports([50100], 1)
    kdc = sec.kdc
    assert kdc is not None and kdc.service_principal == "kafka/127.0.0.1@HANDOFF.TEST"
    out = sec.broker_overrides(NodeSpec(1, 9092, 9093, Path("/tmp/n1")), 0)
    assert "KERBEROS://127.0.0.1:50100" in out["listeners"]
    assert "KERBEROS:SASL_PLAINTEXT" in out["listener.security.protocol.map"]
    assert out["listener.name.kerberos.sasl.enabled.mechanisms"] == "GSSAPI"
    assert out["listener.name.kerberos.sasl.kerberos.service.name"] == "kafka"
    jaas = out["listener.name.kerberos.gssapi.sasl.jaas.config"]
    assert "Krb5LoginModule required useKeyTab=true" in jaas
    assert f'keyTab="{kdc.broker_keytab}"' in jaas and 'principal="kafka/127.0.0.1@HANDOFF.TEST"' in jaas
    assert "listener.name.kerberos.plain.sasl.jaas.config" not in out
    assert f"-Djava.security.krb5.conf={kdc.krb5_conf}" in sec.jvm_opts()
    client = sec.client_config("kerberos")
    assert client == {
        "bootstrap.servers": "127.0.0.1:50100",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        "sasl.kerberos.principal": "alice@HANDOFF.TEST",
        "sasl.kerberos.keytab": str(kdc.keytab("alice")),
    }
