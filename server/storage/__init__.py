"""Durable key-value storage shared by the daemon's components (RocksDB)."""
