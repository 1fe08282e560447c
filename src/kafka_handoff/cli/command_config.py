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
import re
from pathlib import Path
from typing import Any

from kafka_handoff.errors import ConfigError

__all__ = ["add_command_config_arg", "client_config", "load_command_config"]


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
        return {str(k): v for k, v in data.items()}
    return dict(_properties(text, file))


def client_config(
    args: argparse.Namespace, bootstrap: str | None, fallback: str | None = None
) -> dict[str, Any]:
    """The settings for a client of this command: the ``--command-config`` file's; ``bootstrap`` (given on the
    command line) wins over the file's ``bootstrap.servers``, which wins over ``fallback`` (environment or
    default)."""
    path = getattr(args, "command_config", None)
    props = load_command_config(path) if path else {}
    if bootstrap:
        props["bootstrap.servers"] = bootstrap
    elif not props.get("bootstrap.servers") and fallback:
        props["bootstrap.servers"] = fallback
    return props
