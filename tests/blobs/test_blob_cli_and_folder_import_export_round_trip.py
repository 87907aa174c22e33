"""``tiermem blob put|get|ls|rm|search`` and ``tiermem import|export DIR``: a
folder tree round-trips byte-exact, reruns skip what is done, a damaged local
copy is rewritten, and an import cut off mid-file resumes its upload."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tests.blobs.test_killed_uploads_resume_from_the_acknowledged_offset import (
    send_until_killed,
)
from tiermem.cli.blobs import ImportState
from tiermem.cli.main import main
from tiermem.client import Client
from tiermem.server.app import Daemon


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "readme.txt": b"a folder of things\n",
        "photos/cat.jpg": pattern(3 * MiB + 17, seed=30),
        "photos/copy-of-cat.jpg": pattern(3 * MiB + 17, seed=30),  # same bytes: stored once
        "audio/deep/er/clip.wav": pattern(200_000, seed=31),
        "empty.bin": b"",
        "names with spaces/ünïcode.md": "# héllo".encode(),
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_a_folder_tree_imports_and_exports_byte_exact(
    daemon: Daemon, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    files = make_tree(src)
    addr = ["--addr", daemon.address, "--no-progress"]
    state = ["--state", str(tmp_path / "state.json")]
    assert main(["import", str(src), "--prefix", "set/", "--tag", "batch1", *addr, *state]) == 0
    assert "imported 6 file(s), 0 already stored" in capsys.readouterr().out
    infos = {i.key: i for i in client.blobs.list(prefix="set/")}
    assert infos.keys() == {f"set/{k}" for k in files}
    assert infos["set/photos/cat.jpg"].media_type == "image/jpeg"
    assert infos["set/readme.txt"].tags == ("batch1",)
    assert infos["set/photos/cat.jpg"].content_refs == 2
    assert client.blobs.stats().contents == 5

    assert main(["export", str(out), "--prefix", "set/", *addr]) == 0
    assert "exported 6 blob(s)" in capsys.readouterr().out
    assert tree(out) == files

    # reruns are resumable: nothing is sent or written again
    assert main(["import", str(src), "--prefix", "set/", *addr, *state]) == 0
    assert "imported 0 file(s), 6 already stored" in capsys.readouterr().out
    (out / "photos/cat.jpg").write_bytes(b"damaged local copy")
    assert main(["export", str(out), "--prefix", "set/", *addr]) == 0
    assert "exported 1 blob(s), 5 already present" in capsys.readouterr().out
    assert tree(out) == files
    assert not list(out.rglob("*.part"))


def test_an_import_cut_off_mid_file_resumes_its_upload(
    daemon: Daemon, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    big = pattern(12 * MiB, seed=32)
    path = src / "big.bin"
    path.write_bytes(big)
    # what an import killed during this file leaves: an upload with bytes acknowledged
    # (the daemon makes them durable when the stream dies) and its id in the state file
    upload_id = client.blobs.begin("big.bin", len(big)).upload_id
    send_until_killed(client, upload_id, big, 9 * MiB)
    assert 0 < client.blobs.status(upload_id).acknowledged_offset <= 9 * MiB
    state_path = tmp_path / "state.json"
    ImportState(state_path).remember("big.bin", path.stat(), upload_id)

    argv = ["import", str(src), "--addr", daemon.address, "--state", str(state_path), "--progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "imported 1 file(s)" in captured.out
    assert "100.0%" in captured.err  # the progress bar
    assert client.blobs.get("big.bin") == big
    with pytest.raises(Exception, match="already finished"):
        client.blobs.status(upload_id)  # the import finished that very upload
    assert not state_path.exists()  # nothing left in flight
    # a stale state entry (the upload expired meanwhile) falls back to a new upload
    path.write_bytes(big[::-1])
    ImportState(state_path).remember("big.bin", path.stat(), "no-such-upload")
    assert main(argv) == 0
    assert client.blobs.get("big.bin") == big[::-1]


def test_blob_subcommands(
    daemon: Daemon, client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = ["--addr", daemon.address]
    data = pattern(2 * MiB + 5, seed=33)
    src = tmp_path / "scan.tiff"
    src.write_bytes(data)
    np.save(tmp_path / "q.npy", np.array([1, 0, 0], dtype=np.float32))
    argv = ["blob", "put", str(src), "--tag", "scan", "--embedding", "e=1,0,0", *addr]
    assert main(argv) == 0
    assert "stored default/scan.tiff: 2097157 bytes" in capsys.readouterr().out
    assert main(["blob", "put", str(src), "other.tiff", "--embedding", "e=0,1,0", *addr]) == 0
    assert client.blobs.stat("scan.tiff").media_type == "image/tiff"

    dest = tmp_path / "back.tiff"
    assert main(["blob", "get", "scan.tiff", str(dest), *addr]) == 0
    assert dest.read_bytes() == data
    assert main(["blob", "get", "scan.tiff", str(dest), "--offset", "5", "--length", "9",
                 *addr]) == 0  # fmt: skip
    assert dest.read_bytes() == data[5:14]

    capsys.readouterr()
    assert main(["blob", "ls", "-l", "--tag", "scan", *addr]) == 0
    listing = capsys.readouterr().out
    assert "scan.tiff" in listing and "other.tiff" not in listing and "refs=2" in listing

    assert main(["blob", "search", "--vector-file", str(tmp_path / "q.npy"), "--space", "e",
                 "-k", "1", *addr]) == 0  # fmt: skip
    assert capsys.readouterr().out.split()[-1] == "scan.tiff"
    assert main(["blob", "search", "--vector", "0,1,0", "--space", "e", "-k", "1", *addr]) == 0
    assert capsys.readouterr().out.split()[-1] == "other.tiff"

    assert main(["blob", "rm", "scan.tiff", "missing.bin", *addr]) == 1
    captured = capsys.readouterr()
    assert "deleted scan.tiff" in captured.out and "missing.bin not found" in captured.err
    assert main(["blob", "get", "scan.tiff", str(dest), *addr]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    assert json.dumps([i.key for i in client.blobs.list()]) == '["other.tiff"]'
