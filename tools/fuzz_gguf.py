"""A mutation fuzzer for llmnb's GGUF reader (``llmnb.gguf.open``).

The corpus is real headers: the first KB of the pulled models in the llmnb cache and of the
tiny models in data/models, whole small GGUFs from tests/fixtures, and a "condensed" copy of
each of them (the same keys, types and tensor types, arrays clipped and tensors shrunk, so a
whole file — header, tensor infos and data — fits in a few KB); plus one synthetic file with
what real headers lack (every value type, nested arrays, a custom alignment).

A seeded mutator damages a seed the ways a hostile or broken file can: bytes, integers,
length and count fields, type tags, truncation, splicing with other seeds, duplicated and
deleted entries. It knows where every field of a seed is (``layout``), so most damage lands
on the fields the reader must check.

Each case is written to a file on tmpfs and opened; a parsed file is also read through
(``metadata``, every ``raw`` view, ``inspect``'s summary). The claims checked per case:

* the only exception is ``GGUFError`` (the summary of a parsed file may raise only an
  ``LLMNBError``);
* Python allocation (tracemalloc peak) stays under ``memory_bound(file size)``;
* it finishes within ``--time-limit`` seconds (an interval timer interrupts it; a hang the timer
  cannot interrupt ends the run through ``faulthandler`` after ``--hard-limit`` seconds, leaving
  the case file in the work folder).

Failing inputs are written to tests/fixtures/fuzz/ (``--save``), where tests/test_fuzz.py
replays them, as it replays the smallest input of each error category (``--examples``).
Usage::

    python tools/fuzz_gguf.py -n 1000000 --seed 1 --json fuzz.json        # the long run
    python tools/fuzz_gguf.py -n 40000 --seed 7 --save --examples tests/fixtures/fuzz

tests/test_fuzz.py runs a short fixed-seed run through ``fuzz`` below.
"""
from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import random
import re
import signal
import struct
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import numpy as np

import llmnb
from llmnb.errors import LLMNBError
from llmnb.gguf.constants import ARRAY, GGML_BLOCK_SIZES, SCALAR_FORMATS, STRING
from llmnb.gguf.reader import GGUFError, GGUFFile
from llmnb.gguf.summary import summarize, summary_text
from llmnb.hub import cache_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "fuzz"


def memory_bound(file_bytes: int) -> int:
    """The most Python memory parsing a file of this size may allocate: 64 bytes per file byte
    (a 2-byte string becomes a ~60-byte str; an 8-byte empty array item a list slot) + 1 MiB."""
    return 64 * file_bytes + (1 << 20)


# --- where the fields are -------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    offset: int
    width: int   # 4 or 8
    kind: str    # header | count | length | type | value | ndims | ne | ggml_type | offset


@dataclass
class Seed:
    name: str
    data: bytes
    fields: list[Field]
    spans: list[tuple[int, int]]  # whole key/value pairs and tensor infos, for dup/delete


def layout(data: bytes) -> tuple[list[Field], list[tuple[int, int]]]:
    """Walk a (possibly truncated) GGUF, recording each integer field and entry span;
    stops quietly where the bytes end or stop making sense."""
    fields: list[Field] = [Field(4, 4, "header"), Field(8, 8, "count"), Field(16, 8, "count")]
    spans: list[tuple[int, int]] = []
    if len(data) < 24:
        return fields, spans
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def u(width: int, kind: str) -> int:
        nonlocal pos
        if pos + width > len(data):
            raise IndexError
        fields.append(Field(pos, width, kind))
        v: int = struct.unpack_from("<I" if width == 4 else "<Q", data, pos)[0]
        pos += width
        return v

    def skip_string() -> None:
        nonlocal pos
        n = u(8, "length")
        pos += n

    def value(vtype: int, depth: int) -> None:
        nonlocal pos
        if vtype == STRING:
            skip_string()
        elif vtype in SCALAR_FORMATS:
            size = struct.calcsize(SCALAR_FORMATS[vtype])
            if size in (4, 8) and pos + size <= len(data):
                fields.append(Field(pos, size, "value"))   # e.g. general.alignment
            pos += size
        elif vtype == ARRAY and depth < 8:
            itype = u(4, "type")
            n = u(8, "length")
            if itype in SCALAR_FORMATS:
                pos += n * struct.calcsize(SCALAR_FORMATS[itype])
            else:
                for _ in range(n):
                    value(itype, depth + 1)
                    if pos > len(data):
                        raise IndexError
        else:
            raise IndexError

    try:
        for _ in range(min(n_kv, 1 << 16)):
            start = pos
            skip_string()
            value(u(4, "type"), 0)
            spans.append((start, pos))
        for _ in range(min(n_tensors, 1 << 16)):
            start = pos
            skip_string()
            for _ in range(min(u(4, "ndims"), 4)):
                u(8, "ne")
            u(4, "ggml_type")
            u(8, "offset")
            spans.append((start, pos))
    except (IndexError, struct.error):
        pass
    return [f for f in fields if f.offset + f.width <= len(data)], \
        [s for s in spans if s[1] <= len(data)]


# --- the corpus -----------------------------------------------------------------------------

def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


_NP_TYPES = {np.dtype(v): k for k, v in
             {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4",
              10: "<u8", 11: "<i8", 12: "<f8"}.items()}


def _array(v: object, clip: int) -> bytes:
    if isinstance(v, np.ndarray):
        a = v[:clip]
        itype = 7 if a.dtype == np.bool_ else _NP_TYPES[a.dtype.newbyteorder("<")]
        return struct.pack("<IQ", itype, len(a)) + a.astype(a.dtype.newbyteorder("<")).tobytes()
    assert isinstance(v, list)
    items = v[:clip]
    if items and not all(isinstance(x, str) for x in items):
        return struct.pack("<IQ", ARRAY, len(items)) + b"".join(_array(x, clip) for x in items)
    return struct.pack("<IQ", STRING, len(items)) + b"".join(_s(x.encode()) for x in items)


def condensed(f: GGUFFile, clip: int = 24, max_tensors: int = 12) -> bytes:
    """The same keys, value types and tensor types as `f`, arrays clipped to `clip` items and
    each tensor shrunk to two rows of one or two blocks: a whole, valid, few-KB file."""
    kvs = []
    for k, fld in f.fields.items():
        if fld.value_type == ARRAY:
            body = _array(fld.value, clip)
        elif fld.value_type == STRING:
            body = _s(str(fld.value).encode())
        else:
            body = struct.pack(SCALAR_FORMATS[fld.value_type], fld.value)
        kvs.append(_s(k.encode()) + struct.pack("<I", fld.value_type) + body)
    infos, data = [], b""
    align = f.alignment
    for t in list(f.tensors.values())[:max_tensors]:
        block, bsize = GGML_BLOCK_SIZES[t.ggml_type]
        ne = [block * (1 + len(infos) % 2)] + ([2] if len(t.shape) > 1 else [])
        nbytes = ne[0] // block * bsize * (ne[1] if len(ne) > 1 else 1)
        infos.append(_s(t.name.encode()) + struct.pack("<I", len(ne))
                     + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<IQ", t.ggml_type, len(data)))
        chunk = bytes(random.Random(len(data)).randrange(256) for _ in range(nbytes))
        data += chunk + b"\0" * (-len(chunk) % align)
    head = b"GGUF" + struct.pack("<IQQ", f.version, len(infos), len(kvs)) + b"".join(kvs)
    head += b"".join(infos)
    return head + b"\0" * (-len(head) % align) + data


def synthetic() -> bytes:
    """A small file with what real headers lack: every scalar type, arrays of arrays (three
    deep, and as deep as allowed), a bool array, ``general.alignment`` = 64, and F32, F16 and
    Q8_0 tensors."""
    def kv(key: str, vtype: int, body: bytes) -> bytes:
        return _s(key.encode()) + struct.pack("<I", vtype) + body

    scalars = [kv(f"t.{fmt}", vtype, struct.pack(fmt, 1)) for vtype, fmt in SCALAR_FORMATS.items()]
    inner = struct.pack("<IQ", 0, 3) + b"abc"                             # [u8 x 3]
    nested = struct.pack("<IQ", ARRAY, 2) + (struct.pack("<IQ", ARRAY, 2) + inner * 2) * 2
    # arrays nested as deep as the reader allows, the innermost empty: a count of 1 there is
    # one level too deep
    deep = struct.pack("<IQ", ARRAY, 1) * 7 + struct.pack("<IQ", ARRAY, 0)
    bools = struct.pack("<IQ", 7, 3) + b"\1\0\1"
    strs = struct.pack("<IQ", STRING, 3) + _s(b"a") + _s(b"") + _s("日本".encode())
    kvs = [kv("general.architecture", STRING, _s(b"llama")),
           kv("general.alignment", 4, struct.pack("<I", 64)), *scalars,
           kv("t.nested", ARRAY, nested), kv("t.deep", ARRAY, deep), kv("t.bools", ARRAY, bools),
           kv("t.strs", ARRAY, strs)]
    infos, data = [], b""
    for name, ggml_type, ne in (("a.weight", 0, [32, 2]), ("b.weight", 1, [64]),
                                ("c.weight", 8, [32, 3])):
        block, bsize = GGML_BLOCK_SIZES[ggml_type]
        nbytes = ne[0] // block * bsize * (ne[1] if len(ne) > 1 else 1)
        infos.append(_s(name.encode()) + struct.pack("<I", len(ne))
                     + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml_type, len(data)))
        data += bytes(i % 251 for i in range(nbytes))
        data += b"\0" * (-len(data) % 64)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    return head + b"\0" * (-len(head) % 64) + data


def source_files() -> list[Path]:
    """Real model files (pulled models, tiny models) and the small GGUF test fixtures."""
    cached = cache_dir() / "models"
    files = sorted(cached.glob("*.gguf")) if cached.is_dir() else []
    files += sorted((ROOT / "data" / "models").glob("*.gguf"))
    files += sorted((ROOT / "tests" / "fixtures").glob("*/*.gguf"))
    return [p for p in files if "fuzz" not in p.parts]


def load_corpus(prefix_kb: int = 16, files: list[Path] | None = None) -> list[Seed]:
    """Seeds: each source's first `prefix_kb` KB (whole if smaller) and its condensed copy."""
    seeds = []
    for p in files if files is not None else source_files():
        with open(p, "rb") as fh:
            head = fh.read(prefix_kb << 10)
        seeds.append(Seed(f"{p.name}[:{len(head)}]", head, *layout(head)))
        small = condensed(llmnb.gguf.open(p))
        seeds.append(Seed(f"{p.name}:condensed", small, *layout(small)))
    extra = synthetic()
    seeds.append(Seed("synthetic", extra, *layout(extra)))
    return seeds


# --- the mutator ----------------------------------------------------------------------------

MUTATIONS = ("byte", "int", "length", "type", "truncate", "splice", "dup_delete", "insert")


def _interesting(rng: random.Random, n: int, old: int, width: int) -> int:
    top = (1 << (8 * width)) - 1
    v = rng.choice((0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 16, 31, 32, 33, 63, 64, 127, 128, 255, 256,
                    0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 1 << 40,
                    (1 << 62) - 1, 1 << 62, (1 << 63) - 1, 1 << 63, top, n, n - 1, n + 1, n // 2,
                    old + 1, old - 1, old * 2, old << 8, old >> 1, old ^ (1 << rng.randrange(64)),
                    rng.randrange(1 << 16), rng.getrandbits(64)))
    return v & top


def mutate(rng: random.Random, seed: Seed, corpus: list[Seed]) -> tuple[bytes, str]:
    """One damaged copy of `seed` and the name of the damage (one of MUTATIONS)."""
    data = bytearray(seed.data)
    kind = rng.choice(MUTATIONS)
    n = len(data)
    by_kind = {"length": ("length", "count"), "type": ("type", "ggml_type", "ndims"),
               "int": ("header", "count", "length", "type", "value", "ndims", "ne", "ggml_type",
                       "offset")}
    if kind in by_kind and n >= 8:
        pools: dict[str, list[Field]] = {}
        for f in seed.fields:
            if f.kind in by_kind[kind]:
                pools.setdefault(f.kind, []).append(f)
        if not pools:
            pools["random"] = [Field(rng.randrange(n - 7), 8, "random")]
        kinds = sorted(pools)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            fl = rng.choice(pools[rng.choice(kinds)])   # a kind first: rare fields get their turn
            fmt = "<I" if fl.width == 4 else "<Q"
            old = struct.unpack_from(fmt, data, fl.offset)[0]
            if kind == "type" and rng.random() < 0.7:
                new = rng.choice((rng.randrange(40), old + 1, old - 1 if old else 13, 0xFFFFFFFF))
            else:
                new = _interesting(rng, n - fl.offset, old, fl.width)
            struct.pack_into(fmt, data, fl.offset, new & ((1 << (8 * fl.width)) - 1))
    elif kind == "truncate" and n:
        if seed.fields and rng.random() < 0.6:  # at or just inside a field
            fl = rng.choice(seed.fields)
            cut = fl.offset + rng.choice((0, 1, fl.width - 1, fl.width))
        else:
            cut = rng.randrange(n)
        del data[cut:]
    elif kind == "splice" and n:
        other = rng.choice(corpus).data
        a = rng.randrange(len(other))
        chunk = other[a:a + rng.choice((4, 8, 16, 64, 512))]
        at = rng.randrange(n)
        if rng.random() < 0.5:
            data[at:at + len(chunk)] = chunk
        else:
            data[at:at] = chunk
    elif kind == "dup_delete" and seed.spans:
        a, b = rng.choice(seed.spans)
        if rng.random() < 0.5:
            data[b:b] = data[a:b]        # the same key/value or tensor info twice
        else:
            del data[a:b]                # one entry fewer than the counts say
    elif kind == "insert" and n:
        at = rng.randrange(n)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 4, 8))))
    else:  # "byte" (also the fallback when a seed has no field of the chosen kind)
        kind = "byte"
        for _ in range(rng.choice((1, 2, 4, 8))):
            if not data:
                break
            i = rng.randrange(len(data))
            data[i] = rng.choice((0, 0xFF, 0x7F, 0x80, data[i] ^ (1 << rng.randrange(8)),
                                  rng.randrange(256)))
    return bytes(data), kind


# --- running cases --------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """Raised by the interval timer inside a case that runs past the time limit."""


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise CaseTimeout


def error_category(e: GGUFError) -> str:
    """A GGUFError -> what was wrong, in a few words (for the counts in the report)."""
    f, x = e.field, e.expected
    rules = (("file ends" in x, "truncated"), (f in ("header", "file"), "file too short"),
             (f == "magic", "magic"), (f == "version", "version"),
             (f in ("n_kv", "n_tensors"), "entry counts"), ("UTF-8" in x, "invalid UTF-8"),
             ("array length" in f, "array length"), ("nested" in x, "array nesting"),
             ("array item type" in x, "array item type"), ("known value type" in x, "value type"),
             ("duplicate" in x and f.startswith("metadata"), "duplicate key"),
             ("non-empty key" in x, "empty key"), (f == "general.alignment", "alignment"),
             (f.endswith(" name"), "tensor name"), (f.endswith("n_dims"), "n_dims"),
             ("elements" in x, "element count"), ("non-negative" in x, "dimension"),
             (f.endswith(" type"), "tensor type"),
             ("multiple of" in x and "ne[0]" in f, "block multiple"),
             (f.endswith(" offset"), "tensor offset alignment"), ("overlap" in x, "tensor overlap"),
             ("duplicate" in x, "duplicate tensor"), (f.endswith(" data"), "tensor data bounds"))
    return next((name for cond, name in rules if cond), f"other: {f}")


@dataclass
class Report:
    executions: int = 0
    seconds: float = 0.0
    parsed: int = 0
    errors: Counter[str] = field(default_factory=Counter)       # GGUFError by category
    summary_errors: Counter[str] = field(default_factory=Counter)
    mutations: Counter[str] = field(default_factory=Counter)    # cases tried per mutation
    distinct: Counter[str] = field(default_factory=Counter)     # distinct inputs per mutation
    failures: list[dict[str, object]] = field(default_factory=list)
    max_case_seconds: float = 0.0
    max_peak_ratio: float = 0.0        # tracemalloc peak / memory_bound(size)
    max_peak_bytes: int = 0
    corpus: list[str] = field(default_factory=list)
    reader: str = ""
    examples: dict[str, bytes] = field(default_factory=dict)   # smallest input per category

    def to_json(self) -> dict[str, object]:
        return {"executions": self.executions, "seconds": round(self.seconds, 1),
                "executions_per_second": round(self.executions / max(self.seconds, 1e-9)),
                "reader": self.reader, "parsed_ok": self.parsed,
                "gguf_errors": sum(self.errors.values()),
                "gguf_errors_by_category": dict(self.errors.most_common()),
                "summary_errors": dict(self.summary_errors.most_common()),
                "other_exceptions": len([x for x in self.failures if x["what"] == "exception"]),
                "over_memory_bound": len([x for x in self.failures if x["what"] == "memory"]),
                "over_time_limit": len([x for x in self.failures if x["what"] == "time"]),
                "failures": self.failures[:50],
                "mutations_tried": dict(self.mutations.most_common()),
                "distinct_inputs_by_mutation": dict(self.distinct.most_common()),
                "distinct_inputs": sum(self.distinct.values()),
                "max_case_seconds": round(self.max_case_seconds, 4),
                "max_peak_bytes": self.max_peak_bytes,
                "max_peak_fraction_of_bound": round(self.max_peak_ratio, 4),
                "corpus": self.corpus}


def read_through(path: str) -> str | None:
    """Open, touch every field and tensor view, summarise; -> summary error text or None."""
    with GGUFFile(path) as f:
        assert isinstance(f.metadata, dict)
        for name, info in f.tensors.items():
            assert f.raw(name).nbytes == info.nbytes
        try:
            summary_text(f)
            json.dumps(summarize(f).to_json(), default=str)
        except LLMNBError as e:
            return type(e).__name__
    return None


def run_cases(cases: Iterator[tuple[bytes, str]], work: Path, time_limit: float,
              hard_limit: float, report: Report, save: Path | None) -> None:
    """Run each (input, mutation) case; failures are recorded in `report` (and saved)."""
    path = str(work / "case.gguf")
    seen: set[bytes] = set()
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    tracemalloc.start()
    t_start = time.perf_counter()
    try:
        for data, kind in cases:
            with open(path, "wb") as fh:
                fh.write(data)
            report.executions += 1
            report.mutations[kind] += 1
            digest = hashlib.blake2b(data, digest_size=8).digest()
            if digest not in seen:
                seen.add(digest)
                report.distinct[kind] += 1
            if report.executions % 100 == 1:  # re-arming costs ~0.5 ms: once per 100 cases
                faulthandler.dump_traceback_later(hard_limit, exit=True)
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            what, detail = "", ""
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, time_limit)
            try:
                summary_error = read_through(path)
                signal.setitimer(signal.ITIMER_REAL, 0)
                report.parsed += 1
                if summary_error is not None:
                    report.summary_errors[summary_error] += 1
            except GGUFError as e:
                signal.setitimer(signal.ITIMER_REAL, 0)
                category = error_category(e)
                report.errors[category] += 1
                if len(data) < len(report.examples.get(category, data + b"-")):
                    report.examples[category] = data
            except CaseTimeout:
                what, detail = "time", f"over {time_limit} s"
            except Exception as e:  # noqa: BLE001 - exactly what the fuzzer hunts
                signal.setitimer(signal.ITIMER_REAL, 0)
                what, detail = "exception", f"{type(e).__name__}: {e}"[:300]
            dt = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] - base
            bound = memory_bound(len(data))
            report.max_case_seconds = max(report.max_case_seconds, dt)
            report.max_peak_bytes = max(report.max_peak_bytes, peak)
            report.max_peak_ratio = max(report.max_peak_ratio, peak / bound)
            if not what and peak > bound:
                what, detail = "memory", f"peak {peak} bytes > bound {bound}"
            if what:
                report.failures.append(_record_failure(data, kind, what, detail, save))
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        tracemalloc.stop()
        report.seconds += time.perf_counter() - t_start


def _record_failure(data: bytes, kind: str, what: str, detail: str,
                    save: Path | None) -> dict[str, object]:
    name = f"{what}-{hashlib.sha256(data).hexdigest()[:12]}.gguf"
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / name).write_bytes(data)
    return {"what": what, "mutation": kind, "detail": detail, "bytes": len(data), "file": name}


def fuzz(executions: int, seed: int = 0, corpus: list[Seed] | None = None,
         time_limit: float = 2.0, hard_limit: float = 60.0, save: Path | None = None,
         report_every: int = 0, checkpoint: Path | None = None) -> Report:
    """Run `executions` mutated cases (seeded: the same seed gives the same inputs); every
    `report_every` cases, a progress line on stderr and the report so far in `checkpoint`."""
    corpus = corpus if corpus is not None else load_corpus()
    rng = random.Random(seed)
    report = Report(corpus=[s.name for s in corpus], reader=reader_build())

    def cases() -> Iterator[tuple[bytes, str]]:
        for s in corpus:   # every seed once, unchanged
            yield s.data, "seed"
        for i in range(executions - len(corpus)):
            if report_every and i and i % report_every == 0:
                elapsed = time.perf_counter() - t0
                print(json.dumps({"executions": report.executions,
                                  "per_second": round(report.executions / elapsed),
                                  "failures": len(report.failures)}), file=sys.stderr, flush=True)
                if checkpoint is not None:
                    so_far = {**report.to_json(), "seconds": round(elapsed, 1),
                              "executions_per_second": round(report.executions / elapsed)}
                    checkpoint.write_text(json.dumps(so_far, indent=2) + "\n")
            yield mutate(rng, rng.choice(corpus), corpus)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmnb-fuzz-", dir=_tmpfs()) as work:
        run_cases(cases(), Path(work), time_limit, hard_limit, report, save)
    return report


def save_examples(report: Report, folder: Path) -> None:
    """The smallest input of each GGUFError category -> folder/<category>.gguf, and
    folder/examples.json mapping each file to its category (tests/test_fuzz.py replays them)."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for category, data in sorted(report.examples.items()):
        name = re.sub(r"[^a-z0-9]+", "_", category.lower()).strip("_") + ".gguf"
        (folder / name).write_bytes(data)
        manifest[name] = category
    (folder / "examples.json").write_text(json.dumps(manifest, indent=1) + "\n")


def _tmpfs() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def reader_build() -> str:
    import llmnb.gguf.reader as reader
    return "compiled (mypyc)" if not reader.__file__.endswith(".py") else "pure Python"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--executions", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix-kb", type=int, default=16, help="KB of each real file to keep (16)")
    ap.add_argument("--time-limit", type=float, default=2.0, help="seconds per case (2)")
    ap.add_argument("--hard-limit", type=float, default=60.0,
                    help="seconds after which a case that ignores the timer ends the run (60)")
    ap.add_argument("--save", nargs="?", const=str(FIXTURES), metavar="DIR",
                    help=f"write failing inputs to DIR (default {FIXTURES})")
    ap.add_argument("--json", metavar="PATH", help="write the report here")
    ap.add_argument("--examples", metavar="DIR",
                    help="write the smallest input of each error category to DIR")
    a = ap.parse_args()
    report = fuzz(a.executions, a.seed, load_corpus(a.prefix_kb), a.time_limit, a.hard_limit,
                  Path(a.save) if a.save else None, report_every=50_000,
                  checkpoint=Path(a.json) if a.json else None)
    if a.examples:
        save_examples(report, Path(a.examples))
    text = json.dumps(report.to_json(), indent=2)
    if a.json:
        Path(a.json).write_text(text + "\n")
    print(text)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
