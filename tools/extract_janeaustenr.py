"""Extract one novel from Debian's r-cran-janeaustenr package as plain UTF-8 text.

The package stores its six novels as R character vectors (one element per printed line) in
an installed-package lazy-load database (``data/Rdata.rdx`` index + ``data/Rdata.rdb``
records, each a zlib-compressed R serialization in XDR format). This reads that database
with a minimal R-unserializer (only the types these files use) so no R install is needed.

    apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*_all.deb pkg
    python tools/extract_janeaustenr.py pkg/usr/lib/R/site-library/janeaustenr/data \
        persuasion data/text/persuasion.txt
"""
from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import sys
import zlib
from pathlib import Path
from typing import Any


class RReader:
    """Just enough of R's XDR unserialize for character vectors and named lists."""

    def __init__(self, buf: bytes) -> None:
        assert buf[:2] == b"X\n", "not an XDR R serialization"
        self.buf, self.pos = buf, 2
        self.refs: list[Any] = []                   # symbols, for REFSXP back-references
        version = self.read_int()
        self.read_int(), self.read_int()                      # writer and minimal reader versions
        if version == 3:
            n = self.read_int()                          # native encoding name, skipped
            self.pos += n

    def read_int(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def length(self) -> int:
        n = self.read_int()
        return n if n != -1 else (self.read_int() << 32) + self.read_int()

    def item(self) -> Any:
        flags = self.read_int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 253, 242, 241, 247, 251, 252):   # NULL, environments, markers
            return None
        if kind == 255:                                    # REFSXP
            return self.refs[(flags >> 8) - 1]
        if kind == 1:                                      # SYMSXP
            sym = self.item()
            self.refs.append(sym)
            return sym
        if kind == 9:                                      # CHARSXP
            n = self.read_int()
            if n == -1:
                return None
            s = self.buf[self.pos:self.pos + n].decode("utf-8")
            self.pos += n
            return s
        if kind == 2:                                      # LISTSXP (pairlist) -> dict
            out: dict[Any, Any] = {}
            while kind == 2:
                if has_attr:
                    self.item()                            # a cell's attributes: unused
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.read_int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            assert kind == 254, f"pairlist ends in type {kind}"
            return out
        if kind in (16, 19):                               # STRSXP, VECSXP
            value: Any = [self.item() for _ in range(self.length())]
        elif kind in (10, 13):                             # LGLSXP, INTSXP
            n = self.length()
            value = list(struct.unpack_from(f">{n}i", self.buf, self.pos))
            self.pos += 4 * n
        elif kind == 14:                                   # REALSXP
            n = self.length()
            value = list(struct.unpack_from(f">{n}d", self.buf, self.pos))
            self.pos += 8 * n
        else:
            raise ValueError(f"R type {kind} not handled")
        if has_attr:
            attrs = self.item()
            if kind == 19 and "names" in attrs:
                value = dict(zip(attrs["names"], value))
        return value


def unpack_record(raw: bytes) -> bytes:
    """A lazy-load record: 4-byte big-endian length, then zlib data, or with a type byte
    after the length: '2' bzip2, 'X' xz, 'Z' zlib, '0' stored (R's serialize.c)."""
    (n,) = struct.unpack_from(">I", raw, 0)
    kind = raw[4:5]
    if kind == b"2":
        out = bz2.decompress(raw[5:])
    elif kind == b"X":
        out = lzma.decompress(raw[5:])
    elif kind == b"Z":
        out = zlib.decompress(raw[5:])
    elif kind == b"0":
        out = raw[5:]
    else:
        out = zlib.decompress(raw[4:])
    assert len(out) == n, "record length does not match its header"
    return out


def main(data_dir: str, name: str, out_path: str) -> None:
    # The index is a gzip-compressed saveRDS file.
    index = RReader(gzip.decompress(Path(data_dir, "Rdata.rdx").read_bytes())).item()
    offset, size = index["variables"][name]
    db = Path(data_dir, "Rdata.rdb").read_bytes()
    lines: list[str] = RReader(unpack_record(db[offset:offset + size])).item()
    text = "\n".join(line.rstrip() for line in lines).strip("\n") + "\n"
    Path(out_path).write_text(text, encoding="utf-8", newline="\n")
    print(f"{out_path}: {len(lines)} lines, {len(text.split())} words, {len(text.encode())} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:4])
