#!/usr/bin/env python3
"""format_conformance.py — a second, independent decoder of proto/FORMAT.md, run on the golden blobs.

It is written from the specification alone (plain Python, no shared code with
the C codec) and decodes every tests/data/golden/*.lct (format version 2) and
tests/data/golden/v1/*.lct (version 1) back to its .in file, so the document
is shown to be complete and the reference codec to follow it.
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
CHUNK, MAXLEN = 16384, 12
# Per version: lanes per chunk, elements per lane, coded chunk header bytes.
CODED_CHUNKS = {1: (32, 512, 72), 2: (64, 256, 104)}


def check(data, base):
    data = data + b"\0" * (-len(data) % 4)
    h = 0
    for j, (w,) in enumerate(struct.iter_unpack("<I", data)):
        h += w * ((2 * (base + j) + 1) * 0x9E3779B1)
    return h % (1 << 32)


class Bits:
    def __init__(self, data, start_bit):
        self.v, self.pos = int.from_bytes(data, "little"), start_bit

    def read(self, n):
        x = (self.v >> self.pos) & ((1 << n) - 1)
        self.pos += n
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


def decode(blob):
    require(blob[:4] == b"LCTZ" and blob[4] in CODED_CHUNKS and blob[6] == MAXLEN and blob[7] == 0,
            "bad magic, version or code length limit")
    lanes, lane, header = CODED_CHUNKS[blob[4]]
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
            if blob[4] == 1:
                lane_bits = struct.unpack_from("<32H", ch, 8)
            else:
                fields = Bits(ch[8:104], 0)
                lane_bits = [fields.read(12) for _ in range(lanes)]
            keep = m - trim
            mant_bytes = -(-(n * keep) // 8)
            mant_bytes += -mant_bytes % 4
            mant = Bits(ch[header:header + mant_bytes], 0)
            code = Bits(ch[header + mant_bytes:], 0)
            vals = []
            for t in range(lanes):
                lane_start = code.pos
                for _ in range(max(0, min(lane, n - t * lane))):
                    length, bits = 1, code.read(1)
                    while (length, bits) not in codes:
                        bits |= code.read(1) << length
                        length += 1
                        require(length <= MAXLEN, "invalid code")
                    sym = codes[(length, bits)]
                    if sym == n_syms - 1:
                        sym = code.read(s)
                    vals.append(sym)
                require(code.pos - lane_start == lane_bits[t], "lane bit length mismatch")
            raw = b"".join(((sym << m) | (mant.read(keep) << trim)).to_bytes(w, "little") for sym in vals)
        require(check(raw, c * CHUNK * w // 4) == struct.unpack_from("<I", ch, 4)[0], "chunk check mismatch")
        out += raw
    return bytes(out)


def main(golden_dir):
    golden_dir = pathlib.Path(golden_dir)
    for version, blobs in ((2, sorted(golden_dir.glob("*.lct"))), (1, sorted(golden_dir.glob("v1/*.lct")))):
        require(blobs, f"no golden blobs of version {version}")
        for blob in blobs:
            data = blob.read_bytes()
            require(data[4] == version, f"{blob.name}: not a version {version} blob")
            expected = (golden_dir / blob.name).with_suffix(".in").read_bytes()
            got = decode(data)
            require(got == expected, f"{blob.name} (version {version}): decoded bytes differ")
            print(f"{blob.name} (version {version}): ok ({len(expected)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "data" / "golden")
