"""fp8 (e4m3) and int8 per-channel codecs: error bounds, reported error, decoding
to the original dtype, and never applied without LOSSY_OK."""

import pytest
import torch

from tiermem.client import Client, KvBlock, KvScope, Precision, Profile
from tiermem.server.codecs import lossy
from tiermem.server.model import TensorInfo

LOSSY = Profile(precision=Precision.LOSSY_OK)
SCOPE = KvScope("codec-model", dtype="bfloat16")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def info(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(str(t.dtype).removeprefix("torch."), tuple(t.shape))


def raw(t: torch.Tensor) -> memoryview:
    return memoryview(t.contiguous().view(torch.uint8).numpy())


def decoded(data: bytes, t: torch.Tensor) -> torch.Tensor:
    return torch.frombuffer(bytearray(lossy.decode(data, info(t))), dtype=t.dtype).reshape(t.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("codec", "relative_bound"),
    # fp8 e4m3 keeps 3 mantissa bits (rel. error <= 2^-4 of the channel's largest
    # value); int8 rounds to 1/254 of it. Plus the rounding back to the dtype.
    [(lossy.FP8_E4M3, 2**-4), (lossy.INT8, 1 / 254)],
)
def test_error_stays_within_the_per_channel_bound(
    dtype: torch.dtype, codec: str, relative_bound: float
) -> None:
    gen = torch.Generator().manual_seed(1)
    # channels of very different magnitude: per-channel scales matter
    t = (torch.randn(3, 40, 16, generator=gen) * torch.logspace(-3, 3, 16)).to(dtype)
    enc = lossy.encode(codec, raw(t), info(t))
    assert enc is not None and enc.codec == codec
    back = decoded(enc.data, t)
    assert back.dtype == dtype and back.shape == t.shape
    err = (back.float() - t.float()).abs()
    amax = t.float().abs().amax(dim=(0, 1))
    dtype_eps = torch.finfo(dtype).eps
    assert bool((err <= amax * (relative_bound + 2 * dtype_eps) + 1e-30).all())
    assert enc.max_abs_error == pytest.approx(float(err.max()), rel=1e-6)
    assert len(enc.data) < t.numel() * t.element_size() or dtype != torch.float32


def test_non_finite_values_and_integer_dtypes_are_not_encoded() -> None:
    t = torch.tensor([[1.0, float("inf")]])
    assert lossy.encode(lossy.FP8_E4M3, raw(t), info(t)) is None
    i = torch.arange(8, dtype=torch.int32)
    assert lossy.encode(lossy.INT8, raw(i), info(i)) is None


def test_zero_channels_round_trip_exactly() -> None:
    t = torch.zeros(4, 8, dtype=torch.bfloat16)
    enc = lossy.encode(lossy.INT8, raw(t), info(t))
    assert enc is not None and enc.max_abs_error == 0.0
    assert torch.equal(decoded(enc.data, t), t)


@pytest.mark.parametrize("codec", [lossy.FP8_E4M3, lossy.INT8])
def test_lossy_put_reports_codec_and_error_and_get_restores_the_dtype(
    client: Client, codec: str
) -> None:
    t = torch.randn(2, 2, 64, 128).bfloat16()
    stored = client.kv.put(SCOPE, 1, t, profile=LOSSY, codec=codec)
    assert stored.codec == codec and 0 < stored.max_abs_error < 1
    assert stored.stored_bytes < t.numel() * 2 * 0.6
    got = client.kv.get_blocks(SCOPE, [1])[0]
    assert got.codec == codec
    back = got.tensor()
    assert back.dtype == torch.bfloat16 and back.shape == t.shape
    assert float((back.float() - t.float()).abs().max()) == pytest.approx(stored.max_abs_error)


def test_an_error_above_the_profile_bound_stores_the_block_raw(client: Client) -> None:
    t = torch.randn(16, 32)
    tight = Profile(precision=Precision.LOSSY_OK, lossy_max_error=1e-6)
    stored = client.kv.put(SCOPE, 2, t, profile=tight, codec=lossy.INT8)
    assert stored.codec == "" and stored.max_abs_error == 0.0
    assert torch.equal(client.kv.get_tensors(SCOPE, [2])[0], t)


def test_lossless_blocks_stay_bit_exact_beside_lossy_ones(client: Client) -> None:
    a, b = torch.randn(8, 64), torch.randn(8, 64)
    client.kv.put_blocks(SCOPE, [KvBlock(10, a)])
    client.kv.put_blocks(SCOPE, [KvBlock(11, b)], profile=LOSSY, codec=lossy.FP8_E4M3)
    got = client.kv.get_blocks(SCOPE, [10, 11])
    assert got[0].codec == "" and torch.equal(got[0].tensor(), a)
    assert got[1].codec == lossy.FP8_E4M3 and not torch.equal(got[1].tensor(), b)
