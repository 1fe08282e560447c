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
    avro_decoder: str
    """``"c"`` when the ``_avrodecode`` extension decodes flat Avro records for ``parse_avro``, else
    ``"python"``."""
    crc32c: str
    compression: list[str]
    extras: dict[str, bool]
    fast_paths_off: dict[str, str]
    """Why each C fast path that is not in use is off, by name (``record_decoder``, ``record_encoder``,
    ``send_path``, ``json_scanner``, ``avro_decoder``); empty when all are on."""
    c_overflow_checks: str | None
    """How the compiled record loops check int64 overflow: ``"builtin"`` (the GCC/Clang builtin) or
    ``"portable"`` (plain comparisons: MSVC, or a build with ``-DKAFKA_HANDOFF_PORTABLE_C``); None when the
    ``_fastrecords`` extension is not built."""


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _extension_off_reason(name: str) -> str | None:
    """Why the extension module ``name`` is not in use (None when it imports and is not switched off)."""
    from kafka_handoff._native import PURE_PYTHON_ENV, pure_python_requested

    if pure_python_requested():
        return f"{PURE_PYTHON_ENV} is set"
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"not built or not loadable ({type(exc).__name__}: {exc})"
    return None


def _json_scanner_off_reason(module: str = "_jsonscan") -> str | None:
    """Why ``kafka_handoff.pipeline._jsonscan`` (or another pipeline extension ``module``) is not in use
    (None when it is built and loads) -- checked without importing the ``pipeline`` package, which needs the
    ``pipeline`` extra (numpy, pyarrow) that a plain install lacks."""
    import importlib.machinery
    from pathlib import Path

    import kafka_handoff
    from kafka_handoff._native import PURE_PYTHON_ENV, pure_python_requested

    if pure_python_requested():
        return f"{PURE_PYTHON_ENV} is set"
    if f"kafka_handoff.pipeline.{module}" in sys.modules:
        return None
    where = str(Path(kafka_handoff.__file__).parent / "pipeline")
    spec = importlib.machinery.PathFinder.find_spec(module, [where])
    if (
        spec is None
        or spec.loader is None
        or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
    ):
        return f"not built (no compiled kafka_handoff/pipeline/{module} module)"
    spec.name = f"kafka_handoff.pipeline.{module}"  # the name its PyInit function was built for
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except ImportError as exc:
        return f"not loadable ({type(exc).__name__}: {exc})"
    return None


def _fast_paths_off() -> dict[str, str]:
    from kafka_handoff.producer.future import C_FUTURES
    from kafka_handoff.protocol import records

    off: dict[str, str] = {}
    fastrecords = _extension_off_reason("kafka_handoff.protocol._fastrecords")
    if records.IMPLEMENTATION != "c":
        if records.C_UNAVAILABLE_REASON is not None:
            off["record_decoder"] = records.C_UNAVAILABLE_REASON
        else:
            off["record_decoder"] = fastrecords or "switched to the pure-Python loop at run time"
    if records.ENCODER_IMPLEMENTATION != "c":
        off["record_encoder"] = fastrecords or "the extension has no encoder (an older build?)"
    if C_FUTURES is None or not hasattr(C_FUTURES, "SendPath"):
        fastencode = _extension_off_reason("kafka_handoff.producer._fastencode")
        off["send_path"] = (
            fastencode or "the extension has no SendPath or failed its self-check (an older build?)"
        )
    json_scanner = _json_scanner_off_reason()
    if json_scanner is not None:
        off["json_scanner"] = json_scanner
    avro_decoder = _json_scanner_off_reason("_avrodecode")
    if avro_decoder is not None:
        off["avro_decoder"] = avro_decoder
    return off


def _overflow_checks() -> str | None:
    from kafka_handoff.protocol import records

    return getattr(records._extension, "OVERFLOW_CHECKS", None) if records._extension is not None else None


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
        json_scanner="c" if _json_scanner_off_reason() is None else "python",
        avro_decoder="c" if _json_scanner_off_reason("_avrodecode") is None else "python",
        crc32c=crc,
        compression=codecs,
        extras={
            name: _has(name)
            for name in (
                "rich",
                "pyspark",
                "pyarrow",
                "deltalake",
                "prometheus_client",
                "opentelemetry",
                "uvloop",
            )
        },
        fast_paths_off=_fast_paths_off(),
        c_overflow_checks=_overflow_checks(),
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
    if info["avro_decoder"] != "c":
        missing.append("C Avro decoder (kafka_handoff.pipeline._avrodecode)")
    return missing
