"""A session service's RocksDB handle whose next batch commit fails once armed
(a failure, or a crash, right before a close's final write)."""

from __future__ import annotations

from typing import Any


class InjectedFailure(Exception):
    pass


class CommitFailsOnceWhenArmed:
    """Wraps the RocksDB handle; once ``armed``, the next batch commit raises
    ``InjectedFailure(message)`` and writes nothing, then the handle works again."""

    def __init__(
        self, rocks: Any, message: str = "injected: the close's final write failed"
    ) -> None:
        self._rocks = rocks
        self.message = message
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rocks, name)

    def batch(self) -> Any:
        real = self._rocks.batch()
        outer = self

        class _Batch:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def commit(self, *args: Any, **kwargs: Any) -> None:
                if outer.armed:
                    outer.armed = False
                    raise InjectedFailure(outer.message)
                real.commit(*args, **kwargs)

        return _Batch()
