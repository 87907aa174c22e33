"""Vector collections on faiss: index wrapper, slot maps and tombstones, payload
columns for filters, snapshots and the RocksDB operation log. The rules (what
is valid, when to snapshot, load or unload) live in ``services.vectors``."""
