"""Test helpers: a daemon in a subprocess (for kill -9), free-form configs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]


class DaemonProcess:
    """`tiermem serve` in a child process, as an operator would run it."""

    def __init__(
        self, data_dir: Path, config: Path | None = None, env: dict[str, str] | None = None
    ):
        self.data_dir = data_dir
        self.config = config
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self.log_path = data_dir.parent / f"{data_dir.name}-daemon.log"

    def start(self, timeout_s: float = 60.0) -> str:
        cmd = [
            sys.executable, "-m", "tiermem.cli.main", "serve",
            "--data-dir", str(self.data_dir), "--listen", "127.0.0.1:0", "--metrics-listen", "",
        ]  # fmt: skip
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        log: IO[str] = open(self.log_path, "a")  # noqa: SIM115 - kept open for the child
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env, cwd=REPO
        )
        deadline = time.monotonic() + timeout_s
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening on "):
                self.address = line.split()[-1]
                return self.address
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError(f"daemon did not start; log:\n{self.log_path.read_text()[-4000:]}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
