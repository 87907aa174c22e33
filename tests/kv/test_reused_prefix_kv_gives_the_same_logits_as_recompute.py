"""End-to-end prefix reuse with a real (tiny, random-weight) transformers causal
LM: the KV of a prompt is stored chunk by chunk in tiermem; a new request with
the same prefix finds the chunks with LookupPrefix, fetches them, continues
the forward pass from them, and gets exactly the logits of a recompute."""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tiermem.client import Client, KvBlock, KvScope  # noqa: E402

CHUNK = 16
LAYOUT = "layer,kv,head,token,dim"


def tiny_model(dtype: torch.dtype) -> Any:
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(dtype).eval()


def chain_hashes(tokens: list[int]) -> list[bytes]:
    """One hash per full chunk, each covering everything before it (a prefix chain)."""
    out: list[bytes] = []
    prev = b""
    for start in range(0, len(tokens) - CHUNK + 1, CHUNK):
        chunk = bytes(str(tokens[start : start + CHUNK]), "ascii")
        prev = hashlib.blake2b(prev + chunk, digest_size=16).digest()
        out.append(prev)
    return out


def layer_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def to_chunks(cache: Any, n_chunks: int) -> list[torch.Tensor]:
    """[layer, k/v, head, token, dim] per chunk (batch 1)."""
    kv = torch.stack([torch.stack([k[0], v[0]]) for k, v in layer_kv(cache)])
    return [kv[:, :, :, i * CHUNK : (i + 1) * CHUNK].contiguous() for i in range(n_chunks)]


def continue_from(model: Any, tokens: torch.Tensor, cache: Any) -> Any:
    """Forward ``tokens`` after the cached ones (the cache argument was renamed)."""
    params = inspect.signature(model.forward).parameters
    name = "cache" if "cache" in params else "past_key_values"
    return model(tokens, **{name: cache})


def from_chunks(chunks: list[torch.Tensor]) -> Any:
    kv = torch.cat(chunks, dim=3)
    cache = transformers.DynamicCache()
    for layer in range(kv.shape[0]):
        cache.update(kv[layer, 0].unsqueeze(0), kv[layer, 1].unsqueeze(0), layer)
    return cache


@torch.no_grad()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reused_prefix_kv_gives_the_same_logits_as_recompute(
    client: Client, dtype: torch.dtype
) -> None:
    model = tiny_model(dtype)
    scope = KvScope("tiny-llama-random", dtype=str(dtype).removeprefix("torch."), salt="t1")
    gen = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 256, (1, 3 * CHUNK), generator=gen)

    # Request 1: compute the prompt's KV and store it chunk by chunk.
    first = model(prefix, use_cache=True)
    hashes = chain_hashes(prefix[0].tolist())
    chunks = to_chunks(first.past_key_values, len(hashes))
    stored = client.kv.put_blocks(
        scope, [KvBlock(h, c, memory_format=LAYOUT) for h, c in zip(hashes, chunks, strict=True)]
    )
    assert [s.codec for s in stored] == [""] * 3

    # Request 2: same prefix, new suffix (its last, partial chunk is not cached).
    suffix = torch.randint(0, 256, (1, CHUNK + 5), generator=gen)
    tokens = torch.cat([prefix, suffix], dim=1)
    request_hashes = chain_hashes(tokens[0].tolist())
    assert len(request_hashes) == 4 and request_hashes[:3] == hashes
    hit = client.kv.lookup_prefix(scope, request_hashes)
    assert hit.stored_chunks == 3
    fetched = client.kv.get_blocks(scope, request_hashes[: hit.stored_chunks])
    assert all(b.memory_format == LAYOUT for b in fetched)
    reused = continue_from(model, suffix, from_chunks([b.tensor() for b in fetched]))

    # Reference: recompute the prefix KV, then continue the same way.
    recomputed = model(prefix, use_cache=True).past_key_values
    reference = continue_from(model, suffix, recomputed)
    assert torch.equal(reused.logits, reference.logits)
    if dtype == torch.float32:
        one_shot = model(tokens).logits[:, prefix.shape[1] :]
        torch.testing.assert_close(reused.logits, one_shot, rtol=1e-4, atol=1e-4)


def test_a_different_prefix_finds_no_chunks(client: Client) -> None:
    scope = KvScope("tiny-llama-random", dtype="float32", salt="t1")
    tokens = list(range(3 * CHUNK))
    client.kv.put_blocks(scope, [KvBlock(h, torch.zeros(4)) for h in chain_hashes(tokens)])
    changed = [*tokens[: CHUNK + 3], 999, *tokens[CHUNK + 4 :]]
    assert client.kv.lookup_prefix(scope, chain_hashes(changed)).stored_chunks == 1
