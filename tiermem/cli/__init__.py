"""The ``tiermem`` command line."""
