#!/usr/bin/env python3
"""format_conformance.py — a second, independent decoder of proto/FORMAT.md, run on the golden blobs.

It is written from the specification alone (plain Python, no shared code with
the C codec) and decodes every tests/data/golden/*.lct back to its .in file,
so the document is shown to be complete and the reference codec to follow it.
"""
import pathlib
import struct
import sys


def require(cond, message):
    """A check that stays when Python runs with -O (unlike assert)."""
    if not cond:
        raise SystemExit(f"format_conformance: {message}")

DTYPES = {0: ("raw", 1, 0), 1: ("f32", 4, 10), 2: ("bf16", 2, 10), 3: ("f16", 2, 7),
          4: ("f8e4m3", 1, 6), 5: ("f8e5m2", 1, 7)}
CHUNK, LANES, LANE, FORWARD, MAXLEN = 16384, 32, 512, 256, 12


def check(data, base):
    data = data + b"\0" * (-len(data) % 4)
    h = 0
    for j, (w,) in enumerate(struct.iter_unpack("<I", data)):
        h += w * ((2 * (base + j) + 1) * 0x9E3779B1)
    return h % (1 << 32)


class Bits:
    def __init__(self, data, start_bit):
        self.v, self.pos, self.start = int.from_bytes(data, "little"), start_bit, start_bit

    def read(self, n):
        x = (self.v >> self.pos) & ((1 << n) - 1)
        self.pos += n
        return x


class BitsDown:
    """Reads a stream from bit `top` down: the first bit read is the result's bit 0."""
    def __init__(self, value, top):
        self.v, self.pos = value, top

    def read(self, n):
        x = 0
        for i in range(n):
            require(self.pos > 0, "mirrored code runs below the stream")
            self.pos -= 1
            x |= ((self.v >> self.pos) & 1) << i
        return x


def canonical_codes(lens):
    """{(length, code as read LSB-first from the stream): symbol}"""
    table, code, prev = {}, 0, 0
    for sym in sorted((s for s in range(len(lens)) if lens[s]), key=lambda s: (lens[s], s)):
        code <<= lens[sym] - prev
        prev = lens[sym]
        table[(prev, int(format(code, f"0{prev}b")[::-1], 2))] = sym
        code += 1
    return table


def read_symbol(code, codes, n_syms, s):
    """One step's symbol: its code read bit by bit, and an ESC's raw symbol."""
    length, bits = 1, code.read(1)
    while (length, bits) not in codes:
        bits |= code.read(1) << length
        length += 1
        require(length <= MAXLEN, "invalid code")
    sym = codes[(length, bits)]
    return code.read(s) if sym == n_syms - 1 else sym


def lane_steps(version, n, w):
    """Per lane, the chunk elements of its steps in order (FORMAT.md, "Lanes")."""
    if version == 1:
        return [list(range(t * LANE, min(n, (t + 1) * LANE))) for t in range(LANES)]
    per_word = 4 // w
    return [[e for j in range(LANE) for e in [32 * per_word * (j // per_word) + per_word * t + j % per_word] if e < n]
            for t in range(LANES)]


def lane_streams(section, bits, version):
    """The 32 lane streams of a section as Bits readers (FORMAT.md, "Interleaved sections")."""
    if version == 1:
        starts = [sum(bits[:t]) for t in range(LANES)]
        return [Bits(section, start) for start in starts]
    rows = min(b // 32 for b in bits)
    up, down = (rows + 1) // 2, rows // 2
    words = [struct.unpack_from("<I", section, 4 * i)[0] for i in range(32 * rows)]
    tail = Bits(section[128 * rows:], 0)
    streams = []
    for t in range(LANES):
        value = sum(words[32 * i + t] << (32 * i) for i in range(up))
        value |= tail.read(bits[t] - 32 * rows) << (32 * up)
        value |= sum(words[32 * (up + j) + t] << (bits[t] - 32 * (down - j)) for j in range(down))
        streams.append(Bits(value.to_bytes(-(-bits[t] // 8) + 8, "little"), 0))
    return streams


def decode(blob):
    version = blob[4]
    require(blob[:4] == b"LCTZ" and version in (1, 2) and blob[6] == MAXLEN and blob[7] == 0,
            "bad magic, version or code length limit")
    name, w, s = DTYPES[blob[5]]
    n_elems, n_chunks, cb_bytes, hcheck, reserved, size = struct.unpack_from("<QIIIIQ", blob, 8)
    require(size == len(blob) and reserved == 0 and n_chunks == -(-n_elems // CHUNK), "blob_size, reserved or chunk count wrong")
    require(hcheck == check(blob[:24] + blob[40:40 + cb_bytes], 0), "header check mismatch")
    n_syms = (1 << s) + 1 if s else 0
    require(cb_bytes == (n_syms + 1) // 2, "codebook size wrong")
    lens = [(blob[40 + i // 2] >> (4 * (i & 1))) & 15 for i in range(n_syms)]
    codes = canonical_codes(lens)
    table = 40 + cb_bytes + (-cb_bytes % 8)
    offsets = list(struct.unpack_from(f"<{n_chunks}Q", blob, table)) + [size]
    require(not n_chunks or offsets[0] == table + 8 * n_chunks, "first chunk not right after the table")
    m = 8 * w - s
    out = bytearray()
    for c in range(n_chunks):
        ch = blob[offsets[c]:offsets[c + 1]]
        n = min(CHUNK, n_elems - c * CHUNK)
        mode, trim = ch[0], ch[1]
        if mode == 0:
            raw = ch[8:8 + n * w]
        else:
            lane_bits = struct.unpack_from("<32H", ch, 8)
            keep = m - trim
            mant_bytes = -(-(n * keep) // 8)
            mant_bytes += -mant_bytes % 4
            steps = lane_steps(version, n, w)
            mants = lane_streams(ch[72:72 + mant_bytes], [len(st) * keep for st in steps], version)
            codes_in = lane_streams(ch[72 + mant_bytes:], lane_bits, version)
            elems = [0] * n
            for t in range(LANES):
                code, mant = codes_in[t], mants[t]
                # Version 2 codes steps from FORWARD on mirrored, read down from the stream's end.
                forward = len(steps[t]) if version == 1 else min(len(steps[t]), FORWARD)
                down = BitsDown(code.v, code.start + lane_bits[t])
                for j in list(range(forward)) + list(range(len(steps[t]) - 1, forward - 1, -1)):
                    sym = read_symbol(code if j < forward else down, codes, n_syms, s)
                    mant.pos = mant.start + j * keep
                    elems[steps[t][j]] = (sym << m) | (mant.read(keep) << trim)
                require(code.pos == down.pos, "lane halves do not meet at the lane bit length")
            raw = b"".join(x.to_bytes(w, "little") for x in elems)
        require(check(raw, c * CHUNK * w // 4) == struct.unpack_from("<I", ch, 4)[0], "chunk check mismatch")
        out += raw
    return bytes(out)


def main(golden_dir):
    golden = pathlib.Path(golden_dir)
    blobs = sorted(golden.glob("*.lct")) + sorted(golden.glob("v1/*.lct"))
    require(blobs, "no golden blobs")
    for blob in blobs:
        expected = (golden / blob.name).with_suffix(".in").read_bytes()
        got = decode(blob.read_bytes())
        require(got == expected, f"{blob.name}: decoded bytes differ")
        print(f"{blob.relative_to(golden)}: ok (version {blob.read_bytes()[4]}, {len(expected)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "data" / "golden")
