"""``--command-config FILE``: client settings for every client a ``handoff`` command creates.

As Kafka's own tools do, the file holds client configuration -- typically the security settings
(``security.protocol``, ``ssl.*``, ``sasl.*``) -- as Java properties (``key=value`` or ``key: value`` lines,
``#``/``!`` comments) or as a JSON object (such as the ``client.json`` that
``handoff broker start --security ...`` writes).  Its ``bootstrap.servers``, if any, is used when the command
line gives none.  Values are never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka_handoff.errors import ConfigError

__all__ = [
    "DEFAULT_BOOTSTRAP",
    "BrokerUnreachableError",
    "add_command_config_arg",
    "check_reachable",
    "client_config",
    "default_bootstrap",
    "load_command_config",
]

#: Where nothing else names a broker: Kafka's own default.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: The data dir ``handoff broker start`` uses by default (relative to the current directory).
LOCAL_BROKER_STATE = Path(".handoff") / "broker" / "state.json"


class BrokerUnreachableError(ConfigError):
    """No bootstrap address of a command accepts a TCP connection: the message names what was tried, where
    the address came from and what to do."""


def add_command_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=None,
        help="client settings (properties or JSON), e.g. security.protocol, ssl.*, sasl.*; passed to every "
        "client the command creates",
    )


def _properties(text: str, path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        # As java.util.Properties: the key ends at the first '=', ':' or blank.
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:]?\s*(.*)", line)
        if match is None:
            raise ConfigError(f"{path}:{number}: expected key=value (a properties line)")
        out[match[1].replace("\\", "")] = match[2]
    return out


def load_command_config(path: str | Path) -> dict[str, Any]:
    """Read a properties or JSON client config file; errors name the file (never the values)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--command-config {file}: cannot read the file ({exc.strerror})") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--command-config {file}: not valid JSON ({exc.__class__.__name__})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"--command-config {file}: expected a JSON object of client settings")
        return _kafka_settings({str(k): v for k, v in data.items()})
    return _kafka_settings(_properties(text, file))


def _kafka_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The Kafka client settings of a config file: ``schema.registry.*`` keys (as in ``client.json`` of
    ``handoff broker start --schema-registry`` and Confluent's client files) are the serdes', not a
    client's."""
    return {k: v for k, v in settings.items() if not k.startswith("schema.registry.")}


def default_bootstrap(cwd: Path | None = None) -> tuple[str, str]:
    """``(servers, where they came from)`` when the command line names no broker: ``$HANDOFF_BOOTSTRAP``, else
    the broker ``handoff broker start`` started from this directory (its ``.handoff/broker/state.json``
    records the bootstrap servers), else Kafka's default ``127.0.0.1:9092``."""
    env = os.environ.get("HANDOFF_BOOTSTRAP", "").strip()
    if env:
        return env, "$HANDOFF_BOOTSTRAP"
    state = (cwd or Path.cwd()) / LOCAL_BROKER_STATE
    try:
        recorded = json.loads(state.read_text(encoding="utf-8")).get("bootstrap_servers")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and recorded.strip():
        return recorded.strip(), f"the broker recorded in {LOCAL_BROKER_STATE}"
    return DEFAULT_BOOTSTRAP, "the default"


def client_config(
    args: argparse.Namespace, bootstrap: str | None, fallback: str | None = None
) -> dict[str, Any]:
    """The settings for a client of this command: the ``--command-config`` file's; ``bootstrap`` (given on the
    command line) wins over the file's ``bootstrap.servers``, which wins over ``fallback`` (when given) or
    :func:`default_bootstrap`.  Where the address came from is kept on ``args.bootstrap_source`` for
    :func:`check_reachable`'s message."""
    path = getattr(args, "command_config", None)
    props = load_command_config(path) if path else {}
    if bootstrap:
        props["bootstrap.servers"] = bootstrap
        source = "--bootstrap-servers"
    elif props.get("bootstrap.servers"):
        source = f"--command-config {path}"
    else:
        props["bootstrap.servers"], source = (
            (fallback, "$HANDOFF_BOOTSTRAP or the default") if fallback else default_bootstrap()
        )
    args.bootstrap_source = source
    return props


def check_reachable(props: Mapping[str, Any], source: str = "", timeout: float = 3.0) -> None:
    """Fail fast when no bootstrap address accepts a TCP connection within ``timeout`` seconds (a client would
    otherwise retry until its own, much longer, timeouts).  Raises :class:`BrokerUnreachableError` naming the
    addresses tried, where they came from and the likely fix; a bad address list raises
    :class:`ConfigError`."""
    from kafka_handoff.config import parse_bootstrap_servers

    servers = props.get("bootstrap.servers") or DEFAULT_BOOTSTRAP
    addresses = parse_bootstrap_servers(servers)
    reasons: list[str] = []
    per_address = max(0.5, timeout / len(addresses))
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=per_address):
                return
        except OSError as exc:
            why = exc.strerror or exc.__class__.__name__
            if isinstance(exc, TimeoutError | socket.timeout):
                why = f"no answer within {per_address:.1f}s"
            reasons.append(f"{host}:{port} ({why})")
    origin = f" (from {source})" if source else ""
    if source.startswith("the broker recorded"):
        fix = "that broker is no longer running: start it again with `handoff broker start`"
    else:
        fix = (
            "start a local one with `handoff broker start`, or name yours with --bootstrap-servers HOST:PORT "
            "or `export HANDOFF_BOOTSTRAP=HOST:PORT`"
        )
    raise BrokerUnreachableError(f"no broker reachable at {', '.join(reasons)}{origin}; {fix}")
