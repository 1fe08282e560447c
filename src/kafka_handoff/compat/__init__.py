"""Drop-in compatibility layers for programs written against other Python Kafka clients.

Each subpackage re-creates one peer's public API on kafka-handoff's native clients (their public API only),
so that an existing program switches by changing one import (see docs/migrating.md).
"""
