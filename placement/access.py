"""Access model: how often each object will be read, from what was seen and hinted.

Per object the daemon keeps two numbers, the ``atime`` (last access, unix s,
float64) and ``rate`` (float32) columns of its index: ``rate`` is an
exponentially decayed access count, in accesses per second, *as of* ``atime``::

    on access at t:   rate = rate * exp(-(t - atime) / tau) + 1 / tau;  atime = t
    estimate at now:  rate * exp(-(now - atime) / tau)

For a Poisson stream of rate lambda the estimate's mean is lambda; ``tau`` is
``half_life_s / ln 2``. KV blocks of a session (a multi-turn conversation's
history: read once per turn, worthless once the session ends, which nothing
announces) use the shorter ``session_half_life_s``: a finished session's
blocks lose their value within a few think times, while shared data (prefix
blocks, vectors, blobs, scratch) keeps a longer memory. A new object starts
with ``rate`` = the prior of its (kind, hint) class, so client hints count like
observations that fade as real accesses take over. A next-access deadline (a
profile field or a Prefetch call) announces one read: it adds
``1 / max(deadline - now, lead_s)`` until the object is read or shortly after
the deadline.

Twelve bytes per object, every update and estimate vectorised over numpy
columns: a million objects cost 12 MB and a few milliseconds per estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.placement.model import BLOB, COLD, HOT, KV_BLOCK, SCRATCH, UNSPECIFIED, VECTOR, WARM

FloatArray = npt.NDArray[np.float64]

#: Accesses per second a new object is assumed to get, per kind and hint (the
#: data profiles of DESIGN.md §1): KV blocks are re-read within seconds while a
#: session is active; vector shards serve many queries; blobs are rare; scratch
#: records are replayed in bursts.
DEFAULT_PRIORS_PER_S: dict[int, dict[int, float]] = {
    KV_BLOCK: {HOT: 0.1, WARM: 0.02, COLD: 0.001},
    VECTOR: {HOT: 1.0, WARM: 0.1, COLD: 0.005},
    BLOB: {HOT: 0.05, WARM: 0.005, COLD: 0.0002},
    SCRATCH: {HOT: 0.5, WARM: 0.05, COLD: 0.002},
}
#: The hint a kind gets when the client leaves it unspecified (server/model.py).
DEFAULT_HINTS = {KV_BLOCK: HOT, VECTOR: WARM, BLOB: COLD, SCRATCH: WARM}


def _prior_table(priors: dict[int, dict[int, float]]) -> FloatArray:
    table = np.zeros((5, 4), dtype=np.float64)
    for kind, by_hint in priors.items():
        for hint, value in by_hint.items():
            table[kind, hint] = value
        table[kind, UNSPECIFIED] = by_hint[DEFAULT_HINTS.get(kind, WARM)]
    return table


def session_kv(kind: npt.NDArray[Any], session: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """Which objects are KV blocks of a session (``session`` ids, 0 = none): their
    rates use ``AccessModel.session_half_life_s``."""
    return np.asarray((np.asarray(kind) == KV_BLOCK) & (np.asarray(session) != 0), dtype=bool)


@dataclass(frozen=True, slots=True)
class AccessModel:
    half_life_s: float = 40.0
    """Time for an access's weight in the rate estimate to halve (seconds)."""
    session_half_life_s: float = 10.0
    """The same for KV blocks of a session (``session_kv``), seconds."""
    deadline_lead_s: float = 10.0
    """A deadline closer than this counts as this close: the boost is at most one
    read per ``deadline_lead_s`` seconds (an announced read is one read, not a
    stream: a smaller lead made every prefetched block outrank shared data)."""
    deadline_grace_s: float = 10.0
    """A deadline keeps boosting for this long after it passed (late readers)."""
    min_reuse_s: float = 30.0
    """The shortest mean time to first reuse ``PriorLearner`` credits a class with
    (seconds): an unread object is given at least this long to be read back
    before its prior has faded, and a learned prior is at most reuse / this."""
    priors_per_s: dict[int, dict[int, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_PRIORS_PER_S.items()}
    )
    _table: FloatArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.half_life_s <= 0 or self.session_half_life_s <= 0:
            raise ValueError("half_life_s and session_half_life_s must be positive")
        object.__setattr__(self, "_table", _prior_table(self.priors_per_s))

    @property
    def tau_s(self) -> float:
        return self.half_life_s / math.log(2)

    @property
    def session_tau_s(self) -> float:
        return self.session_half_life_s / math.log(2)

    def _taus(self, session: npt.NDArray[np.bool_] | None) -> Any:
        if session is None:
            return self.tau_s
        return np.where(session, self.session_tau_s, self.tau_s)

    def tau_one(self, session: bool = False) -> float:
        return self.session_tau_s if session else self.tau_s

    def prior(self, kind: int, hint: int) -> float:
        """Accesses per second assumed for a new object of this kind and hint."""
        return float(self._table[kind, hint])

    def priors(self, kinds: npt.NDArray[Any], hints: npt.NDArray[Any]) -> FloatArray:
        return self._table[kinds.astype(np.intp), hints.astype(np.intp)]

    def record(
        self,
        rate: npt.NDArray[Any],
        atime: npt.NDArray[Any],
        rows: Any,
        now: float,
        session: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        """Count one access of ``rows`` (an int or an int array) at ``now``, in place;
        ``session``: per row, a KV block of a session (``session_kv``)."""
        tau = self._taus(session)
        age = np.maximum(now - atime[rows], 0.0)
        rate[rows] = rate[rows] * np.exp(-age / tau) + 1.0 / tau
        atime[rows] = now

    def fresh_rate(self, kind: int, hint: int, durable: bool, prior: float) -> float | None:
        """For a new CACHE object whose hint (or its kind's default) is HOT: the
        rate it has right after one access, its put counted as a use as a cache
        counts one (``Planner.admit``'s cache rule); None for any other object.
        ``prior`` is its class's learned prior; the HOT hint is the client's word,
        so it counts at least as this model's HOT prior for the kind (a learned
        prior drifting down as reads teach the class would otherwise value each
        new entry a little below the ones put before it)."""
        if durable or (hint if hint != UNSPECIFIED else DEFAULT_HINTS.get(kind, WARM)) != HOT:
            return None
        return max(prior, self.prior(kind, HOT)) + 1.0 / self.tau_s

    def record_one(self, rate: float, atime: float, now: float, session: bool = False) -> float:
        """The new rate of one object accessed at ``now`` (scalar form of ``record``)."""
        tau = self.tau_one(session)
        return rate * math.exp(-max(now - atime, 0.0) / tau) + 1.0 / tau

    def estimate(
        self,
        rate: npt.NDArray[Any],
        atime: npt.NDArray[Any],
        now: float,
        session: npt.NDArray[np.bool_] | None = None,
    ) -> FloatArray:
        """Decayed access rates (accesses/s) at ``now``."""
        age = np.maximum(now - np.asarray(atime, dtype=np.float64), 0.0)
        decay = np.exp(-age / self._taus(session))
        return np.asarray(np.asarray(rate, dtype=np.float64) * decay, dtype=np.float64)

    def estimate_one(self, rate: float, atime: float, now: float, session: bool = False) -> float:
        return rate * math.exp(-max(now - atime, 0.0) / self.tau_one(session))

    def deadline_boost(self, deadline: npt.NDArray[Any], now: float) -> FloatArray:
        """Extra accesses/s for objects expected by ``deadline`` (0 = none), unix s."""
        d = np.asarray(deadline, dtype=np.float64)
        active = (d > 0) & (now <= d + self.deadline_grace_s)
        until = np.maximum(d - now, self.deadline_lead_s)
        return np.where(active, 1.0 / until, 0.0)

    def deadline_boost_one(self, deadline: float, now: float) -> float:
        if deadline <= 0 or now > deadline + self.deadline_grace_s:
            return 0.0
        return 1.0 / max(deadline - now, self.deadline_lead_s)


class PriorLearner:
    """Learns what a new object of each (kind, hint) class is worth.

    Per class it keeps time-decayed counts of puts, of *first* reads (the first
    time an object is read after being written) and of the age at that first
    read. The learned prior is ``reuse probability / mean time to first reuse``
    (accesses/s), blended with the configured hint prior by how many puts were
    seen: with few samples the hint decides, with many the workload does. So a
    burst of KV blocks that are never read back lowers the prior of the next
    ones, and they stop displacing data that is read.

    Mutable, tiny (a few floats per class). Updates are not thread-safe: the
    owner serialises them. ``prior`` may be read concurrently with an update; it
    then blends counts a few microseconds apart, off by about one sample.
    """

    def __init__(
        self, model: AccessModel, window_s: float = 300.0, min_samples: float = 200.0
    ) -> None:
        self.model = model
        self.window_s = window_s
        self.min_samples = min_samples
        self._puts = np.zeros((5, 4))
        self._firsts = np.zeros((5, 4))
        self._age = np.zeros((5, 4))
        self._last = np.zeros((5, 4))

    def _decay(self, kind: int, hint: int, now: float) -> None:
        dt = now - self._last[kind, hint]
        if dt > 0:
            f = math.exp(-dt / self.window_s)
            self._puts[kind, hint] *= f
            self._firsts[kind, hint] *= f
            self._age[kind, hint] *= f
            self._last[kind, hint] = now

    def on_put(self, kind: int, hint: int, now: float) -> None:
        self._decay(kind, hint, now)
        self._puts[kind, hint] += 1.0

    def on_first_read(self, kind: int, hint: int, age_s: float, now: float) -> None:
        self._decay(kind, hint, now)
        self._firsts[kind, hint] += 1.0
        self._age[kind, hint] += max(age_s, 0.0)

    def on_first_reads(self, kind: int, hint: int, ages_s: npt.NDArray[Any], now: float) -> None:
        """``on_first_read`` of several objects of one class read at ``now``."""
        self._decay(kind, hint, now)
        self._firsts[kind, hint] += float(len(ages_s))
        self._age[kind, hint] += float(np.maximum(ages_s, 0.0).sum())

    def prior(self, kind: int, hint: int) -> float:
        default = self.model.prior(kind, hint)
        puts = float(self._puts[kind, hint])
        if puts <= 0:
            return default
        firsts = float(self._firsts[kind, hint])
        reuse = min(firsts / puts, 1.0)
        mean_age = float(self._age[kind, hint]) / firsts if firsts > 0 else self.window_s
        learned = reuse / max(mean_age, self.model.min_reuse_s)
        w = puts / (puts + self.min_samples)
        return w * learned + (1.0 - w) * default

    def reuse_time_s(self, kind: int, hint: int) -> float:
        """How fast an unread object of the class loses value: the learned mean time
        to first reuse (blended like the prior), at most the model's tau."""
        tau = self.model.tau_s
        puts = float(self._puts[kind, hint])
        firsts = float(self._firsts[kind, hint])
        if puts <= 0 or firsts <= 0:
            return tau
        learned = min(max(float(self._age[kind, hint]) / firsts, self.model.min_reuse_s), tau)
        w = puts / (puts + self.min_samples)
        return w * learned + (1.0 - w) * tau

    def table(self) -> tuple[FloatArray, FloatArray]:
        """[kind, hint] tables of the current prior and reuse time of every class."""
        prior, reuse = np.zeros((5, 4)), np.ones((5, 4))
        for kind in range(5):
            for hint in range(4):
                prior[kind, hint] = self.prior(kind, hint)
                reuse[kind, hint] = self.reuse_time_s(kind, hint)
        return prior, reuse

    def estimate_unseen(self, kind: int, hint: int, atime: float, now: float) -> float:
        """Rate of one object never read since written at ``atime``."""
        age = max(now - atime, 0.0)
        return self.prior(kind, hint) * math.exp(-age / self.reuse_time_s(kind, hint))

    def estimate(
        self,
        rate: npt.NDArray[Any],
        atime: npt.NDArray[Any],
        seen: npt.NDArray[np.bool_],
        kind: npt.NDArray[Any],
        hint: npt.NDArray[Any],
        now: float,
        session: npt.NDArray[np.bool_] | None = None,
    ) -> FloatArray:
        """Access rates at ``now``: objects read since written use their decayed
        counts; objects never read use their class's *current* prior, decayed by
        their age over the class's learned time to first reuse: if reused objects
        are mostly read back within T seconds, one unread for several T is
        unlikely to be read at all (a newer one of the class ranks above it).
        ``session``: KV blocks of a session (``session_kv``; None = none)."""
        observed = self.model.estimate(rate, atime, now, session)
        if seen.all():
            return observed
        prior, reuse = self.table()
        k, h = kind.astype(np.intp), hint.astype(np.intp)
        age = np.maximum(now - np.asarray(atime, dtype=np.float64), 0.0)
        return np.where(seen, observed, prior[k, h] * np.exp(-age / reuse[k, h]))

    def snapshot(self) -> dict[str, float]:
        """Learned priors per class with samples (for stats and tests)."""
        out = {}
        for kind in range(1, 5):
            for hint in range(1, 4):
                if self._puts[kind, hint] > 0:
                    out[f"{kind}/{hint}"] = self.prior(kind, hint)
        return out
