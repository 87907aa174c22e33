"""An upload stream is written and hashed by two worker threads; checkpoints
happen on the writer once the bytes are written; a write failure forgets what
was received past the bytes really written, so a resume continues from there
and the finished content is exact."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.server.blobs.uploads import UploadTable
from tiermem.v1 import blob_records_pb2 as rec_pb
from tiermem.v1 import blobs_pb2


def table(tmp_path: Path, records: list[rec_pb.UploadRecord]) -> UploadTable:
    return UploadTable(
        tmp_path / "uploads", block_bytes=MiB, head_max_bytes=1024, checkpoint_bytes=2 * MiB,
        ttl_s=60, max_uploads=4, persist=lambda rec, sync: records.append(rec),
        forget=lambda upload_id: None,
    )  # fmt: skip


def header(size: int) -> blobs_pb2.BeginUploadRequest:
    return blobs_pb2.BeginUploadRequest(
        ref=blobs_pb2.BlobRef(namespace="default", key="k"), size_bytes=size
    )


def test_checkpoints_record_only_written_bytes(tmp_path: Path) -> None:
    records: list[rec_pb.UploadRecord] = []
    uploads = table(tmp_path, records)
    data = pattern(9 * MiB, seed=50)
    upload = uploads.begin(header(len(data)), "")
    with uploads.writing(upload.upload_id, "") as up:
        for start in range(0, len(data), MiB):
            uploads.write(up, memoryview(data[start : start + MiB]))
    offsets = [r.durable_offset for r in records]
    assert offsets == sorted(offsets) and offsets[-1] == len(data)
    assert {2 * MiB, 4 * MiB, 6 * MiB, 8 * MiB} <= set(offsets)  # from the writer thread
    digest, _sums = upload.hashed().finish()
    assert digest == hashlib.sha256(data).digest()
    assert upload.path.read_bytes() == data


def test_a_failed_write_rolls_back_to_the_written_bytes(tmp_path: Path) -> None:
    records: list[rec_pb.UploadRecord] = []
    uploads = table(tmp_path, records)
    data = pattern(6 * MiB, seed=51)
    upload = uploads.begin(header(len(data)), "")
    with uploads.writing(upload.upload_id, "") as up:
        uploads.write(up, memoryview(data[:MiB]))
        up.hashed()  # the first MiB is written
    with pytest.raises(OSError), uploads.writing(upload.upload_id, "") as up:
        uploads.resume_at(up, MiB)
        os.close(up.fd)  # the disk goes away under the writer
        up.fd = os.open(os.devnull, os.O_RDONLY)  # writes now fail (EBADF)
        for start in range(MiB, 4 * MiB, MiB):
            uploads.write(up, memoryview(data[start : start + MiB]))
        up.hashed()
    assert upload.received == MiB  # nothing past what was really written
    upload.close()
    with uploads.writing(upload.upload_id, "") as up:
        uploads.resume_at(up, upload.received)
        for start in range(MiB, len(data), MiB):
            uploads.write(up, memoryview(data[start : start + MiB]))
    digest, _sums = upload.hashed().finish()
    assert digest == hashlib.sha256(data).digest()
    assert upload.path.read_bytes() == data
