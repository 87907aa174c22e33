"""Block layout of stored blob content.

Content is cut into blocks of ``block_bytes`` (a power of two; the last block
may be short). Each block has an xxh3-64 checksum, computed once while the
upload is received and kept in the content record as little-endian u64s. A
read of any range verifies exactly the blocks it touches, so the bytes a
range read sends always start and end on block boundaries (or the end of the
content): the *aligned range*::

    content  |  block 0  |  block 1  |  block 2  |  block 3 |
    request              [ offset ......... offset+length )
    aligned              [ block 1 start ............. block 2 end )
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tiermem.server.errors import InvariantViolation

U64 = struct.Struct("<Q")


def block_count(size: int, block_bytes: int) -> int:
    return (size + block_bytes - 1) // block_bytes


@dataclass(frozen=True, slots=True)
class AlignedRange:
    offset: int  # requested
    length: int
    aligned_offset: int
    aligned_length: int
    first_block: int
    blocks: int


def aligned_range(offset: int, length: int, size: int, block_bytes: int) -> AlignedRange:
    """The block-aligned range covering ``[offset, offset+length)`` of content
    of ``size`` bytes. The caller has checked the range lies inside the content."""
    if offset < 0 or length < 0 or offset + length > size:
        raise InvariantViolation(f"range [{offset}, {offset + length}) outside {size} bytes")
    if length == 0:
        return AlignedRange(offset, 0, offset, 0, offset // block_bytes, 0)
    first = offset // block_bytes
    last = (offset + length - 1) // block_bytes
    start = first * block_bytes
    end = min((last + 1) * block_bytes, size)
    return AlignedRange(offset, length, start, end - start, first, last - first + 1)


def block_sum(sums: bytes, index: int) -> int:
    """The checksum of block ``index`` from a packed checksum list."""
    return int(U64.unpack_from(sums, index * U64.size)[0])


def sums_slice(sums: bytes, first: int, count: int) -> bytes:
    return sums[first * U64.size : (first + count) * U64.size]
