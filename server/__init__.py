"""The tiermem daemon.

Layers (see docs/architecture.md): ``api`` (thin gRPC servicers), ``services``
(transport-free rules), ``catalog`` (durable metadata plus compact in-memory
index), ``tiers`` (storage engines per tier), ``storage`` (RocksDB handle).
``app.Daemon`` is the composition root used by the CLI and tests alike.
"""
