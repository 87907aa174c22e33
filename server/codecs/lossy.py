"""Lossy codecs for floating-point KV blocks: fp8 (e4m3) and int8, per-channel.

Only ever applied to values whose profile says ``LOSSY_OK`` (the KV service
checks); decoding restores the original dtype and shape. "Channel" is the last
dimension: every element ``x[..., c]`` is divided by ``scale[c] = amax_c / qmax``
(``amax_c`` the largest magnitude in channel c), then rounded to the code type.

Encoded layout (little-endian)::

    magic "TKC1" | codec u8 | dtype u8 | ndim u8 | pad u8 | shape u64 * ndim |
    scales f32 * channels | codes (1 byte per element)

The measured maximum absolute error (decode(encode(x)) vs x, in float32) is
returned by ``encode`` so the caller can refuse a result above its bound.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tiermem.server.errors import Corrupted, InvalidArgument
from tiermem.server.model import TensorInfo

MAGIC = b"TKC1"
FP8_E4M3 = "fp8_e4m3"
INT8 = "int8"
CODECS = (FP8_E4M3, INT8)
_CODEC_IDS = {FP8_E4M3: 1, INT8: 2}
_CODEC_NAMES = {v: k for k, v in _CODEC_IDS.items()}
#: Float dtypes a lossy codec may encode (the only ones with something to lose).
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_IDS = {name: i + 1 for i, name in enumerate(FLOAT_DTYPES)}
_DTYPE_NAMES = {v: k for k, v in _DTYPE_IDS.items()}
_HEAD = struct.Struct("<4sBBBx")
_MAX_NDIM = 16


@dataclass(frozen=True, slots=True)
class Encoded:
    codec: str
    data: bytes
    max_abs_error: float


def applicable(codec: str, tensor: TensorInfo) -> bool:
    """True if ``codec`` can encode a tensor of this dtype and shape."""
    return codec in CODECS and tensor.dtype in FLOAT_DTYPES and 0 < len(tensor.shape) <= _MAX_NDIM


def _torch() -> Any:
    import torch

    return torch


def _as_tensor(raw: memoryview, tensor: TensorInfo) -> Any:
    torch = _torch()
    dtype = getattr(torch, tensor.dtype)
    buf = np.frombuffer(raw, dtype=np.uint8)
    if buf.size == 0:
        return torch.empty(tensor.shape, dtype=dtype)
    return torch.from_numpy(buf.copy()).view(dtype).reshape(tensor.shape)


def encode(codec: str, raw: memoryview, tensor: TensorInfo) -> Encoded | None:
    """Encode ``raw`` (bytes of ``tensor``) with ``codec``. None when the codec
    cannot represent the values (non-finite values) or does not apply."""
    if not applicable(codec, tensor):
        return None
    torch = _torch()
    x = _as_tensor(raw, tensor).float()
    if x.numel() == 0 or not bool(torch.isfinite(x).all()):
        return None
    channels = int(tensor.shape[-1])
    rows = x.reshape(-1, channels) if channels else x.reshape(0, 1)
    amax = rows.abs().amax(dim=0) if rows.shape[0] else torch.zeros(channels)
    qmax = float(torch.finfo(torch.float8_e4m3fn).max) if codec == FP8_E4M3 else 127.0
    scale = amax / qmax
    # a channel of subnormals can round its scale to 0 (0/0 would encode NaN):
    # such a channel, like an all-zero one, gets scale 1
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    if codec == FP8_E4M3:
        codes = (rows / scale).clamp(-qmax, qmax).to(torch.float8_e4m3fn)
    else:
        codes = torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
    decoded = codes.float() * scale
    # Error against the input after the same rounding to its dtype a decode does.
    restored = decoded.to(getattr(torch, tensor.dtype)).float()
    if not bool(torch.isfinite(restored).all()):
        return None  # (a value near the dtype's largest can round past it)
    max_err = float((restored - rows).abs().max()) if rows.numel() else 0.0
    head = _HEAD.pack(MAGIC, _CODEC_IDS[codec], _DTYPE_IDS[tensor.dtype], len(tensor.shape))
    dims = struct.pack(f"<{len(tensor.shape)}Q", *tensor.shape)
    scales = scale.to(torch.float32).numpy().tobytes()
    body = codes.contiguous().view(torch.uint8).numpy().tobytes()
    return Encoded(codec, head + dims + scales + body, max_err)


def decode(data: memoryview | bytes, tensor: TensorInfo) -> bytes:
    """The original-dtype bytes of an encoded block. Raises Corrupted if ``data``
    is not a well-formed encoding of ``tensor``."""
    torch = _torch()
    view = memoryview(data)
    if len(view) < _HEAD.size:
        raise Corrupted("encoded KV block is shorter than its header")
    magic, codec_id, dtype_id, ndim = _HEAD.unpack_from(view)
    if magic != MAGIC or codec_id not in _CODEC_NAMES or dtype_id not in _DTYPE_NAMES:
        raise Corrupted("encoded KV block has a bad header")
    if not ndim > 0 or len(view) < _HEAD.size + 8 * ndim:
        raise Corrupted(f"encoded KV block is too short for the {ndim} dimensions it names")
    shape = struct.unpack_from(f"<{ndim}Q", view, _HEAD.size)
    dtype_name = _DTYPE_NAMES[dtype_id]
    if tuple(shape) != tuple(tensor.shape) or dtype_name != tensor.dtype:
        raise Corrupted(
            f"encoded KV block says {dtype_name}{list(shape)}, its metadata "
            f"{tensor.dtype}{list(tensor.shape)}"
        )
    channels = int(shape[-1])
    count = 1
    for d in shape:
        count *= int(d)
    off = _HEAD.size + 8 * ndim
    if len(view) != off + 4 * channels + count:
        raise Corrupted(f"encoded KV block is {len(view)} bytes; its header implies more or less")
    scale = torch.from_numpy(np.frombuffer(view, np.float32, channels, off).copy())
    raw_codes = torch.from_numpy(np.frombuffer(view, np.uint8, count, off + 4 * channels).copy())
    code_dtype = torch.float8_e4m3fn if _CODEC_NAMES[codec_id] == FP8_E4M3 else torch.int8
    codes = raw_codes.view(code_dtype).reshape(-1, channels) if channels else raw_codes
    decoded = (codes.float() * scale).to(getattr(torch, dtype_name)).reshape(shape)
    return decoded.contiguous().view(torch.uint8).numpy().tobytes()  # type: ignore[no-any-return]


def check_codec_name(codec: str) -> str:
    """Normalise a requested codec name ("" / "none" = raw)."""
    if codec in ("", "none"):
        return ""
    if codec not in CODECS:
        raise InvalidArgument(f"unknown codec {codec!r}; use one of: none, {', '.join(CODECS)}")
    return codec
