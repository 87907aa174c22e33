"""Object metadata: durable records in RocksDB plus a compact in-memory index."""
