"""A collection whose last upserts carried no payloads is filtered correctly
after it is unloaded and reloaded from its snapshot: the payload columns are
saved as long as they were (they grow only with payloads), and loading left
them shorter than the slots, so every filtered search failed INTERNAL (a numpy
broadcast error) until the next upsert with payloads, across restarts too."""

from __future__ import annotations

import numpy as np

from tiermem.client import Client


def test_a_filtered_search_after_a_reload_finds_exactly_the_matching_ids(
    vclient: Client,
) -> None:
    c = vclient
    c.vectors.create("cols", dimension=4, index="flat")
    rng = np.random.default_rng(0)
    c.vectors.upsert("cols", [0, 1], rng.standard_normal((2, 4)), payloads=[{"a": 1}, {"a": 2}])
    c.vectors.upsert("cols", [2, 3], rng.standard_normal((2, 4)))  # no payloads
    assert c.vectors.unload("cols")
    found = c.vectors.search("cols", np.zeros(4), 4, where={"a": 1})  # reloads it
    assert found.ids[0].tolist() == [0, -1, -1, -1]
    unfiltered = c.vectors.search("cols", np.zeros(4), 4)
    assert sorted(unfiltered.ids[0].tolist()) == [0, 1, 2, 3]
    # payloads given later land on the right slots
    c.vectors.upsert("cols", [3], rng.standard_normal((1, 4)), payloads=[{"a": 1}])
    found = c.vectors.search("cols", np.zeros(4), 4, where={"a": 1})
    assert sorted(i for i in found.ids[0].tolist() if i >= 0) == [0, 3]
