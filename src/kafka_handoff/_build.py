"""Which fast paths this installation uses: ``kafka_handoff.build_info()``."""

from __future__ import annotations

import importlib.util
import platform
import sys
from typing import TypedDict

__all__ = ["BuildInfo", "build_info", "missing_fast_paths"]


class BuildInfo(TypedDict):
    version: str
    python: str
    platform: str
    record_decoder: str
    """``"c"`` when the ``_fastrecords`` extension decodes record batches, else ``"python"``."""
    record_decoder_unavailable: str | None
    """Why the C decoder is not in use (``None`` when it is)."""
    record_encoder: str
    """``"c"`` when the ``_fastrecords`` extension encodes record batches, else ``"python"``."""
    json_scanner: str
    """``"c"`` when the ``_jsonscan`` extension scans JSON values for the pipeline's native JSON parse, else
    ``"python"`` (pyarrow alone)."""
    crc32c: str
    compression: list[str]
    extras: dict[str, bool]


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _json_scanner_loads() -> bool:
    """Whether ``kafka_handoff.pipeline._jsonscan`` is built and loads -- checked without importing the
    ``pipeline`` package, which needs the ``spark`` extra (numpy, pyarrow) that a plain install lacks."""
    import importlib.machinery
    from pathlib import Path

    import kafka_handoff
    from kafka_handoff._native import pure_python_requested

    if pure_python_requested():
        return False
    if "kafka_handoff.pipeline._jsonscan" in sys.modules:
        return True
    where = str(Path(kafka_handoff.__file__).parent / "pipeline")
    spec = importlib.machinery.PathFinder.find_spec("_jsonscan", [where])
    if (
        spec is None
        or spec.loader is None
        or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
    ):
        return False
    spec.name = "kafka_handoff.pipeline._jsonscan"  # the name its PyInit function was built for
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except ImportError:
        return False
    return True


def build_info() -> BuildInfo:
    """Report the version and which fast paths are active (the C record loops, CRC32C, codecs, extras)."""
    from kafka_handoff import __version__
    from kafka_handoff.protocol import records

    crc = "crc32c (hardware or C)" if _has("crc32c") else "unavailable"
    codecs = ["gzip"]
    if _has("cramjam"):
        codecs += ["snappy", "lz4", "zstd"]
    return BuildInfo(
        version=__version__,
        python=sys.version.split()[0],
        platform=platform.platform(),
        record_decoder=records.IMPLEMENTATION,
        record_decoder_unavailable=records.C_UNAVAILABLE_REASON,
        record_encoder=records.ENCODER_IMPLEMENTATION,
        json_scanner="c" if _json_scanner_loads() else "python",
        crc32c=crc,
        compression=codecs,
        extras={name: _has(name) for name in ("pyspark", "pyarrow", "deltalake", "prometheus_client")},
    )


def missing_fast_paths() -> list[str]:
    """The compiled fast paths this installation lacks, each with the reason (empty when all are active)."""
    info = build_info()
    missing = []
    if info["record_decoder"] != "c":
        missing.append(f"C record decoder ({info['record_decoder_unavailable']})")
    if info["record_encoder"] != "c":
        missing.append("C record encoder (kafka_handoff.protocol._fastrecords)")
    from kafka_handoff.producer.future import C_FUTURES

    if C_FUTURES is None or not hasattr(C_FUTURES, "SendPath"):
        missing.append("C send path (kafka_handoff.producer._fastencode.SendPath; an older build?)")
    if info["json_scanner"] != "c":
        missing.append("C JSON scanner (kafka_handoff.pipeline._jsonscan)")
    return missing
