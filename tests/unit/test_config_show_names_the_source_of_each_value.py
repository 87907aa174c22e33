"""`tiermem config show`: the effective config with the layer that set each
value (flag > env > file > default), without a daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiermem.cli.main import main
from tiermem.server.config_sources import explain_config


def _toml(tmp_path: Path) -> Path:
    path = tmp_path / "tiermem.toml"
    path.write_text(
        'data_dir = "/srv/file"\n[server]\nmax_workers = 8\nlisten = "127.0.0.1:7000"\n'
        '[tiers.dram]\ncapacity_bytes = "256MiB"\n'
    )
    return path


def test_each_value_is_attributed_to_the_highest_layer_that_sets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERMEM_SERVER__MAX_WORKERS", "16")
    monkeypatch.setenv("TIERMEM_TIERS__SSD__FSYNC", "false")
    config, values = explain_config(_toml(tmp_path), {"server": {"listen": "127.0.0.1:0"}})
    by_key = {v.key: v for v in values}
    assert (by_key["server.listen"].value, by_key["server.listen"].source) == (
        "127.0.0.1:0",
        "flag",
    )
    assert by_key["server.max_workers"].value == 16
    assert by_key["server.max_workers"].source == "env"
    assert by_key["server.max_workers"].origin == "TIERMEM_SERVER__MAX_WORKERS"
    assert by_key["tiers.ssd.fsync"].source == "env"
    assert by_key["tiers.dram.capacity_bytes"].value == 256 << 20
    assert by_key["tiers.dram.capacity_bytes"].source == "file"
    assert by_key["data_dir"].source == "file"
    assert by_key["tiers.dram.high_watermark"].source == "default"
    assert by_key["tiers.dram.capacity_bytes"].description
    # The shown values are the config serve would run with.
    assert config.server.max_workers == 16 and str(config.data_dir) == "/srv/file"
    assert len(values) == len({v.key for v in values}) > 30


def test_a_whole_section_set_as_json_in_the_environment_counts_for_its_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIERMEM_TIERS", '{"ssd": {"fsync": false}}')
    _, values = explain_config(None, {})
    fsync = next(v for v in values if v.key == "tiers.ssd.fsync")
    assert (fsync.value, fsync.source, fsync.origin) == (False, "env", "TIERMEM_TIERS")


def test_cli_prints_a_table_and_json_and_rejects_bad_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = _toml(tmp_path)
    monkeypatch.setenv("TIERMEM_LOGGING__LEVEL", "DEBUG")
    cmd = ["config", "show", "--config", str(toml)]
    assert main([*cmd, "--log-json"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert lines["logging.level"].endswith("env (TIERMEM_LOGGING__LEVEL)")
    assert lines["logging.json_format"].endswith("flag (command line)")
    assert "268435456 (256.0 MiB)" in lines["tiers.dram.capacity_bytes"]  # resolved, with units
    assert lines["tiers.dram.capacity_bytes"].endswith(f"file ({toml})")
    assert main([*cmd, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["server.max_workers"] == {"value": 8, "source": "file", "origin": str(toml)}
    monkeypatch.setenv("TIERMEM_TIERS__DRAM__HIGH_WATERMARK", "7")
    assert main(cmd) == 2
    assert "high_watermark" in capsys.readouterr().err
