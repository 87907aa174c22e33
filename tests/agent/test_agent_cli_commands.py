import json

import pytest

from tiermem.cli.main import main
from tiermem.server.app import Daemon


def test_session_scratch_and_op_commands(
    adaemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = ["--addr", adaemon.address]
    assert main(["session", "open", *addr, "--label", "main", "--quota", "dram=1048576"]) == 0
    root = capsys.readouterr().out.strip()
    assert main(["session", "open", *addr, "--parent", root, "--grant", "kv:prefix/"]) == 0
    child = capsys.readouterr().out.strip()
    assert main(["scratch", "append", *addr, root, "wall to the north", "--tag", "wall"]) == 0
    assert (
        main(["scratch", "append", *addr, root, "go east", "--kind", "decision", "--key", "plan"])
        == 0
    )
    assert main(["scratch", "flush", *addr]) == 0
    assert main(["session", "ls", *addr]) == 0
    out = capsys.readouterr().out
    assert root in out and child in out
    assert main(["session", "close", *addr, child, "--result", "east is open"]) == 0
    assert "closed 1 session(s)" in capsys.readouterr().out
    assert main(["scratch", "replay", *addr, root, "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["payload"] for x in lines] == ["wall to the north", "go east", "east is open"]
    assert main(["scratch", "query", *addr, root, "north wall", "-k", "1"]) == 0
    assert "wall to the north" in capsys.readouterr().out
    assert main(["op", "ls", *addr]) == 0
    assert "grid.shortest_path" in capsys.readouterr().out
    assert main(["op", "invoke", *addr, "math.eval", '{"expression": "6*7"}']) == 0
    assert json.loads(capsys.readouterr().out) == {"value": 42}
    assert main(["session", "show", *addr, root]) == 0
    assert "ledger:" in capsys.readouterr().out
    assert main(["op", "invoke", *addr, "math.eval", '{"expression": "1/0"}']) == 1
