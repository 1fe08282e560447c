"""Scripted broker answers for the SASL unit tests (test_sasl.py, test_sasl_gssapi.py): SaslHandshake v1 and
SaslAuthenticate v2 responses as the connection would hand them to the authenticator."""

from __future__ import annotations

import datetime
from typing import Any

from kafka_handoff.protocol import wire
from kafka_handoff.protocol.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE

VERSIONS = {SASL_HANDSHAKE: 1, SASL_AUTHENTICATE: 2}


def handshake_response(code: int = 0, mechanisms: tuple[str, ...] = ("PLAIN",)) -> Any:
    return wire.build_response(SASL_HANDSHAKE, 1, {"error_code": code, "mechanisms": list(mechanisms)})


def authenticate_response(
    auth_bytes: bytes = b"", code: int = 0, message: str | None = None, lifetime_ms: int = 0
) -> Any:
    return wire.build_response(
        SASL_AUTHENTICATE,
        2,
        {
            "error_code": code,
            "error_message": message,
            "auth_bytes": auth_bytes,
            "session_lifetime": datetime.timedelta(milliseconds=lifetime_ms),
        },
    )
