"""Build of the optional C extension; the project metadata lives in pyproject.toml.

``kafka_handoff.protocol._fastrecords`` speeds up record batch decoding.  It is optional: without a C
compiler the install still succeeds and the pure-Python decoder is used (see ``records.IMPLEMENTATION``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_handoff.protocol._fastrecords",
            sources=["src/kafka_handoff/protocol/_fastrecords.c"],
            optional=True,
        )
    ]
)
