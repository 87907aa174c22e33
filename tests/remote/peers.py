"""The remote stores the remote tier runs on, started on 127.0.0.1 for tests and
benchmarks and stopped by PID: a three-node Redis Cluster (Debian redis-server)
and Mooncake Store (``mooncake_master`` plus one ``mooncake_client`` storage
node holding the memory segment, from the ``mooncake-transfer-engine`` wheel).

Both can be killed (SIGKILL, like a crash) and started again on the same ports;
neither persists data, so what they held is gone after a restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Self

from bench.common import free_port, wait_port

MiB = 1 << 20


def free_cluster_port() -> int:
    """A free port P <= 55535 whose cluster bus port P + 10000 is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port > 55535:
            port = 20000 + port % 30000
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("found no free pair of ports for a Redis Cluster node")


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited: gone, or a zombie. redis-server daemonizes,
    so its parent is the machine's init, which may reap it only seconds later
    (here, PID 1 reaps about every 2 s): a signal 0 still reaches the zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: signal 0 says whether it is there at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _stop_pid(pid: int, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _exited(pid):
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


class RedisCluster:
    """Three cluster-mode redis-server nodes (no replicas, no persistence)."""

    def __init__(self, directory: Path, nodes: int = 3, maxmemory_bytes: int = 0) -> None:
        self.directory = directory
        self.ports: list[int] = []
        while len(self.ports) < nodes:
            port = free_cluster_port()
            if port not in self.ports:
                self.ports.append(port)
        self.maxmemory_bytes = maxmemory_bytes
        self.pids: dict[int, int] = {}
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def nodes(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def config(self) -> dict[str, Any]:
        """``tiers.remote`` overrides for a daemon using this cluster."""
        return {"backend": "redis_cluster", "redis": {"nodes": self.nodes}}

    def _start_node(self, port: int) -> None:
        pidfile = self.directory / f"redis-{port}.pid"
        pidfile.unlink(missing_ok=True)
        cmd = [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "yes", "--pidfile", str(pidfile),
            "--dir", str(self.directory), "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "2000",
            "--logfile", str(self.directory / f"redis-{port}.log"),
        ]  # fmt: skip
        if self.maxmemory_bytes:
            cmd += ["--maxmemory", str(self.maxmemory_bytes), "--maxmemory-policy", "allkeys-lru"]
        subprocess.run(cmd, check=True)
        try:
            wait_port(port, timeout_s=10)
        except TimeoutError:
            log = (self.directory / f"redis-{port}.log").read_text()[-2000:]
            raise RuntimeError(f"redis-server on port {port} did not start:\n{log}") from None
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                self.pids[port] = int(pidfile.read_text())
                return
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on port {port} wrote no pid file")

    def start(self) -> Self:
        for port in self.ports:
            self._start_node(port)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *self.nodes, "--cluster-replicas", "0",
             "--cluster-yes"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.wait_ok()
        return self

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Until every node reports cluster_state:ok (about 2 s after a start)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ok = all(
                "cluster_state:ok"
                in subprocess.run(
                    ["redis-cli", "-p", str(p), "cluster", "info"], capture_output=True, text=True
                ).stdout
                for p in self.ports
            )
            if ok:
                return
            time.sleep(0.1)
        raise TimeoutError("the Redis Cluster did not reach cluster_state:ok")

    def kill(self) -> None:
        """SIGKILL every node (a crash: the data is gone)."""
        for port in list(self.pids):
            _stop_pid(self.pids.pop(port), signal.SIGKILL)

    def kill_node(self, port: int) -> None:
        """SIGKILL one node; the others answer CLUSTERDOWN once they mark it
        failed (``wait_state("fail")``): its slots have no replica here."""
        _stop_pid(self.pids.pop(port), signal.SIGKILL)

    def wait_state(self, state: str, timeout_s: float = 30.0) -> None:
        """Until every running node reports ``cluster_state:<state>``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(
                f"cluster_state:{state}"
                in subprocess.run(
                    ["redis-cli", "-p", str(p), "cluster", "info"], capture_output=True, text=True
                ).stdout
                for p in self.pids
            ):
                return
            time.sleep(0.1)
        raise TimeoutError(f"the Redis Cluster did not reach cluster_state:{state}")

    def restart(self) -> None:
        """Start the killed nodes again on their ports (the cluster layout is kept
        in their nodes-*.conf files; the data is not)."""
        for port in self.ports:
            if port not in self.pids:
                self._start_node(port)
        self.wait_ok()

    def stop(self) -> None:
        for port in list(self.pids):
            _stop_pid(self.pids.pop(port))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mooncake_binary(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(found).exists():
        raise FileNotFoundError(f"{name} is not installed (pip install '.[remote]')")
    return found


class MooncakeStore:
    """``mooncake_master`` (HTTP metadata server inside) plus one storage node
    (``mooncake_client``) contributing ``segment_bytes`` of memory."""

    def __init__(self, directory: Path, segment_bytes: int = 512 * MiB) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.rpc, self.http, self.metrics_port, self.node_port = (free_port() for _ in range(4))
        self.master: subprocess.Popen[bytes] | None = None
        self.node: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")

    def config(self) -> dict[str, Any]:
        """``tiers.remote`` overrides for a daemon using this store."""
        return {
            "backend": "mooncake",
            "mooncake": {
                "master": f"127.0.0.1:{self.rpc}",
                "metadata_server": f"http://127.0.0.1:{self.http}/metadata",
                "local_buffer_bytes": 128 * MiB,
            },
        }

    def _log(self, name: str) -> Any:
        return open(self.directory / f"{name}.log", "ab")

    def start(self) -> Self:
        env = {**os.environ, "MC_TCP_BIND_ADDRESS": "127.0.0.1"}
        self.master = subprocess.Popen(
            [mooncake_binary("mooncake_master"), f"--rpc_port={self.rpc}",
             "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
             "--http_metadata_server_host=127.0.0.1",
             f"--http_metadata_server_port={self.http}", "--metrics_host=127.0.0.1",
             f"--metrics_port={self.metrics_port}"],
            stdout=self._log("master"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        wait_port(self.rpc)
        wait_port(self.http)
        self.node = subprocess.Popen(
            [mooncake_binary("mooncake_client"), "--host=127.0.0.1",
             f"--port={self.node_port}", f"--global_segment_size={self.segment_bytes}",
             f"--master_server_address=127.0.0.1:{self.rpc}",
             f"--metadata_server=http://127.0.0.1:{self.http}/metadata", "--protocol=tcp"],
            stdout=self._log("storage"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        wait_port(self.node_port)
        return self

    def kill(self) -> None:
        """SIGKILL the master and the storage node (a crash: the data is gone)."""
        for proc in (self.node, self.master):
            if proc is not None:
                proc.kill()
                proc.wait()
        self.master = self.node = None

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        # our children: wait() reaps them (polling a PID would see the zombie)
        for proc in (self.node, self.master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.master = self.node = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def mooncake_unavailable() -> str:
    """Why Mooncake cannot run here ("" if it can)."""
    try:
        import mooncake.store  # noqa: F401
    except Exception as exc:  # a missing wheel or missing verbs libraries
        return f"mooncake.store does not import: {type(exc).__name__}: {exc}"
    try:
        mooncake_binary("mooncake_master")
        mooncake_binary("mooncake_client")
    except FileNotFoundError as exc:
        return str(exc)
    return ""
