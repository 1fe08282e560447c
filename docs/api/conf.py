"""Sphinx configuration of the API reference (``make docs``; ``make test`` builds it, warnings as errors)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

project = "kafka-handoff"
author = "kafka-handoff developers"
extensions = ["sphinx.ext.autodoc"]
suppress_warnings = ["ref.python"]  # "more than one target" for builtins named like attributes (type)
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
html_theme = "alabaster"
exclude_patterns: list[str] = []
nitpicky = True
# Names from outside the project (the standard library, typing helpers, third-party packages): the build is
# offline, so they cannot be resolved through intersphinx and are not checked.
nitpick_ignore_regex = [
    ("py:.*", r"(typing|typing_extensions|collections\.abc|concurrent\.futures|threading|asyncio)\..*"),
    ("py:.*", r"(ssl|socket|enum)\..*"),
    ("py:.*", r"(Any|Callable|Iterable|Iterator|Mapping|Sequence|Collection|Final|Literal|TypeAlias|Self)"),
    ("py:.*", r"(int|str|bytes|float|bool|dict|list|tuple|set|frozenset|object|type|None|BaseException)"),
    ("py:.*", r"(Exception|ValueError|TimeoutError|TypeError|KeyError|RuntimeError|NamedTuple|TypedDict)"),
    ("py:.*", r"(pyspark|pyarrow|deltalake|prometheus_client|opentelemetry|kio|rich)\b.*"),
    ("py:.*", r"(Clock|Header|kafka_handoff\.protocol\.requests\..*)"),
    ("py:.*", r"(Path|pathlib\.Path|datetime\..*|uuid\.UUID|UUID|Future|Protocol|re\.Pattern)"),
    ("py:.*", r"_[A-Za-z].*|.*\._[A-Za-z].*"),  # private helpers named in docstrings
    # AdminClient's per-concern mixins (admin/topics.py, ...): their methods are documented on AdminClient.
    ("py:class", r"kafka_handoff\.admin\.\w+\.\w+AdminMixin"),
    # Internal modules the API pages do not document (named in docstrings and signatures).
    ("py:.*", r"kafka_handoff\.(protocol\.records|pipeline\.arrow)\..*"),
]
