"""BytePacer: the waits it asks for add up to bytes / rate, idle time is no
credit, and it never waits when unpaced, unlimited or stopping."""

import threading

import pytest

from tiermem.server.services.pacer import BytePacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pacer(rate: int, t: FakeTime, **kw) -> BytePacer:  # type: ignore[no-untyped-def]
    kw.setdefault("stop", threading.Event())
    return BytePacer(rate, clock=t.clock, sleep=t.sleep, **kw)


def test_waits_add_up_to_bytes_over_rate() -> None:
    t = FakeTime()
    p = pacer(1000, t)
    for _ in range(4):
        p.spend(500)
    # 2000 bytes at 1000 B/s take 2 s, less the 0.1 s burst it starts with
    assert sum(t.sleeps) == pytest.approx(1.9)
    assert p.waited_s == pytest.approx(1.9)


def test_time_spent_working_counts_toward_the_rate() -> None:
    t = FakeTime()
    p = pacer(1000, t)
    p.spend(100)  # the first 0.1 s of credit: no wait
    assert t.sleeps == []
    p.spend(500)
    assert sum(t.sleeps) == pytest.approx(0.5)
    t.now += 0.04  # copying took 0.04 s
    t.sleeps.clear()
    p.spend(500)
    assert sum(t.sleeps) == pytest.approx(0.46)


def test_idle_time_is_not_saved_up_as_a_burst() -> None:
    t = FakeTime()
    p = pacer(1000, t)
    p.spend(1000)
    t.now += 60  # a quiet minute between passes
    t.sleeps.clear()
    p.spend(1000)  # at most burst_s (0.1 s) of credit carried
    assert sum(t.sleeps) == pytest.approx(0.9)


def test_unpaced_while_the_predicate_says_so() -> None:
    t = FakeTime()
    full = [True]
    p = pacer(1000, t, unpaced=lambda: full[0])
    for _ in range(10):
        p.spend(1000)
    assert t.sleeps == []
    full[0] = False
    p.spend(1000)  # pacing resumes from now, owing nothing for the unpaced bytes
    assert sum(t.sleeps) == pytest.approx(0.9)


def test_rate_zero_and_a_set_stop_never_wait() -> None:
    t = FakeTime()
    pacer(0, t).spend(1 << 30)
    stop = threading.Event()
    stop.set()
    stopped = pacer(1, t, stop=stop)
    stopped.spend(1 << 30)
    assert t.sleeps == []
    assert stopped.stopped


def test_a_negative_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="rate_bytes_per_s must be >= 0"):
        BytePacer(-1, stop=threading.Event())


def test_the_default_wait_returns_when_stopped() -> None:
    stop = threading.Event()
    p = BytePacer(1, stop=stop)  # one byte a second: spend(10**6) would wait 11 days
    threading.Timer(0.2, stop.set).start()
    done = threading.Event()
    threading.Thread(target=lambda: (p.spend(10**6), done.set()), daemon=True).start()
    assert done.wait(30)
