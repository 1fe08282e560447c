"""The optional C extensions: the one place that reads ``KAFKA_HANDOFF_PURE_PYTHON`` and imports them.

Every fast path (``protocol/_fastrecords``: record batch decoding and encoding; ``producer/_fastencode``: the
producer's per-record helpers) has a pure-Python twin with the same results.  The C one is used when it is
importable, unless the environment variable ``KAFKA_HANDOFF_PURE_PYTHON`` is set, at import time, to anything
but ``""``, ``0``, ``false`` or ``no`` (case-insensitive).  No dependencies: any layer may import this.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final

__all__ = ["PURE_PYTHON_ENV", "load_extension", "pure_python_requested"]

PURE_PYTHON_ENV: Final = "KAFKA_HANDOFF_PURE_PYTHON"
_OFF: Final = ("", "0", "false", "no")


def pure_python_requested() -> bool:
    """Whether ``KAFKA_HANDOFF_PURE_PYTHON`` asks for the pure-Python implementations."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip().lower() not in _OFF


def load_extension(name: str, *, honour_env: bool = True) -> ModuleType | None:
    """The extension module ``name`` (e.g. ``"kafka_handoff.producer._fastencode"``), or None when it is not
    built or (with ``honour_env``) the pure-Python implementations were requested."""
    if honour_env and pure_python_requested():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
