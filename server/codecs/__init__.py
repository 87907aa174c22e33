"""Value codecs. ``lossy``: fp8 (e4m3) and int8 with per-channel scales for KV
blocks whose profile allows it (torch on the CPU)."""
