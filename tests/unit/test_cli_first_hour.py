"""Which broker a ``handoff`` command talks to when none is named, and failing fast when it is not there."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kafka_handoff.cli.command_config import (
    DEFAULT_BOOTSTRAP,
    BrokerUnreachableError,
    check_reachable,
    default_bootstrap,
)
from kafka_handoff.cli.main import main

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _record_broker(directory: Path, bootstrap: str) -> None:
    state = directory / ".handoff" / "broker"
    state.mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"bootstrap_servers": bootstrap}), encoding="utf-8")


def test_env_wins_then_the_local_broker_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HANDOFF_BOOTSTRAP", raising=False)
    assert default_bootstrap(tmp_path) == (DEFAULT_BOOTSTRAP, "the default")
    _record_broker(tmp_path, "127.0.0.1:35343")
    servers, source = default_bootstrap(tmp_path)
    assert servers == "127.0.0.1:35343"
    assert "state.json" in source
    monkeypatch.setenv("HANDOFF_BOOTSTRAP", "10.0.0.1:9093")
    assert default_bootstrap(tmp_path) == ("10.0.0.1:9093", "$HANDOFF_BOOTSTRAP")


def test_unreachable_broker_error_names_the_address_and_the_fix() -> None:
    port = _closed_port()
    with pytest.raises(BrokerUnreachableError) as info:
        check_reachable({"bootstrap.servers": f"127.0.0.1:{port}"}, "the default")
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message
    assert "from the default" in message
    assert "handoff broker start" in message and "--bootstrap-servers" in message


def test_a_listening_address_passes_the_check() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        check_reachable({"bootstrap.servers": f"127.0.0.1:{_closed_port()},127.0.0.1:{port}"})


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "list"],
        ["groups", "list"],
        ["produce-sample", "--topic", "events", "--count", "1000", "--no-progress"],
        ["consume", "--topic", "events"],
    ],
)
def test_commands_exit_non_zero_naming_the_recorded_broker_when_it_is_gone(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("HANDOFF_BOOTSTRAP", raising=False)
    port = _closed_port()
    _record_broker(tmp_path, f"127.0.0.1:{port}")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err
    assert "handoff broker start" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from kafka_handoff import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out
