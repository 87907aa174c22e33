"""Configuration that cannot work is refused with its reason: an empty token,
two entries with one token (the later one silently took the earlier one's
grants), namespace names the daemon would refuse (in ``namespaces``, a token's
grants or ``limits.namespaces``: they never applied). A start that fails says
why (the cleanup raised an AttributeError over the real error), ``tiermem
serve`` prints it without a traceback, and the Unix socket's missing folder is
created usable (under the socket's umask it got mode 0600)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tiermem.server.api import bulk_session
from tiermem.server.app import Daemon
from tiermem.server.config import load_config

BAD: dict[str, dict[str, Any]] = {
    "an empty token": {"security": {"tokens": [{"name": "a", "token": ""}]}},
    "one token twice": {
        "security": {
            "tokens": [
                {"name": "a", "token": "same", "namespaces": ["a"], "roles": ["read"]},
                {"name": "ops", "token": "same", "roles": ["admin"]},
            ]
        }
    },
    "one name twice": {
        "security": {"tokens": [{"name": "a", "token": "t1"}, {"name": "a", "token": "t2"}]}
    },
    "a bad namespace": {"namespaces": ["a/b"]},
    "a bad namespace in a token": {
        "security": {"tokens": [{"name": "a", "token": "t", "namespaces": ["a/b"]}]}
    },
    "a bad namespace in limits": {"limits": {"namespaces": {"a/b": {"max_bytes": 1}}}},
}


@pytest.mark.parametrize("overrides", BAD.values(), ids=BAD)
def test_a_config_that_cannot_work_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        load_config(**overrides)


def test_a_failed_start_raises_its_own_error(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object, **_kw: object) -> None:
        raise RuntimeError("the bulk sessions could not be made")

    monkeypatch.setattr(bulk_session.BulkSessions, "__init__", refuse)
    with pytest.raises(RuntimeError, match="could not be made"):
        make_daemon()


def test_serve_says_why_it_cannot_start(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TIERMEM_SECURITY__TLS__CERT_FILE": str(tmp_path / "missing.pem"),
        "TIERMEM_SECURITY__TLS__KEY_FILE": str(tmp_path / "missing.key"),
    }
    cmd = [sys.executable, "-m", "tiermem.cli.main", "serve", "--data-dir", str(tmp_path / "d"),
           "--listen", "127.0.0.1:0", "--metrics-listen", ""]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "tiermem: cannot start" in done.stderr and "No such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_unix_sockets_new_folder_can_be_entered(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    sock = tmp_path / "run" / "tiermem" / "t.sock"
    make_daemon(server={"listen": "127.0.0.1:0", "unix_socket": str(sock)})
    assert stat.S_IMODE(os.stat(sock.parent).st_mode) & stat.S_IXUSR
