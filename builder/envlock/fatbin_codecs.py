"""Decompress fatbin images on the controller: zstd frames (zstandard) and LZ4 blocks (lz4).

``binary/`` lists device code from headers alone and also runs in the agent
on a bare target Python 3.8, which needs no codec. Opening an image (to see
whether a container without an image for the GPU holds kernels at all) is
``envlock inspect``'s work on the controller, where two well-kept C
libraries decode it: ``binary.fatbin`` takes ``decompress_image`` as its
``Decompress``.

The one bound is against decompression bombs: an image may declare at most
``MAX_IMAGE_BYTES`` uncompressed, and decoding stops one byte past what it
declares. Real images are far smaller (the largest seen, cubins of cuDNN's
precompiled engines and of nvshmem, are a few MB); one beyond the bound is
"cannot tell", which the decision counts as "has kernels".
"""

from __future__ import annotations

from envlock.binary.fatbin import FatbinEntry

MAX_IMAGE_BYTES = 256 << 20


def decompress_image(entry: FatbinEntry, payload: bytes) -> bytes | None:
    """The image of a compressed entry from its ``compressed_size`` bytes of payload.

    None when the codec is not one of the two, the declared size is over the
    bound, or the bytes do not decode to exactly the declared size.
    """
    size = entry.uncompressed_size
    if not 0 < size <= MAX_IMAGE_BYTES:
        return None
    # Imported here: most runs open no image, and zstandard alone costs ~15 ms to import.
    import lz4.block
    import zstandard

    image: bytes
    try:
        if entry.compression == "zstd":
            image = _zstd(payload, size)
        elif entry.compression == "lz4":
            image = lz4.block.decompress(payload, uncompressed_size=size)
        else:
            return None
    except (zstandard.ZstdError, lz4.block.LZ4BlockError):
        return None
    return image if len(image) == size else None


def _zstd(payload: bytes, size: int) -> bytes:
    """Every frame of ``payload``, decoded, but never more than ``size + 1`` bytes: a frame
    header may claim any content size, so the output is bounded by what the entry declares."""
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
    out = bytearray()
    while len(out) <= size:
        chunk = reader.read(size + 1 - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)
