"""The `tiermem vec` commands against a real daemon."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tiermem.cli.main import main
from tiermem.server.app import Daemon


def test_vec_commands_round_trip(
    vdaemon: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = ["--addr", vdaemon.address]
    assert main(["vec", "create", "docs", "--dim", "3", "--metric", "cosine", *addr]) == 0
    vectors = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    np.save(tmp_path / "v.npy", vectors)
    assert main(["vec", "upsert", "docs", str(tmp_path / "v.npy"), "--first-id", "10", *addr]) == 0
    rows = [{"id": 20, "vector": [1, 1, 0], "payload": {"lang": "en"}}]
    (tmp_path / "v.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["vec", "upsert", "docs", str(tmp_path / "v.jsonl"), *addr]) == 0
    capsys.readouterr()

    assert (
        main(["vec", "search", "docs", "--query", "1,0.9,0", "-k", "2", "--payloads", *addr]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:3] == ["0", "0", "20"] and '"lang": "en"' in out[1]
    assert out[2].split()[2] == "10"
    assert main(["vec", "search", "docs", "--query", "1,1,1", "--where", "lang=en", *addr]) == 0
    assert [line.split()[2] for line in capsys.readouterr().out.splitlines()[1:]] == ["20"]

    assert main(["vec", "ls", *addr]) == 0
    listing = capsys.readouterr().out
    assert "docs" in listing and "COSINE" in listing and " 4 " in listing
    assert main(["vec", "rm", "docs", "10", "99", *addr]) == 0
    assert "deleted 1 of 2" in capsys.readouterr().out
    assert main(["vec", "describe", "docs", *addr]) == 0
    assert "count:" in capsys.readouterr().out
    assert main(["vec", "drop", "docs", *addr]) == 0
    assert main(["vec", "drop", "docs", *addr]) == 1
    assert main(["vec", "search", "docs", "--query", "1,0,0", *addr]) == 1
    assert "not found" in capsys.readouterr().err
