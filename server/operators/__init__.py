"""Operators ("instinct register"): native functions the daemon runs next to the
data with zero model tokens. ``registry`` holds them, ``runner`` calls them
under time and size limits, ``builtins`` provides the standard set; third
parties add more through the entry-point group ``tiermem.operators``."""
