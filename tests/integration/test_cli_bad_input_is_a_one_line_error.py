"""CLI commands given input they cannot use exit non-zero with a one-line
``tiermem: ...`` message, not a traceback: a file that does not exist (to
put, or as the TLS CA), a negative count or ttl (protobuf's unsigned fields
raised ValueError)."""

from __future__ import annotations

import pytest

from tiermem.cli.main import main
from tiermem.server.app import Daemon


@pytest.mark.parametrize(
    "argv",
    [
        ["put", "k", "/nonexistent/file"],
        ["stat", "k", "--tls-ca", "/nonexistent/ca.pem"],
        ["fsck", "--tls-ca", "/nonexistent/ca.pem"],
        ["fsck", "--max", "-1"],
        ["put", "--ttl", "-5", "k", "/etc/hostname"],
    ],
    ids=["missing file", "missing CA", "fsck missing CA", "negative max", "negative ttl"],
)
def test_bad_input_is_one_line(
    daemon: Daemon, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = main([*argv, "--addr", daemon.address])
    except SystemExit as exc:  # argparse's own usage error is fine too
        rc = exc.code
    assert rc not in (0, None)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()
