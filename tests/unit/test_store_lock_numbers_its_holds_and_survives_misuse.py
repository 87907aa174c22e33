"""The store lock numbers its outermost holds (odd while held), so readers can
tell without taking it that nobody held it; misuse never breaks that count,
and the work it runs as it is taken can never leave it held."""

import threading

import pytest

from tiermem.server.services.storelock import StoreLock


def test_the_version_is_odd_exactly_while_the_lock_is_held() -> None:
    lock = StoreLock()
    start = lock.free_version()
    assert start is not None and start % 2 == 0
    with lock:
        held = lock.version
        assert held % 2 == 1 and lock.free_version() is None
        with lock:  # reentrant: the same hold
            assert lock.version == held
        assert lock.version == held
    assert lock.unchanged(start + 2) and not lock.unchanged(start)


def test_a_release_by_a_thread_that_does_not_hold_it_changes_nothing() -> None:
    lock = StoreLock()
    with pytest.raises(RuntimeError):
        lock.release()
    assert lock.free_version() == 0
    with lock:
        errors: list[BaseException] = []

        def stray() -> None:
            try:
                lock.release()
            except RuntimeError as exc:
                errors.append(exc)

        other = threading.Thread(target=stray)
        other.start()
        other.join()
        assert len(errors) == 1 and lock.version == 1
    assert lock.version == 2


def test_work_run_as_it_is_taken_never_leaves_it_held() -> None:
    calls: list[str] = []

    def failing() -> None:
        calls.append("ran")
        raise ValueError("broken hook")

    lock = StoreLock(on_acquire=failing)
    with lock:  # an ordinary failure is logged; the holder's own work runs
        calls.append("holder")
    assert calls == ["ran", "holder"]

    def interrupted() -> None:
        raise KeyboardInterrupt

    lock = StoreLock(on_acquire=interrupted)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert lock.free_version() is not None
    lock.on_acquire = None
    taken = threading.Thread(target=lambda: lock.acquire(timeout=5) and lock.release())
    taken.start()
    taken.join(10)
    assert not taken.is_alive()


def test_waiting_for_a_free_lock_its_own_thread_holds_gives_up_at_once() -> None:
    """A reader that already holds the lock (reentrant) must not wait for it to
    be free: it never would be while that thread waits."""
    import time

    lock = StoreLock()
    assert lock.wait_free(5.0) == 0
    with lock:
        started = time.monotonic()
        assert lock.wait_free(5.0) is None
        assert time.monotonic() - started < 1.0
