"""SASL/GSSAPI without a KDC: the RFC 4752 token flow through the authenticator with a fake GSS context,
and the Kerberos settings (librdkafka's sasl.kerberos.* and Java's Krb5LoginModule JAAS line)."""

from __future__ import annotations

from typing import Any

import pytest
import sasl_responses
from sasl_responses import VERSIONS, authenticate_response

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import AuthenticationError, ConfigError
from kafka_handoff.kerberos import RENEW_WINDOW_FACTOR, KerberosLogin, kerberos_options
from kafka_handoff.protocol.sasl import (
    MECHANISMS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Gssapi,
    SaslAuthenticator,
    SaslMechanism,
)

pytestmark = pytest.mark.unit

BOOT = {"bootstrap.servers": "h:9092", "group.id": "g"}


def handshake_response(code: int = 0, mechanisms: tuple[str, ...] = ("GSSAPI",)) -> Any:
    return sasl_responses.handshake_response(code, mechanisms)


class FakeContext:
    """A GSS initiator that needs ``rounds`` acceptor tokens (``b"srv-<n>"``) to be established; its
    "wrap" is a visible prefix so the test can read what was wrapped."""

    def __init__(self, rounds: int = 1, *, fail_step: AuthenticationError | None = None) -> None:
        self.rounds = rounds
        self.seen: list[bytes | None] = []
        self.wrapped: list[bytes] = []
        self.fail_step = fail_step

    @property
    def complete(self) -> bool:
        return len(self.seen) > self.rounds

    def step(self, token: bytes | None) -> bytes | None:
        if self.fail_step is not None:
            raise self.fail_step
        self.seen.append(token)
        if token is None:
            return b"AP-REQ"
        return None if self.complete else b"cli-" + token

    def unwrap(self, message: bytes) -> bytes:
        if not message.startswith(b"WRAP:"):
            raise AuthenticationError("GSSAPI: bad wrap token")
        return message[5:]

    def wrap(self, message: bytes) -> bytes:
        self.wrapped.append(message)
        return b"WRAP:" + message


def authenticator(ctx: FakeContext) -> SaslAuthenticator:
    def factory() -> SaslMechanism:
        return Gssapi(ctx)

    return SaslAuthenticator("GSSAPI", factory, VERSIONS, "b1:9092", 1)


def test_gssapi_is_a_supported_mechanism() -> None:
    assert "GSSAPI" in MECHANISMS


def test_full_exchange_context_then_security_layer() -> None:
    ctx = FakeContext(rounds=1)
    auth = authenticator(ctx)
    assert auth.start().values == {"mechanism": "GSSAPI"}
    first = auth.on_response(SASL_HANDSHAKE, handshake_response())
    assert first is not None and first.values["auth_bytes"] == b"AP-REQ"
    # The broker's AP-REP completes the context (mutual authentication); the client answers empty.
    empty = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-1"))
    assert empty is not None and empty.values["auth_bytes"] == b""
    assert ctx.complete and ctx.seen == [None, b"srv-1"]
    # The wrapped offer: every layer allowed, 64 KiB max; the answer is "no security layer", size 0, and
    # no authorization id -- wrapped.
    layer = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"WRAP:\x07\x00\x01\x00"))
    assert layer is not None and layer.values["auth_bytes"] == b"WRAP:\x01\x00\x00\x00"
    assert ctx.wrapped == [b"\x01\x00\x00\x00"]
    assert not auth.done
    assert auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"", lifetime_ms=60_000)) is None
    assert auth.done and auth.session_lifetime_ms == 60_000


def test_several_context_rounds_before_the_offer() -> None:
    ctx = FakeContext(rounds=2)
    auth = authenticator(ctx)
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response())
    second = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-1"))
    assert second is not None and second.values["auth_bytes"] == b"cli-srv-1"
    third = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-2"))
    assert third is not None and third.values["auth_bytes"] == b""
    layer = auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"WRAP:\x01\x00\x00\x00"))
    assert layer is not None and layer.values["auth_bytes"] == b"WRAP:\x01\x00\x00\x00"


def test_a_broker_that_requires_a_security_layer_is_refused() -> None:
    ctx = FakeContext()
    auth = authenticator(ctx)
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response())
    auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-1"))
    with pytest.raises(AuthenticationError, match=r"b1:9092 \(node 1\).*requires a security layer"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"WRAP:\x04\x00\x10\x00"))
    assert ctx.wrapped == []


def test_a_malformed_offer_is_an_authentication_error() -> None:
    auth = authenticator(FakeContext())
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response())
    auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-1"))
    with pytest.raises(AuthenticationError, match=r"b1:9092.*offer has 2 bytes"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"WRAP:\x01\x00"))


def test_a_ticket_failure_at_the_first_token_names_the_broker() -> None:
    ctx = FakeContext(fail_step=AuthenticationError("GSSAPI: Ticket expired"))
    auth = authenticator(ctx)
    auth.start()
    with pytest.raises(
        AuthenticationError, match=r"GSSAPI authentication with broker b1:9092 \(node 1\).*expired"
    ):
        auth.on_response(SASL_HANDSHAKE, handshake_response())


def test_the_brokers_refusal_is_reported() -> None:
    auth = authenticator(FakeContext())
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response())
    with pytest.raises(AuthenticationError, match=r"SASL_AUTHENTICATION_FAILED: Authentication failed"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(code=58, message="Authentication failed"))


def test_data_after_the_end_is_refused() -> None:
    auth = authenticator(FakeContext())
    auth.start()
    auth.on_response(SASL_HANDSHAKE, handshake_response())
    auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"srv-1"))
    auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"WRAP:\x01\x00\x00\x00"))
    with pytest.raises(AuthenticationError, match="after the exchange"):
        auth.on_response(SASL_AUTHENTICATE, authenticate_response(b"more"))


# ------------------------------------------------------------------------------------------ settings
JAAS_KEYTAB = (
    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
    'keyTab="/etc/security/client.keytab" principal="alice@EXAMPLE.COM";'
)


def test_librdkafka_names() -> None:
    values = {
        "sasl.kerberos.service.name": "kafka-svc",
        "sasl.kerberos.principal": "alice@EXAMPLE.COM",
        "sasl.kerberos.keytab": "/k.keytab",
    }
    assert kerberos_options(values, None) == {
        "service": "kafka-svc",
        "principal": "alice@EXAMPLE.COM",
        "keytab": "/k.keytab",
        "ccache": None,
    }


def test_java_jaas_keytab_login() -> None:
    options = kerberos_options({"sasl.kerberos.service.name": "kafka"}, JAAS_KEYTAB)
    assert options["principal"] == "alice@EXAMPLE.COM"
    assert options["keytab"] == "/etc/security/client.keytab"
    assert options["service"] == "kafka"


def test_java_jaas_service_name_option() -> None:
    jaas = JAAS_KEYTAB.replace("storeKey=true", 'storeKey=true serviceName="kafka-prod"')
    assert kerberos_options({}, jaas)["service"] == "kafka-prod"
    assert kerberos_options({"sasl.kerberos.service.name": "kafka-test"}, jaas)["service"] == "kafka-test"


def test_java_jaas_ticket_cache() -> None:
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true "
        'ticketCache="/tmp/krb5cc_app";'
    )
    options = kerberos_options({}, jaas)
    assert options == {"service": "kafka", "principal": None, "keytab": None, "ccache": "/tmp/krb5cc_app"}


@pytest.mark.parametrize(
    ("jaas", "fragment"),
    [
        (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="u" password="s3cr3t";',
            "does not serve sasl.mechanism=GSSAPI",
        ),
        (
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
            "useKeyTab=true needs keyTab",
        ),
        ('com.sun.security.auth.module.Krb5LoginModule required keyTab="/k";', "without useKeyTab=true"),
    ],
)
def test_bad_jaas_lines_name_the_key(jaas: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config") as info:
        parse_consumer_config(
            {
                **BOOT,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "GSSAPI",
                "sasl.jaas.config": jaas,
            }
        )
    assert fragment in str(info.value)
    assert "s3cr3t" not in str(info.value)


def test_service_name_must_be_a_principal_primary() -> None:
    with pytest.raises(ConfigError, match=r"'kafka/broker' for configuration 'sasl.kerberos.service.name'"):
        parse_consumer_config(
            {
                **BOOT,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "GSSAPI",
                "sasl.kerberos.service.name": "kafka/broker",
            }
        )


def test_defaults_parse_java_default_mechanism() -> None:
    config = parse_consumer_config({**BOOT, "security.protocol": "SASL_PLAINTEXT"})
    values = config.as_dict()
    assert values["sasl.mechanism"] == "GSSAPI"
    assert values["sasl.kerberos.service.name"] == "kafka"
    assert values["sasl.kerberos.keytab"] is None


def test_a_missing_keytab_is_an_authentication_error_naming_it(tmp_path: Any) -> None:
    pytest.importorskip("gssapi")
    login = KerberosLogin("kafka", "alice@EXAMPLE.COM", str(tmp_path / "gone.keytab"))
    with pytest.raises(AuthenticationError, match=r"keytab file .*gone\.keytab not found"):
        login.credentials()


# ------------------------------------------------------------------------------------------ the login
class FakeGssError(Exception):
    pass


class FakeCredentials:
    def __init__(self, lifetimes: list[int], name: Any, store: dict[bytes, bytes] | None) -> None:
        self._lifetimes = lifetimes
        self.name = name
        self.store = store

    @property
    def lifetime(self) -> int:
        return self._lifetimes[0]


class FakeGssapi:
    """The few names of the ``gssapi`` package KerberosLogin uses; ``lifetimes[0]`` is what every
    credential reports (the test changes it as time would)."""

    class exceptions:
        GSSError = FakeGssError

    class NameType:
        kerberos_principal = "krb5-principal"

    def __init__(self) -> None:
        self.lifetimes = [36000]
        self.acquired: list[FakeCredentials] = []
        self.fail: str | None = None

    def Name(self, text: str, kind: str) -> str:
        return f"{kind}:{text}"

    def Credentials(
        self, name: Any = None, usage: str = "both", store: dict[bytes, bytes] | None = None
    ) -> FakeCredentials:
        if self.fail:
            raise FakeGssError(self.fail)
        creds = FakeCredentials(self.lifetimes, name, store)
        self.acquired.append(creds)
        return creds


@pytest.fixture
def fake_gssapi(monkeypatch: pytest.MonkeyPatch) -> FakeGssapi:
    import kafka_handoff.kerberos as kerberos

    fake = FakeGssapi()
    monkeypatch.setattr(kerberos, "_gssapi", lambda: fake)
    return fake


def test_keytab_login_uses_a_private_memory_cache_and_renews_near_expiry(
    fake_gssapi: FakeGssapi, tmp_path: Any
) -> None:
    keytab = tmp_path / "alice.keytab"
    keytab.write_bytes(b"\x05\x02")
    now = [1000.0]
    login = KerberosLogin(
        "kafka", "alice@EXAMPLE.COM", str(keytab), renew_jitter=0.1, clock=lambda: now[0], rng=lambda: 0.5
    )
    first = login.credentials()
    store = fake_gssapi.acquired[0].store
    assert store is not None and store[b"client_keytab"] == str(keytab).encode()
    assert store[b"ccache"].startswith(b"MEMORY:kafka-handoff-")
    assert fake_gssapi.acquired[0].name == "krb5-principal:alice@EXAMPLE.COM"
    # Until the renew window (0.8 + 0.1 * 0.5 of the life passed) the same credentials serve every
    # authentication.
    now[0] += 30000
    fake_gssapi.lifetimes[0] = int(36000 * (1 - RENEW_WINDOW_FACTOR - 0.05)) + 1
    assert login.credentials() is first and login.logins == 1
    # Past it: a new login into a new private cache...
    fake_gssapi.lifetimes[0] -= 2
    # ... but not sooner than sasl.kerberos.min.time.before.relogin (60 s) after the last one.
    now[0] = 1000.0 + 59.0
    assert login.credentials() is first
    now[0] = 1000.0 + 30000
    second = login.credentials()
    assert second is not first and login.logins == 2
    new_store = fake_gssapi.acquired[1].store
    assert new_store is not None and new_store[b"ccache"] != store[b"ccache"]
    # An expired ticket is replaced even right after a login.
    fake_gssapi.lifetimes[0] = 0
    assert login.credentials() is not second and login.logins == 3


def test_ticket_cache_login_reads_the_cache_at_every_authentication(fake_gssapi: FakeGssapi) -> None:
    login = KerberosLogin("kafka", None, None, "FILE:/tmp/krb5cc_app")
    login.credentials()
    login.credentials()
    assert [c.store for c in fake_gssapi.acquired] == [{b"ccache": b"FILE:/tmp/krb5cc_app"}] * 2
    fake_gssapi.lifetimes[0] = 0
    with pytest.raises(AuthenticationError, match=r"ticket cache FILE:/tmp/krb5cc_app has expired.*kinit"):
        login.credentials()


def test_a_kerberos_failure_is_an_authentication_error(fake_gssapi: FakeGssapi, tmp_path: Any) -> None:
    keytab = tmp_path / "k.keytab"
    keytab.write_bytes(b"\x05\x02")
    fake_gssapi.fail = "Client 'nobody@EXAMPLE.COM' not found in Kerberos database"
    login = KerberosLogin("kafka", "nobody@EXAMPLE.COM", str(keytab))
    with pytest.raises(AuthenticationError, match=r"principal nobody@EXAMPLE\.COM from keytab .*not found"):
        login.credentials()
    assert "nobody" in repr(login) and "keytab" in repr(login)


def test_java_kerberos_tuning_keys_parse_and_are_checked() -> None:
    props = {
        **BOOT,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.kerberos.ticket.renew.window.factor": "0.9",
        "sasl.kerberos.ticket.renew.jitter": 0.1,
        "sasl.kerberos.min.time.before.relogin": "30000",
        "sasl.kerberos.kinit.cmd": "/usr/bin/kinit -R",
    }
    values = parse_consumer_config(props).as_dict()
    assert values["sasl.kerberos.ticket.renew.window.factor"] == 0.9
    assert values["sasl.kerberos.ticket.renew.jitter"] == 0.1
    assert values["sasl.kerberos.min.time.before.relogin"] == 30000
    with pytest.raises(ConfigError, match=r"'sasl.kerberos.ticket.renew.window.factor'.*0.5,...,1.0"):
        parse_consumer_config({**props, "sasl.kerberos.ticket.renew.window.factor": 0.2})
    with pytest.raises(ConfigError, match=r"'sasl.kerberos.ticket.renew.jitter'.*expected a number"):
        parse_consumer_config({**props, "sasl.kerberos.ticket.renew.jitter": "soon"})
