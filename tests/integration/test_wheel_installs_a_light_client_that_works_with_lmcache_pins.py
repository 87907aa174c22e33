"""`pip install .` (not editable) into a fresh venv gives a working `tiermem --help`
and client, with the oldest runtimes we support: lmcache pins grpcio 1.78 and
protobuf 6.x, so the generated code must import there."""

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import REPO
from tiermem.server.app import Daemon

OLDEST_RUNTIME = ["grpcio==1.78.0", "protobuf==6.31.1", "numpy<2.3"]


def run(*cmd: str, cwd: Path) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def test_wheel_in_a_fresh_venv_with_lmcache_pins(tmp_path: Path, daemon: Daemon) -> None:
    dist = tmp_path / "dist"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        str(dist),
        str(REPO),
        cwd=tmp_path,
    )
    wheel = next(dist.glob("tiermem-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("tiermem-")}
    assert tops == {"tiermem"}, tops  # no bare `server` or `client` package
    assert "tiermem/server/app.py" in names and "tiermem/v1/object_pb2.py" in names
    assert "tiermem/client/py.typed" in names

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    pip = str(venv / "bin" / "pip")
    run(pip, "install", "-q", *OLDEST_RUNTIME, str(wheel), cwd=tmp_path)
    assert "serve" in run(str(venv / "bin" / "tiermem"), "--help", cwd=tmp_path)
    script = (
        "import google.protobuf, grpc, tiermem.client as c;"
        "print(google.protobuf.__version__, grpc.__version__);"
        f"cl = c.Client('{daemon.address}');"
        "cl.put(c.Kind.BLOB, 'from-old-runtime', b'ok');"
        "print(cl.get(c.Kind.BLOB, 'from-old-runtime').decode())"
    )
    out = run(str(venv / "bin" / "python"), "-c", script, cwd=tmp_path)
    assert out.split() == ["6.31.1", "1.78.0", "ok"]
    # The client install does not drag in the server's dependencies.
    freeze = run(pip, "freeze", cwd=tmp_path)
    for heavy in ("torch", "faiss", "lancedb", "rocksdict"):
        assert heavy not in freeze.lower()
