"""A collection's memory (``State.memory_bytes``, which sums its payload
columns) is read without the collection's lock: by the memory budget when
another collection loads (a request) and by the maintenance pass. An upsert
that adds a new payload field meanwhile used to make that sum raise
"dictionary changed size during iteration"."""

import threading

from tiermem.server.vectors.payloads import PayloadColumns
from tiermem.v1 import vectors_pb2


def _payload(**fields: int) -> vectors_pb2.VectorPayload:
    out = vectors_pb2.VectorPayload()
    for name, value in fields.items():
        out.fields[name].i = value
    return out


def test_a_field_added_while_memory_is_summed_does_not_break_the_sum() -> None:
    columns = PayloadColumns()
    columns.grow(4)
    columns.set(0, _payload(year=2021))
    added = threading.Event()

    def upsert_new_field() -> None:  # another thread's upsert, under its own lock
        columns.set(1, _payload(month=3))
        added.set()

    class Probe:
        """A column whose size, when read, lets the upsert run (as a thread
        switch between two items of the sum would)."""

        @property
        def nbytes(self) -> int:
            threading.Thread(target=upsert_new_field).start()
            assert added.wait(10)
            return 0

    columns.num["probe"] = Probe()  # type: ignore[assignment]
    total = columns.nbytes
    del columns.num["probe"]
    assert total >= columns.num["year"].nbytes
    assert columns.nbytes == total + columns.num["month"].nbytes  # counted once it is there
