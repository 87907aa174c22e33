"""The agent scratchpad: a DRAM write-back buffer behind a group-commit log,
flushed in batches to RocksDB and to a memory index (DESIGN.md §6)."""
