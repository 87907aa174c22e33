"""tiermem: a tiered memory daemon for LLM long-memory data.

The import namespace maps the repository's top-level folders: ``tiermem.server``
(the daemon), ``tiermem.client`` (light client library), ``tiermem.placement``
(pure placement policy) and ``tiermem.v1`` (generated wire contract).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
