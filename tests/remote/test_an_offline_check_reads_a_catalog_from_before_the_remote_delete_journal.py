"""The journal of remote deletes is a new column family of the catalog
(``remote_deletes``). A data directory last written by a version without it
must still be checked offline (``tiermem fsck --data-dir``, a read-only open,
typically run after an upgrade before the daemon starts): RocksDB refuses a
read-only open that names a column family the directory does not have, so the
check could not run. A read-only open now opens the column families the
directory has."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from tiermem.server.services.integrity import check_offline
from tiermem.server.storage.rocks import COLUMN_FAMILIES, RocksStore


def test_a_catalog_without_the_journal_is_checked_offline(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog"
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    older = [name for name in COLUMN_FAMILIES if name != "remote_deletes"]
    db = Rdict(str(catalog), options=opts, column_families={n: opts for n in older})
    db.close()
    report = check_offline(tmp_path)
    assert report.objects_checked == 0
    rocks = RocksStore(catalog, read_only=True)
    try:
        assert rocks.get("objects", b"absent") is None
    finally:
        rocks.close()
    RocksStore(catalog).close()  # a daemon's read-write open adds the column family
    rocks = RocksStore(catalog, read_only=True)
    try:
        assert rocks.get("remote_deletes", b"absent") is None
    finally:
        rocks.close()
