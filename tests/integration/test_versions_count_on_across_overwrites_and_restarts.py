"""An object's version counts its puts: 1 when new, one more for each
overwrite, whether the overwrite is a gRPC put or part of a batch on the data
plane, and also after a restart (the index then does not know the version and
the record is read instead)."""

from collections.abc import Callable

from tiermem.client import Client, Kind
from tiermem.client.fastpath import PutItem
from tiermem.server.app import Daemon


def put_batch(client: Client, keys: list[str], data: bytes) -> list[int]:
    infos = client.dataplane.put_many([PutItem(Kind.SCRATCH, k, data) for k in keys])
    return [info.version for info in infos]


def test_versions_count_on_through_both_commit_paths_and_a_restart(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    with Client(daemon.address, timeout_s=30) as client:
        assert client.put(Kind.SCRATCH, "a", b"1").version == 1
        assert client.put(Kind.SCRATCH, "a", b"2").version == 2
        assert put_batch(client, ["a", "b"], b"3") == [3, 1]
        assert put_batch(client, ["a", "b"], b"4") == [4, 2]
        assert client.put(Kind.SCRATCH, "b", b"5").version == 3
    daemon.stop()
    again = make_daemon()  # the same data directory: recovery rebuilds the index
    with Client(again.address, timeout_s=30) as client:
        assert client.stat(Kind.SCRATCH, "a").version == 4
        assert client.put(Kind.SCRATCH, "a", b"6").version == 5
        assert put_batch(client, ["a", "b"], b"7") == [6, 4]
        assert client.get(Kind.SCRATCH, "b") == b"7"
