"""Compatibility layers: run programs written for other Kafka clients on kafka-handoff.

* :mod:`kafka_handoff.compat.confluent_kafka` -- confluent-kafka-python's API (``Consumer``, ``Producer``,
  ``AdminClient``, ``Message``, ``KafkaError``, ...), switch with one import line::

      from kafka_handoff.compat import confluent_kafka   # instead of: import confluent_kafka

* :mod:`kafka_handoff.compat.kafka_python` -- kafka-python's API (``KafkaConsumer``, ``KafkaProducer``, ...).

Both are thin layers over the public native API (:mod:`kafka_handoff`); docs/migrating.md lists what
behaves differently and how to move to the native API.
"""
