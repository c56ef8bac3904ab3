"""Zstandard frame decompression in pure Python (fatbin flag 0x8000).

nvcc 13 compresses fatbin images with zstd, the standard library gains zstd
only in 3.14, and this package must run on a bare target Python 3.8. It is
used for one thing: opening a small image (a few KB, such as the device-link
container nvcc adds to every shared build) to see whether it holds kernels.
Speed is therefore secondary to being small and following RFC 8878 closely;
section numbers below refer to it. Dictionaries are not supported (fatbin
does not use them) and the optional checksum is not verified.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

_MAGIC = b"\x28\xb5\x2f\xfd"


class ZstdError(ValueError):
    """The bytes are not a zstd frame this decoder can read."""


def decompress(data: bytes, limit: int) -> bytes:
    """Decode every frame in ``data`` (skippable frames are skipped); at most ``limit`` bytes."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        magic = data[pos : pos + 4]
        if len(magic) < 4:
            raise ZstdError("truncated frame magic")
        if magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50:  # skippable frame
            size = int.from_bytes(data[pos + 4 : pos + 8], "little")
            pos += 8 + size
            continue
        if magic != _MAGIC:
            if not data[pos:].strip(b"\0"):
                break  # fatbin pads the payload with zeros
            raise ZstdError(f"bad magic at {pos}")
        pos = _Frame(data, pos + 4, out, limit).decode()
    return bytes(out)


# --- bit streams (3.1.1.3.1.x) -------------------------------------------------


class _ForwardBits:
    """Little-endian bit reader, used by FSE table descriptions."""

    def __init__(self, data: bytes, start: int) -> None:
        self.data, self.start, self.bit = data, start, 0

    def read(self, n: int) -> int:
        byte = self.start + (self.bit >> 3)
        chunk = int.from_bytes(self.data[byte : byte + 8], "little")
        value = (chunk >> (self.bit & 7)) & ((1 << n) - 1)
        self.bit += n
        return value

    def peek(self, n: int) -> int:
        value = self.read(n)
        self.bit -= n
        return value

    def end(self) -> int:
        return self.start + (self.bit + 7) // 8


class _BackwardBits:
    """Reads a stream from its end, after the highest set bit of the last byte.

    ``left`` counts the unread bits; reading past the start yields zeros and
    makes ``left`` negative, which decoders use to detect the end.
    """

    def __init__(self, data: bytes) -> None:
        if not data or data[-1] == 0:
            raise ZstdError("backward bit stream without end marker")
        self.data = data
        self.left = len(data) * 8 - (9 - data[-1].bit_length())

    def read(self, n: int) -> int:
        if n == 0:
            return 0
        self.left -= n
        pos = self.left
        if pos >= 0:
            chunk = int.from_bytes(self.data[pos >> 3 : (pos + n + 7) >> 3], "little")
            return (chunk >> (pos & 7)) & ((1 << n) - 1)
        if pos + n <= 0:
            return 0
        chunk = int.from_bytes(self.data[: (pos + n + 7) >> 3], "little")
        return (chunk << -pos) & ((1 << n) - 1)

    def peek(self, n: int) -> int:
        value = self.read(n)
        self.left += n
        return value


# --- FSE (4.1) -----------------------------------------------------------------

_FseTable = Tuple[int, List[Tuple[int, int, int]]]  # accuracy log, [(symbol, bits, base)]


def _read_distribution(bits: _ForwardBits, max_log: int, max_symbols: int) -> Tuple[int, List[int]]:
    log = bits.read(4) + 5
    if log > max_log:
        raise ZstdError(f"FSE accuracy log {log} over {max_log}")
    remaining = (1 << log) + 1
    threshold = 1 << log
    nbits = log + 1
    counts: List[int] = []
    while remaining > 1 and len(counts) < max_symbols:
        limit = (2 * threshold - 1) - remaining
        low = bits.peek(nbits - 1)
        if low < limit:
            count = low
            bits.read(nbits - 1)
        else:
            count = bits.read(nbits)
            if count >= threshold:
                count -= limit
        count -= 1
        remaining -= abs(count)
        counts.append(count)
        if count == 0:
            while True:
                repeat = bits.read(2)
                counts.extend([0] * repeat)
                if repeat != 3:
                    break
        while remaining < threshold:
            nbits -= 1
            threshold >>= 1
    if remaining != 1 or len(counts) > max_symbols:
        raise ZstdError("bad FSE distribution")
    return log, counts


def _build_table(log: int, counts: Sequence[int]) -> _FseTable:
    size = 1 << log
    symbols = [0] * size
    high = size - 1
    next_state = [0] * len(counts)
    for symbol, count in enumerate(counts):
        if count == -1:
            symbols[high] = symbol
            high -= 1
            next_state[symbol] = 1
        else:
            next_state[symbol] = count
    step = (size >> 1) + (size >> 3) + 3
    position = 0
    for symbol, count in enumerate(counts):
        for _ in range(max(count, 0)):
            symbols[position] = symbol
            position = (position + step) & (size - 1)
            while position > high:
                position = (position + step) & (size - 1)
    if position != 0:
        raise ZstdError("FSE table spread did not close")
    table = []
    for symbol in symbols:
        state = next_state[symbol]
        next_state[symbol] += 1
        nbits = log - (state.bit_length() - 1)
        table.append((symbol, nbits, (state << nbits) - size))
    return log, table


def _rle_table(symbol: int) -> _FseTable:
    return 0, [(symbol, 0, 0)]


# --- Huffman literals (4.2) ----------------------------------------------------

_Huffman = Tuple[int, List[Tuple[int, int]]]  # max bits, [(symbol, bits)] indexed by peek


def _huffman_weights(data: bytes, pos: int) -> Tuple[List[int], int]:
    header = data[pos]
    pos += 1
    if header >= 128:  # direct 4-bit weights
        count = header - 127
        raw = data[pos : pos + (count + 1) // 2]
        weights = []
        for byte in raw:
            weights += [byte >> 4, byte & 0xF]
        return weights[:count], pos + (count + 1) // 2
    end = pos + header
    forward = _ForwardBits(data[:end], pos)
    log, counts = _read_distribution(forward, 6, 256)
    _, table = _build_table(log, counts)
    bits = _BackwardBits(data[forward.end() : end])
    states = [bits.read(log), bits.read(log)]
    weights = []
    which = 0
    while len(weights) < 255:
        symbol, nbits, base = table[states[which]]
        weights.append(symbol)
        states[which] = base + bits.read(nbits)
        if bits.left < 0:
            weights.append(table[states[1 - which]][0])
            break
        which = 1 - which
    return weights, end


def _huffman_table(weights: List[int]) -> _Huffman:
    total = sum(1 << (w - 1) for w in weights if w)
    if not total:
        raise ZstdError("empty Huffman tree")
    max_bits = total.bit_length()
    rest = (1 << max_bits) - total
    if rest & (rest - 1):
        raise ZstdError("Huffman weights do not complete a tree")
    weights = [*weights, rest.bit_length()]
    if max_bits > 11:
        raise ZstdError("Huffman code longer than 11 bits")
    table: List[Tuple[int, int]] = []
    for weight in range(1, max_bits + 1):
        for symbol, w in enumerate(weights):
            if w == weight:
                table += [(symbol, max_bits + 1 - w)] * (1 << (w - 1))
    return max_bits, table


def _huffman_stream(data: bytes, count: int, huffman: _Huffman) -> bytes:
    max_bits, table = huffman
    bits = _BackwardBits(data)
    out = bytearray()
    for _ in range(count):
        symbol, nbits = table[bits.peek(max_bits)]
        out.append(symbol)
        bits.read(nbits)
    if bits.left != 0:
        raise ZstdError("Huffman stream not consumed exactly")
    return bytes(out)


# --- sequences (3.1.1.3.2) -------------------------------------------------------

_LL_BASE = [*list(range(16)), 16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096]
_LL_BASE += [8192, 16384, 32768, 65536]
_LL_BITS = [0] * 16 + [1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
_ML_BASE = [*list(range(3, 35)), 35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051]
_ML_BASE += [4099, 8195, 16387, 32771, 65539]
_ML_BITS = [0] * 32 + [1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
_LL_DEFAULT = [4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1]
_LL_DEFAULT += [-1, -1, -1, -1]
_ML_DEFAULT = [1, 4, 3] + [2] * 6 + [1] * 37 + [-1] * 7
_OF_DEFAULT = [1, 1, 1, 1, 1, 1, 2, 2, 2] + [1] * 15 + [-1] * 5
_PREDEFINED = {
    "ll": _build_table(6, _LL_DEFAULT),
    "of": _build_table(5, _OF_DEFAULT),
    "ml": _build_table(6, _ML_DEFAULT),
}
_LIMITS = {"ll": (9, 36), "of": (8, 32), "ml": (9, 53)}


class _Frame:
    def __init__(self, data: bytes, pos: int, out: bytearray, limit: int) -> None:
        self.data, self.pos, self.out, self.limit = data, pos, out, limit
        self.start = len(out)
        self.repeats = [1, 4, 8]
        self.tables: Dict[str, _FseTable] = {}
        self.huffman: Optional[_Huffman] = None

    def decode(self) -> int:
        data = self.data
        if self.pos >= len(data):
            raise ZstdError("truncated frame header")
        descriptor = data[self.pos]
        self.pos += 1
        fcs_flag, single, checksum, dict_flag = (
            descriptor >> 6,
            descriptor >> 5 & 1,
            descriptor >> 2 & 1,
            descriptor & 3,
        )
        if descriptor & 0x08:
            raise ZstdError("reserved frame header bit set")
        if not single:
            self.pos += 1  # window descriptor: the whole output stays in memory anyway
        dict_size = (0, 1, 2, 4)[dict_flag]
        if int.from_bytes(data[self.pos : self.pos + dict_size], "little"):
            raise ZstdError("zstd dictionaries are not supported")
        self.pos += dict_size + ((1 if single else 0), 2, 4, 8)[fcs_flag]
        last = False
        while not last:
            header = data[self.pos : self.pos + 3]
            if len(header) < 3:
                raise ZstdError("truncated block header")
            value = int.from_bytes(header, "little")
            last, kind, size = bool(value & 1), value >> 1 & 3, value >> 3
            self.pos += 3
            if kind == 0:
                self._emit(data[self.pos : self.pos + size], size)
                self.pos += size
            elif kind == 1:
                self._emit(data[self.pos : self.pos + 1] * size, size)
                self.pos += 1
            elif kind == 2:
                self._compressed_block(data[self.pos : self.pos + size])
                self.pos += size
            else:
                raise ZstdError("reserved block type")
        return self.pos + (4 if checksum else 0)

    def _emit(self, chunk: bytes, size: int) -> None:
        if len(chunk) != size:
            raise ZstdError("truncated block")
        self.out += chunk
        self._check_limit()

    def _check_limit(self) -> None:
        if len(self.out) - self.start > self.limit:
            raise ZstdError(f"output over {self.limit} bytes")

    def _compressed_block(self, block: bytes) -> None:
        literals, pos = self._literals(block)
        self._sequences(block, pos, literals)

    def _literals(self, block: bytes) -> Tuple[bytes, int]:
        b0 = block[0]
        kind, size_format = b0 & 3, b0 >> 2 & 3
        if kind in (0, 1):  # raw, RLE
            if size_format in (0, 2):
                size, pos = b0 >> 3, 1
            elif size_format == 1:
                size, pos = (b0 >> 4) + (block[1] << 4), 2
            else:
                size, pos = (b0 >> 4) + (block[1] << 4) + (block[2] << 12), 3
            if kind == 0:
                return block[pos : pos + size], pos + size
            return block[pos : pos + 1] * size, pos + 1
        header_size, field = {0: (3, 10), 1: (3, 10), 2: (4, 14), 3: (5, 18)}[size_format]
        value = int.from_bytes(block[:header_size], "little") >> 4
        regenerated = value & ((1 << field) - 1)
        compressed = value >> field & ((1 << field) - 1)
        pos = header_size
        end = pos + compressed
        if kind == 2:
            weights, pos = _huffman_weights(block[:end], pos)
            self.huffman = _huffman_table(weights)
        if self.huffman is None:
            raise ZstdError("treeless literals without a previous Huffman table")
        if size_format == 0:
            return _huffman_stream(block[pos:end], regenerated, self.huffman), end
        sizes = [int.from_bytes(block[pos + 2 * i : pos + 2 * i + 2], "little") for i in range(3)]
        pos += 6
        per_stream = (regenerated + 3) // 4
        out = b""
        for i in range(4):
            stream_end = pos + sizes[i] if i < 3 else end
            count = per_stream if i < 3 else regenerated - 3 * per_stream
            out += _huffman_stream(block[pos:stream_end], count, self.huffman)
            pos = stream_end
        return out, end

    def _sequences(self, block: bytes, pos: int, literals: bytes) -> None:
        b0 = block[pos]
        if b0 == 0:
            self._emit(literals, len(literals))
            return
        if b0 < 128:
            count, pos = b0, pos + 1
        elif b0 < 255:
            count, pos = ((b0 - 128) << 8) + block[pos + 1], pos + 2
        else:
            count, pos = block[pos + 1] + (block[pos + 2] << 8) + 0x7F00, pos + 3
        modes = block[pos]
        pos += 1
        if modes & 3:
            raise ZstdError("reserved sequence mode bits set")
        tables = {}
        for name, shift in (("ll", 6), ("of", 4), ("ml", 2)):
            tables[name], pos = self._table(name, modes >> shift & 3, block, pos)
        self.tables.update(tables)
        bits = _BackwardBits(block[pos:])
        (ll_log, ll_table), (of_log, of_table), (ml_log, ml_table) = tables["ll"], tables["of"], tables["ml"]
        ll_state, of_state, ml_state = bits.read(ll_log), bits.read(of_log), bits.read(ml_log)
        out, repeats = self.out, self.repeats
        used = 0
        for index in range(count):
            ll_code, ll_bits, ll_base = ll_table[ll_state]
            of_code, of_bits, of_base = of_table[of_state]
            ml_code, ml_bits, ml_base = ml_table[ml_state]
            if ll_code > 35 or ml_code > 52 or of_code > 31:
                raise ZstdError("sequence code out of range")
            offset_value = (1 << of_code) + bits.read(of_code)
            match = _ML_BASE[ml_code] + bits.read(_ML_BITS[ml_code])
            literal = _LL_BASE[ll_code] + bits.read(_LL_BITS[ll_code])
            offset = self._offset(offset_value, literal, repeats)
            if index + 1 < count:
                ll_state = ll_base + bits.read(ll_bits)
                ml_state = ml_base + bits.read(ml_bits)
                of_state = of_base + bits.read(of_bits)
            if used + literal > len(literals):
                raise ZstdError("sequence reads past the literals")
            out += literals[used : used + literal]
            used += literal
            start = len(out) - offset
            if offset <= 0 or start < self.start:
                raise ZstdError("match offset out of range")
            if offset >= match:
                out += out[start : start + match]
            else:
                chunk = out[start:]
                out += (chunk * (match // offset + 1))[:match]
            self._check_limit()
        if bits.left != 0:
            raise ZstdError("sequence stream not consumed exactly")
        self._emit(literals[used:], len(literals) - used)

    @staticmethod
    def _offset(value: int, literal: int, repeats: List[int]) -> int:
        if value > 3:
            offset = value - 3
        else:
            index = value - 1 if literal else value  # with no literals the codes shift by one
            if index == 0:
                return repeats[0]
            offset = repeats[index] if index < 3 else repeats[0] - 1
            if index == 1:
                repeats[0], repeats[1] = repeats[1], repeats[0]
                return offset
        repeats[2], repeats[1], repeats[0] = repeats[1], repeats[0], offset
        return offset

    def _table(self, name: str, mode: int, block: bytes, pos: int) -> Tuple[_FseTable, int]:
        if mode == 0:
            return _PREDEFINED[name], pos
        if mode == 1:
            return _rle_table(block[pos]), pos + 1
        if mode == 2:
            max_log, max_symbols = _LIMITS[name]
            bits = _ForwardBits(block, pos)
            log, counts = _read_distribution(bits, max_log, max_symbols)
            return _build_table(log, counts), bits.end()
        if name not in self.tables:
            raise ZstdError("repeat mode without a previous table")
        return self.tables[name], pos
