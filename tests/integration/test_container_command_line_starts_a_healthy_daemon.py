"""The image's command line, run as a plain process with the image's and the
compose file's environment, starts a daemon that its own HEALTHCHECK command
reports healthy, logs JSON lines, serves metrics and stops cleanly on SIGTERM
(what `docker stop` sends).

No Docker engine runs here, so container paths are mapped to this checkout:
/opt/tiermem (the venv the build stage makes with .ci/install-python) is the
.venv `make venv` made with the same script, COPY'd files are read where they
are copied from, the data volume is a temporary folder. Three values are
overridden for a shared test machine: both listen addresses (port 0 on
127.0.0.1 instead of fixed ports on every interface) and the DRAM budget
(64 MiB instead of 1 GiB of /dev/shm)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from tests.dockerfile import parse
from tests.helpers import REPO

VENV = Path(sys.executable).parent.parent


def _container_command(data_dir: Path) -> tuple[list[str], dict[str, str], list[str]]:
    final = parse(REPO / "Dockerfile").stages[-1]
    # Where the image's files come from in this checkout.
    paths = {"/opt/tiermem": str(VENV)}
    for sources, destination, origin in final.copies():
        if not origin:
            paths[destination] = str(REPO / sources[0])
    volume = json.loads(final.last("VOLUME"))[0]
    paths[volume] = str(data_dir)

    def local(value: str) -> str:
        for container_path, here in sorted(paths.items(), key=lambda kv: -len(kv[0])):
            value = value.replace(container_path, here)
        return value

    env = {"HOME": str(data_dir.parent), "LANG": "C.UTF-8"}
    for key, value in final.env().items():
        env[key] = local(value.replace("$PATH", "/usr/bin:/bin"))
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text())
    env.update({k: str(v) for k, v in compose["services"]["tiermem"]["environment"].items()})
    env.update(
        TIERMEM_DATA_DIR=str(data_dir),
        TIERMEM_SERVER__LISTEN="127.0.0.1:0",
        TIERMEM_METRICS__LISTEN="127.0.0.1:0",
        TIERMEM_TIERS__DRAM__CAPACITY_BYTES="64MiB",
    )
    command = compose["services"]["tiermem"].get("command") or final.exec_form("CMD")
    argv = [local(a) for a in final.exec_form("ENTRYPOINT") + command]
    health = [local(a) for a in final.healthcheck()]
    return argv, env, health


def test_container_command_line_serves_and_passes_its_health_check(tmp_path: Path) -> None:
    data_dir = tmp_path / "var-lib-tiermem"
    data_dir.mkdir()
    argv, env, health = _container_command(data_dir)
    executable = shutil.which(argv[0], path=env["PATH"])
    assert executable is not None and executable.startswith(str(VENV)), env["PATH"]
    assert argv[1:3] == ["serve", "--config"] and Path(argv[3]).is_file()
    stderr = (tmp_path / "stderr.log").open("w+")
    proc = subprocess.Popen(
        [executable, *argv[1:]], env=env, cwd=data_dir, stdout=subprocess.PIPE, stderr=stderr,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("listening on "), (lines, (tmp_path / "stderr.log").read_text())
        address = lines[0].split()[-1]
        metrics = lines[1].split()[-1]
        # The image's HEALTHCHECK, pointed at the port this process got.
        health[health.index("--addr") + 1] = address
        check = subprocess.run(
            [shutil.which(health[0], path=env["PATH"]) or health[0], *health[1:]],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert check.returncode == 0, check.stderr
        assert check.stdout.strip().endswith("SERVING")
        with urllib.request.urlopen(metrics, timeout=10) as reply:
            assert b"tiermem_ready 1.0" in reply.read()
        assert (data_dir / "catalog").is_dir()  # state went to the volume
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    stderr.seek(0)
    logs = [json.loads(line) for line in stderr.read().splitlines() if line.strip()]
    assert any("serving on" in entry["msg"] for entry in logs)
    assert any(entry["msg"] == "tiermem stopped" for entry in logs)
    assert os.listdir(data_dir)
