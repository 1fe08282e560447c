"""Build of the optional C extensions; the project metadata lives in pyproject.toml.

``kafka_handoff.protocol._fastrecords`` speeds up record batch decoding and encoding.  It is optional: without
a C compiler the install still succeeds and the pure-Python loops are used (see ``records.IMPLEMENTATION`` and
``records.ENCODER_IMPLEMENTATION``).  ``kafka_handoff.producer._fastencode`` (optional the same way) speeds up
the producer's per-record work (appends, futures, murmur2).  ``kafka_handoff.pipeline._jsonscan`` (optional too)
scans flat JSON values for the pipeline's native JSON parse; ``kafka_handoff.pipeline._avrodecode`` (optional
too) decodes flat registry-framed Avro records into Arrow buffers for ``parse_avro``.
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
        Extension(
            "kafka_handoff.pipeline._jsonscan",
            sources=["src/kafka_handoff/pipeline/_jsonscan.c"],
            optional=True,
        ),
        Extension(
            "kafka_handoff.pipeline._avrodecode",
            sources=["src/kafka_handoff/pipeline/_avrodecode.c"],
            optional=True,
        ),
    ]
)
