"""A lossy codec is used only when its result is finite, within the block's
error bound and smaller than the raw bytes; otherwise the block is stored raw.
fp8 encoded a channel of float32 subnormals with a zero as NaN (its scale
rounded to 0, 0/0) and the NaN error passed the bound check; int8 turned the
largest float32 into inf; a 1-D or tiny tensor (a scale per element) grew.
A stored encoding whose header is cut short is DATA_LOSS material (Corrupted),
not an unpacking error."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from tiermem.client import Client, KvScope, Precision, Profile
from tiermem.server.codecs import lossy
from tiermem.server.errors import Corrupted
from tiermem.server.model import TensorInfo

SCOPE = KvScope("lossy-edges", dtype="float32")
LOSSY = Profile(precision=Precision.LOSSY_OK)


def test_a_subnormal_channel_with_a_zero_is_not_turned_into_nan(client: Client) -> None:
    t = torch.tensor([[0.0, 1.0], [1e-44, 2.0]] * 64, dtype=torch.float32)
    bounded = Profile(precision=Precision.LOSSY_OK, lossy_max_error=0.1)
    stored = client.kv.put(SCOPE, 1, t, profile=bounded, codec="fp8_e4m3")
    assert math.isfinite(stored.max_abs_error) and stored.max_abs_error <= 0.1
    back = client.kv.get_tensors(SCOPE, [1])[0]
    assert torch.isfinite(back).all()
    assert (back - t).abs().max() <= 0.1


def test_the_largest_float_is_not_turned_into_inf(client: Client) -> None:
    big = torch.finfo(torch.float32).max
    t = torch.tensor([[big, 1.0]], dtype=torch.float32).repeat(64, 1)
    stored = client.kv.put(SCOPE, 2, t, profile=LOSSY, codec="int8")
    back = client.kv.get_tensors(SCOPE, [2])[0]
    assert torch.isfinite(back).all()
    assert stored.codec == "" and torch.equal(back, t)  # kept raw, exact


def test_a_block_the_codec_would_grow_is_stored_raw(client: Client) -> None:
    t = torch.randn(64).to(torch.bfloat16)  # 128 bytes raw; int8 needs 64 + 4 x 64
    stored = client.kv.put(SCOPE, 3, t, profile=LOSSY, codec="int8")
    assert stored.codec == "" and stored.stored_bytes == 128
    assert torch.equal(client.kv.get_tensors(SCOPE, [3])[0], t)


def test_a_truncated_encoding_is_corrupted() -> None:
    info = TensorInfo("float32", (4, 8))
    data = lossy.encode("int8", memoryview(torch.randn(4, 8).numpy().tobytes()), info)
    assert data is not None
    for cut in (12, 16, 20):  # inside the dimensions that follow the fixed head
        with pytest.raises(Corrupted):
            lossy.decode(data.data[:cut], info)
    head = bytearray(data.data[:8])
    struct.pack_into("<B", head, 6, 0)  # no dimensions at all
    with pytest.raises(Corrupted):
        lossy.decode(bytes(head), info)
