"""A blob put from a stream that cannot seek (a pipe; ``tiermem blob put -``
fed by one) stores the stream's bytes. The client spooled it to a temporary
file and then read from the file's end: it stored an empty blob and said so
as if all was well."""

from __future__ import annotations

import os
import threading

from tiermem.client import Client


def test_a_pipe_is_stored_whole(client: Client) -> None:
    data = os.urandom(100_000)
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
    writer.start()
    with os.fdopen(r, "rb", buffering=0) as pipe:  # a FileIO on a pipe: not seekable
        info = client.blobs.put("p.bin", pipe)
    writer.join()
    assert info.size_bytes == len(data)
    assert client.blobs.get("p.bin") == data
