"""LZ4 block decompression in pure Python (fatbin flag 0x2000).

The standard library has no LZ4 and this package must run on a bare target
Python, so the ~30 lines of the block format live here. Only small images
are ever decompressed (to see whether a container has kernels), so speed
does not matter. Format: https://github.com/lz4/lz4/blob/dev/doc/lz4_Block_format.md
"""

from __future__ import annotations

from typing import Tuple


class Lz4Error(ValueError):
    """The bytes are not a valid LZ4 block of the expected size."""


def decompress_block(data: bytes, size: int) -> bytes:
    """Decode one LZ4 block into exactly ``size`` bytes.

    fatbin pads the compressed payload, so decoding stops at ``size`` output
    bytes instead of at the end of the input.
    """
    out = bytearray()
    pos, end = 0, len(data)
    while len(out) < size:
        if pos >= end:
            raise Lz4Error(f"input ends after {len(out)} of {size} bytes")
        token = data[pos]
        pos += 1
        literals, pos = _length(data, pos, token >> 4)
        out += data[pos : pos + literals]
        pos += literals
        if len(out) >= size:
            break
        if pos + 2 > end:
            raise Lz4Error("truncated match offset")
        offset = data[pos] | data[pos + 1] << 8
        pos += 2
        if offset == 0 or offset > len(out):
            raise Lz4Error(f"match offset {offset} out of range")
        match, pos = _length(data, pos, token & 0xF)
        match += 4
        start = len(out) - offset
        if offset >= match:
            out += out[start : start + match]
        else:  # overlapping copy repeats the last ``offset`` bytes
            chunk = out[start:]
            out += (chunk * (match // offset + 1))[:match]
    if len(out) != size:
        raise Lz4Error(f"decoded {len(out)} bytes, expected {size}")
    return bytes(out)


def _length(data: bytes, pos: int, value: int) -> Tuple[int, int]:
    if value == 15:
        while True:
            if pos >= len(data):
                raise Lz4Error("truncated length")
            byte = data[pos]
            pos += 1
            value += byte
            if byte != 255:
                break
    return value, pos
