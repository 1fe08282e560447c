"""Build of the optional C extensions; the project metadata lives in pyproject.toml.

``kafka_handoff.protocol._fastrecords`` speeds up record batch decoding and encoding.  It is optional: without
a C compiler the install still succeeds and the pure-Python loops are used (see ``records.IMPLEMENTATION`` and
``records.ENCODER_IMPLEMENTATION``).  ``kafka_handoff.producer._fastencode`` (optional the same way) speeds up
the producer's per-record work (appends, futures, murmur2).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_handoff.protocol._fastrecords",
            sources=["src/kafka_handoff/protocol/_fastrecords.c"],
            optional=True,
        ),
        Extension(
            "kafka_handoff.producer._fastencode",
            sources=["src/kafka_handoff/producer/_fastencode.c"],
            optional=True,
        ),
    ]
)
