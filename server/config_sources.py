"""Where each value of the effective config came from (``tiermem config show``).

The config is loaded exactly as ``tiermem serve`` loads it (:func:`load_config`);
then each leaf is attributed to the highest layer that sets it: ``flag``
(command-line overrides), ``env`` (``TIERMEM_*``), ``file`` (the TOML file) or
``default``. A layer that sets a whole section (e.g. ``TIERMEM_TIERS`` as JSON)
counts for every leaf below it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource

from tiermem.server.config import Config, load_config

#: Leaves whose names contain one of these are shown masked.
SECRET_MARKERS = ("token", "secret", "password")


@dataclass(frozen=True, slots=True)
class ConfigValue:
    key: str  # dotted, e.g. "tiers.dram.capacity_bytes"
    value: Any  # JSON-compatible
    source: str  # "flag", "env", "file" or "default"
    origin: str  # the flag, variable or file that set it ("" for defaults)
    description: str


def explain_config(
    path: Path | None, overrides: dict[str, Any]
) -> tuple[Config, list[ConfigValue]]:
    """The effective config and, for every leaf, its value and source. Raises
    like :func:`load_config` on an invalid config or a missing file."""
    config = load_config(path, **overrides)
    layers: list[tuple[str, dict[str, Any], str]] = [
        ("flag", overrides, "command line"),
        ("env", EnvSettingsSource(Config)(), ""),
    ]
    if path is not None:
        layers.append(("file", TomlConfigSettingsSource(Config, toml_file=path)(), str(path)))
    docs = _descriptions(Config)
    out: list[ConfigValue] = []
    for key, value in _leaves(config.model_dump(mode="json")):
        source, origin = "default", ""
        for name, layer, where in layers:
            setter = _set_by(layer, key.split("."))
            if setter is not None:
                source = name
                origin = _env_name(setter) if name == "env" else where
                break
        if any(marker in key.rsplit(".", 1)[-1] for marker in SECRET_MARKERS) and value:
            value = "***"
        out.append(ConfigValue(key, value, source, origin, docs.get(key, "")))
    return config, out


def _env_name(parts: list[str]) -> str:
    """The variable that set ``parts``: itself, or the section variable above it
    that carried JSON."""
    present = {name.upper() for name in os.environ}
    for depth in range(len(parts), 0, -1):
        name = "TIERMEM_" + "__".join(parts[:depth]).upper()
        if name in present:
            return name
    return "TIERMEM_" + "__".join(parts).upper()


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            out += _leaves(value, key + ".")
        else:
            out.append((key, value))
    return out


def _set_by(layer: dict[str, Any], parts: list[str]) -> list[str] | None:
    """The path within ``layer`` that sets the leaf ``parts`` (itself or a
    section above it), or None if the layer does not set it."""
    node: Any = layer
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            return parts[:depth]
        matches = [k for k in node if k.lower() == part]
        if not matches:
            return None
        node = node[matches[0]]
    return parts


def _descriptions(model: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            out.update(_descriptions(annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = (field.description or "").split("\n")[0]
    return out
