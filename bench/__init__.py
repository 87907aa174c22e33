"""Benchmarks: each module runs peers side by side and writes bench/results/<name>.json."""
