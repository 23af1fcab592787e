"""This machine's limits, measured: the two roofs of the roofline model and what sets them.

A roofline needs two numbers per thread count: the peak FLOP/s (here: float32 sgemm
measured, the operation a diffusion step repeats, so a fraction of it is a "fraction of
measured sgemm", not of a theoretical peak) and the memory bandwidth. The memory roof is read
from a curve: the bandwidth of a read-only sum (decoding reads weights and writes almost
nothing) over working sets from inside L1 to far past every cache (at least 1 GiB and 8x the
largest cache the OS reports, as far as a quarter of the free memory allows), at each thread
count. The curve falls in steps as the set outgrows each cache and ends flat where every pass
comes from DRAM; that plateau (``peaks.plateau``, found from the curve, not from the cache
sizes, which a VM may invent) is the memory roof, and the largest size still clearly above it
is the cache edge: a working set up to there is read from cache (``where``, ``residency``).
STREAM's copy and triad (McCalpin 1995) and the float32 matrix @ vector product (the GEMV an
f32 decode repeats: what one engine achieves on one layout, not the machine's limit) are
reported beside it, each labelled with where its arrays sit on the curve. Beside them: the
CPU, its physical cores and caches (from /sys), the BLAS library and kernel threadpoolctl
reports, and whether OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE force a kernel.

One measurement serves every notebook and ``llmnb bench``: ``probe`` keeps it as JSON under the
llmnb cache (``$LLMNB_HOME`` or ``~/.cache/llmnb``)/machine/, dated and tied to the machine's
fingerprint (CPU model, logical and physical cores, reported caches, total memory, BLAS kernel,
llmnb's integer-kernel ISA), and measures again when it is older than ``MAX_AGE_DAYS``, when the
fingerprint changed, when a thread count is missing, or when asked (``refresh=True``). Every
figure is a median after a warm-up; on a shared machine it is noisy.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from llmnb.errors import UsageError
from llmnb.hub import cache_dir
from llmnb.output import atomic_path
from llmnb.perf.peaks import (SMALLEST, CurvePoint, Plateau, curve_sizes, gemv_bandwidth,
                              plateau, read_curve, sgemm_gflops, stream_bandwidth)
from llmnb.perf.roofline import Roof
from llmnb.perf.threads import threads as use_threads

CACHE_VERSION: Final = 3
MEMORY_ROOFS: Final = ("read", "gemv", "triad", "copy")
MAX_AGE_DAYS: Final = 7          # a week: long enough that a course's notebooks share one
                                 # measurement, short enough that a changed machine shows
CURVE_FLOOR: Final = 1 << 30     # the curve reaches at least 1 GiB ...
CACHE_FACTOR: Final = 8          # ... and 8x the largest cache the OS reports
MEMORY_SHARE: Final = 0.25       # ... but its array takes at most a quarter of MemAvailable


# --- what the machine says about itself ------------------------------------------------

def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def physical_cores() -> int:
    """Distinct (package, core) pairs in /sys topology; the logical CPU count if unreadable."""
    cores: set[tuple[str, str]] = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*"):
        try:
            package = (cpu / "topology" / "physical_package_id").read_text().strip()
            core = (cpu / "topology" / "core_id").read_text().strip()
        except OSError:
            continue
        cores.add((package, core))
    return len(cores) if cores else (os.cpu_count() or 1)


def _size_bytes(text: str) -> int:
    """/sys cache sizes read '48K', '1024K', '32768K' (or a plain byte count)."""
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if m is None:
        return 0
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def cache_sizes() -> dict[str, int]:
    """Bytes per instance of each cache level seen by CPU 0: 'L1d', 'L1i', 'L2', 'L3'."""
    out: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index[0-9]*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = size
    return out


def blas_info() -> list[dict[str, Any]]:
    """numpy's BLAS as threadpoolctl sees it: library, version, kernel (architecture), threads."""
    from threadpoolctl import threadpool_info

    return [{k: info.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def is_compiled(module: str = "llmnb.gguf.reader") -> bool:
    """True when `module` (by default the GGUF reader, which every compiled build compiles)
    was imported as a mypyc-compiled extension module rather than its ``.py`` file."""
    import importlib

    return not (importlib.import_module(module).__file__ or "").endswith(".py")


def meminfo(name: str) -> int:
    """A /proc/meminfo figure in bytes ('MemTotal', 'MemAvailable'); 0 where unreadable."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def kernel_isa() -> str:
    """The integer-kernel build llmnb runs here ('vnni512', 'avx2' ...; 'float': none)."""
    from llmnb.kernels.isa import integer_isa

    return integer_isa() or "float"


@dataclass(frozen=True)
class ProbeSizes:
    """How big each measurement is: sgemm's n, each STREAM array, GEMV's matrix; repeats;
    the read curve's largest working set (0: automatic, ``curve_target``) and smallest."""

    sgemm_n: int
    stream_bytes: int
    gemv_bytes: int
    repeats: int
    curve_bytes: int = 0
    curve_smallest: int = SMALLEST

    def key(self) -> str:
        return (f"{self.sgemm_n}-{self.stream_bytes}-{self.gemv_bytes}-{self.repeats}-"
                f"{self.curve_bytes}-{self.curve_smallest}")


FULL: Final = ProbeSizes(sgemm_n=2048, stream_bytes=128 << 20, gemv_bytes=256 << 20, repeats=5)
QUICK: Final = ProbeSizes(sgemm_n=1024, stream_bytes=48 << 20, gemv_bytes=96 << 20, repeats=5)


def curve_target(caches: dict[str, int], sizes: ProbeSizes = FULL) -> int:
    """How far the read curve should reach: `sizes.curve_bytes` when set, else at least 1 GiB
    and 8x the largest cache the OS reports (so the plateau lies past every cache)."""
    if sizes.curve_bytes:
        return sizes.curve_bytes
    return max(CURVE_FLOOR, CACHE_FACTOR * max(caches.values(), default=0))


def curve_largest(target: int) -> int:
    """`target` bounded by free memory: at most MEMORY_SHARE of MemAvailable (where known)."""
    available = meminfo("MemAvailable")
    return min(target, int(MEMORY_SHARE * available)) if available else target


def default_thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... below the physical core count, and the core count itself."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if cores > 1:
        counts.append(cores)
    return counts


def _mib(nbytes: float) -> str:
    """Bytes as the curve's axis prints them: KiB below 1 MiB, MiB below 1 GiB, else GiB."""
    if nbytes < 1 << 20:
        return f"{nbytes / (1 << 10):.0f} KiB"
    if nbytes < 1 << 30:
        return f"{nbytes / (1 << 20):.0f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"


@dataclass
class MachineFacts:
    """The machine's description and its measured roofs (per thread count)."""

    cpu: str
    logical_cpus: int
    physical_cores: int
    caches: dict[str, int]                  # 'L1d', 'L2', 'L3' ... -> bytes per instance
    blas: list[dict[str, Any]]              # internal_api, version, architecture (kernel), threads
    openblas_coretype: str | None           # OPENBLAS_CORETYPE as set in the environment
    openblas_l2_size: str | None
    python: str
    numpy: str
    compiled: bool
    sizes: ProbeSizes
    memory_bytes: int = 0                   # MemTotal
    kernel_isa: str = ""                    # llmnb's integer-kernel build ('float': none)
    measured: str = ""                      # ISO 8601 UTC time of the measurement
    curve_target: int = 0                   # how far the curve was meant to reach (bytes)
    sgemm_gflops: dict[int, float] = field(default_factory=dict)    # threads -> GFLOP/s
    copy_gbs: dict[int, float] = field(default_factory=dict)        # threads -> GB/s
    triad_gbs: dict[int, float] = field(default_factory=dict)
    gemv_gbs: dict[int, float] = field(default_factory=dict)
    read_gbs: dict[int, float] = field(default_factory=dict)        # the curve's plateau (roof)
    curve: dict[int, list[CurvePoint]] = field(default_factory=dict)  # threads -> read curve

    @property
    def threads(self) -> list[int]:
        return sorted(self.sgemm_gflops)

    @property
    def measured_at(self) -> str:
        """The measurement's date and time, as the tables print it ('2026-12-08 00:40 UTC')."""
        return self.measured.replace("T", " ")[:16] + " UTC" if self.measured else ""

    @property
    def blas_kernel(self) -> str:
        return ", ".join(f"{b.get('internal_api')} {b.get('version')} {b.get('architecture')}"
                         for b in self.blas) or "none found"

    def fingerprint(self) -> dict[str, Any]:
        """What ties a measurement to this machine: CPU model, logical and physical cores,
        reported caches, total memory, BLAS kernel, llmnb's integer-kernel ISA."""
        return {"cpu": self.cpu, "logical_cpus": self.logical_cpus,
                "physical_cores": self.physical_cores, "caches": dict(self.caches),
                "memory_bytes": self.memory_bytes, "blas": self.blas_kernel,
                "kernel_isa": self.kernel_isa}

    def age_days(self, now: dt.datetime | None = None) -> float:
        """Days since the measurement (infinite when it has no date)."""
        if not self.measured:
            return float("inf")
        then = dt.datetime.fromisoformat(self.measured)
        return ((now or dt.datetime.now(dt.timezone.utc)) - then).total_seconds() / 86400

    def _measured_at(self, threads: int, what: str) -> None:
        if threads not in self.sgemm_gflops or threads not in self.curve:
            raise UsageError(f"{what}: no measurement at {threads} threads "
                             f"(measured: {', '.join(map(str, self.threads)) or 'none'})")

    def plateau(self, threads: int) -> Plateau:
        """The read curve's plateau at `threads` (``peaks.plateau``): the memory roof and the
        cache edge."""
        self._measured_at(threads, "plateau")
        return plateau(self.curve[threads])

    def where(self, nbytes: float, threads: int = 1) -> str:
        """Where a working set of `nbytes` read again and again is read from at `threads`:
        'cache' when it is no larger than the largest size the curve shows clearly above
        its memory plateau (the cache edge), else 'memory'."""
        return self.plateau(threads).holds(int(nbytes))

    def residency(self, nbytes: float, threads: int = 1) -> str:
        """A plain sentence: where `nbytes` of weights read once per token live on this
        machine, judged from the read curve at `threads`, and what that does to a "% of
        roof" figured against the DRAM plateau."""
        p = self.plateau(threads)
        size = f"{nbytes / 1e6:.0f} MB"
        at = f"{threads} thread{'s' if threads > 1 else ''}"
        if p.holds(int(nbytes)) == "cache":
            return (f"{size} fits in what the read curve shows as cache on this machine (above "
                    f"the memory plateau of {p.gbs:.1f} GB/s up to {_mib(p.edge or 0)} at {at}): "
                    "a decode over these weights reads from cache, not memory, so its share of "
                    "the DRAM roof can pass 100%")
        edge = (f"the cache edge is at {_mib(p.edge)}" if p.edge is not None
                else "the curve shows no size above its plateau")
        return (f"{size} is past what the read curve shows as cache on this machine ({edge} at "
                f"{at}): a decode over these weights reads from memory, and the "
                f"{p.gbs:.1f} GB/s plateau is its roof")

    def roof(self, threads: int, memory: str = "read") -> Roof:
        """The roofline at `threads`: measured sgemm peak and the `memory` bandwidth. The
        default is the read curve's plateau, the DRAM read bandwidth: decoding reads weights
        and writes almost nothing (STREAM's triad also writes; GEMV's is one engine's
        achievement, not a limit; copy and triad run over arrays of ``sizes.stream_bytes``,
        which may sit in a cache, ``lines`` says)."""
        if memory not in MEMORY_ROOFS:
            raise UsageError(f"roof: memory must be one of {', '.join(MEMORY_ROOFS)}, got "
                             f"{memory!r}")
        if threads not in self.sgemm_gflops:
            raise UsageError(f"roof: no measurement at {threads} threads "
                             f"(measured: {', '.join(map(str, self.threads)) or 'none'})")
        gbs = {"triad": self.triad_gbs, "copy": self.copy_gbs, "gemv": self.gemv_gbs,
               "read": self.read_gbs}[memory]
        return Roof(self.sgemm_gflops[threads] * 1e9, gbs[threads] * 1e9,
                    f"{threads} thread{'s' if threads > 1 else ''}, sgemm / {memory}")

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu": self.cpu, "logical_cpus": self.logical_cpus,
            "physical_cores": self.physical_cores,
            "caches": dict(self.caches), "blas": list(self.blas),
            "OPENBLAS_CORETYPE": self.openblas_coretype, "OPENBLAS_L2_SIZE": self.openblas_l2_size,
            "python": self.python, "numpy": self.numpy, "compiled": self.compiled,
            "memory_bytes": self.memory_bytes, "kernel_isa": self.kernel_isa,
            "sizes": {"sgemm_n": self.sizes.sgemm_n, "stream_bytes": self.sizes.stream_bytes,
                      "gemv_bytes": self.sizes.gemv_bytes, "repeats": self.sizes.repeats,
                      "curve_bytes": self.sizes.curve_bytes,
                      "curve_smallest": self.sizes.curve_smallest},
            "measured": self.measured, "measured_at": self.measured_at,
            "curve_target": self.curve_target,
            "sgemm_gflops": {str(k): v for k, v in sorted(self.sgemm_gflops.items())},
            "copy_gbs": {str(k): v for k, v in sorted(self.copy_gbs.items())},
            "triad_gbs": {str(k): v for k, v in sorted(self.triad_gbs.items())},
            "gemv_gbs": {str(k): v for k, v in sorted(self.gemv_gbs.items())},
            "read_gbs": {str(k): v for k, v in sorted(self.read_gbs.items())},
            "curve": {str(k): [[p.nbytes, p.gbs, p.low, p.high, p.passes, p.samples] for p in v]
                      for k, v in sorted(self.curve.items())},
        }

    def lines(self) -> list[str]:
        """A short human-readable summary (the header of ``llmnb bench``)."""
        caches = " ".join(f"{k} {_mib(v)}" for k, v in self.caches.items())
        s = self.sizes
        age = self.age_days()
        out = [f"cpu: {self.cpu} ({self.physical_cores} physical cores, {self.logical_cpus} "
               f"logical), {self.memory_bytes / (1 << 30):.1f} GiB memory",
               f"caches (as the OS reports them): {caches or 'unknown'}",
               f"blas: {self.blas_kernel}; llmnb integer kernels: {self.kernel_isa or 'unknown'}",
               f"OPENBLAS_CORETYPE={self.openblas_coretype or '(unset)'} "
               f"OPENBLAS_L2_SIZE={self.openblas_l2_size or '(unset)'}",
               f"python {self.python}, numpy {self.numpy}, llmnb compiled: {self.compiled}",
               f"measured {self.measured_at} ({age:.1f} days ago; measured again after "
               f"{MAX_AGE_DAYS} days, or with refresh=True), sgemm n={s.sgemm_n}, every figure "
               f"the median of {s.repeats} after a warm-up"]
        for n in sorted(self.curve):
            pts = self.curve[n]
            p = plateau(pts)
            edge = f"cache edge {_mib(p.edge)}" if p.edge is not None else "no cache edge"
            few = "" if p.flat else ", too few: the curve may not have flattened"
            reach = "" if pts[-1].nbytes >= self.curve_target else \
                f" (free memory capped it below {_mib(self.curve_target)})"
            out.append(f"read curve, {n} thread{'s' if n > 1 else ''}: {pts[0].gbs:.1f} GB/s at "
                       f"{_mib(pts[0].nbytes)} ... {pts[-1].gbs:.1f} GB/s at "
                       f"{_mib(pts[-1].nbytes)}{reach}; plateau {p.gbs:.1f} GB/s from "
                       f"{_mib(p.start)} ({p.points} sizes{few}), {edge}")
        if self.curve:
            t = min(self.curve)
            out.append(f"copy/triad over {_mib(s.stream_bytes)} arrays, gemv over "
                       f"{_mib(s.gemv_bytes)} (reference figures; at {t} thread these sizes "
                       f"read from {self.where(s.stream_bytes, t)} and "
                       f"{self.where(s.gemv_bytes, t)}, by the curve)")
        out.append(f"{'threads':>8} {'sgemm GFLOP/s':>14} {'read GB/s':>10} {'copy GB/s':>10} "
                   f"{'triad GB/s':>11} {'gemv GB/s':>10} {'ridge FLOP/B':>13}")
        for n in self.threads:
            out.append(f"{n:>8} {self.sgemm_gflops[n]:>14.1f} {self.read_gbs[n]:>10.1f} "
                       f"{self.copy_gbs[n]:>10.1f} {self.triad_gbs[n]:>11.1f} "
                       f"{self.gemv_gbs[n]:>10.1f} {self.roof(n).ridge:>13.1f}")
        return out


def _int_keys(d: dict[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in d.items()}


def facts_from_json(d: dict[str, Any]) -> MachineFacts:
    """The facts a ``to_json`` wrote. Where the record has a curve, the read roof is its
    plateau as ``peaks.plateau`` finds it now (one rule for the roof and the curve's figure)."""
    facts = _from_json(d)
    facts.read_gbs |= {n: plateau(c).gbs for n, c in facts.curve.items()}
    return facts


def _from_json(d: dict[str, Any]) -> MachineFacts:
    s = d["sizes"]
    return MachineFacts(
        cpu=str(d["cpu"]), logical_cpus=int(d["logical_cpus"]),
        physical_cores=int(d["physical_cores"]),
        caches={str(k): int(v) for k, v in d["caches"].items()}, blas=list(d["blas"]),
        openblas_coretype=d.get("OPENBLAS_CORETYPE"), openblas_l2_size=d.get("OPENBLAS_L2_SIZE"),
        python=str(d["python"]), numpy=str(d["numpy"]), compiled=bool(d["compiled"]),
        sizes=ProbeSizes(int(s["sgemm_n"]), int(s["stream_bytes"]), int(s["gemv_bytes"]),
                         int(s["repeats"]), int(s.get("curve_bytes", 0)),
                         int(s.get("curve_smallest", SMALLEST))),
        memory_bytes=int(d.get("memory_bytes", 0)), kernel_isa=str(d.get("kernel_isa", "")),
        measured=str(d.get("measured", "")), curve_target=int(d.get("curve_target", 0)),
        sgemm_gflops=_int_keys(d["sgemm_gflops"]), copy_gbs=_int_keys(d["copy_gbs"]),
        triad_gbs=_int_keys(d["triad_gbs"]), gemv_gbs=_int_keys(d["gemv_gbs"]),
        read_gbs=_int_keys(d.get("read_gbs") or d["gemv_gbs"]),   # records before the read roof
        curve={int(k): [CurvePoint(int(p[0]), float(p[1]), float(p[2]), float(p[3]), int(p[4]),
                                   int(p[5])) for p in v]
               for k, v in (d.get("curve") or {}).items()},
    )


def describe(sizes: ProbeSizes = FULL) -> MachineFacts:
    """Everything except the measured roofs (instant)."""
    return MachineFacts(
        cpu=cpu_model(), logical_cpus=os.cpu_count() or 1, physical_cores=physical_cores(),
        caches=cache_sizes(), blas=blas_info(),
        openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
        openblas_l2_size=os.environ.get("OPENBLAS_L2_SIZE"),
        python=platform.python_version(), numpy=np.__version__, compiled=is_compiled(),
        sizes=sizes, memory_bytes=meminfo("MemTotal"), kernel_isa=kernel_isa(),
    )


def machine_facts() -> dict[str, Any]:
    """The machine's description as JSON (CPU, cores, caches, BLAS kernel, overrides), no roofs."""
    return describe().to_json()


def now_iso() -> str:
    """Now, in UTC, as ISO 8601 to the second ('2026-12-08T00:40:12+00:00')."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def measure(facts: MachineFacts, threads: Sequence[int],
            progress: Callable[[str], None] | None = None) -> MachineFacts:
    """Measure sgemm, the read curve (its plateau is the read roof), copy, triad and GEMV at
    each thread count into `facts` (and return it), dated now."""
    s = facts.sizes
    facts.curve_target = curve_target(facts.caches, s)
    sizes = curve_sizes(curve_largest(facts.curve_target), s.curve_smallest)
    array = np.ones(max(sizes) // 4, dtype=np.float32)     # one allocation for every curve
    for t in threads:
        n = int(t)
        if n < 1:
            raise UsageError(f"probe: thread counts must be positive, got {n}")
        if progress is not None:
            progress(f"measuring the roofs at {n} thread{'s' if n > 1 else ''}")
        with use_threads(n):
            facts.sgemm_gflops[n] = sgemm_gflops(s.sgemm_n, s.repeats)
            facts.gemv_gbs[n] = gemv_bandwidth(s.gemv_bytes, s.repeats) / 1e9
            facts.curve[n] = read_curve(sizes, n, s.repeats, array=array)
        facts.copy_gbs[n] = stream_bandwidth("copy", s.stream_bytes, n, s.repeats) / 1e9
        facts.triad_gbs[n] = stream_bandwidth("triad", s.stream_bytes, n, s.repeats) / 1e9
        facts.read_gbs[n] = plateau(facts.curve[n]).gbs
    facts.measured = now_iso()
    return facts


# --- the cache ------------------------------------------------------------------------

def cache_key(facts: MachineFacts) -> str:
    """File-name-safe key: CPU model and BLAS library, version and kernel."""
    raw = f"{facts.cpu}_{facts.blas_kernel}".lower()
    return re.sub(r"[^a-z0-9.]+", "-", raw).strip("-")[:120]


def cache_path(facts: MachineFacts) -> Path:
    return cache_dir() / "machine" / f"{cache_key(facts)}.json"


def _read_cache(path: Path) -> dict[str, Any]:
    if not path.is_file():                     # (a FIFO there would block the read)
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    return data


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    """Temp file + rename (``atomic_path``): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1))


def stale(stored: MachineFacts, now: MachineFacts, wanted: Sequence[int]) -> str:
    """Why a stored measurement cannot serve (empty: it can): another fingerprint, older than
    MAX_AGE_DAYS, a thread count missing, or a curve shorter than this machine's target."""
    if stored.fingerprint() != now.fingerprint():
        return "the machine's fingerprint changed"
    if stored.age_days() > MAX_AGE_DAYS:
        return f"older than {MAX_AGE_DAYS} days"
    missing = [t for t in wanted if t not in stored.sgemm_gflops or t not in stored.curve]
    if missing:
        return f"no measurement at {', '.join(map(str, missing))} threads"
    if stored.curve_target < curve_target(now.caches, now.sizes):
        return "its read curve stops short of this request's"
    return ""


def probe(threads: Sequence[int] | None = None, sizes: ProbeSizes = FULL,
          refresh: bool = False, cache: bool = True,
          progress: Callable[[str], None] | None = None) -> MachineFacts:
    """This machine's facts with its roofs at `threads` (default: 1, 2, 4 ... physical cores).

    With `cache`, the one stored measurement (whatever `sizes` it was made with) is read unless
    `refresh`, or ``stale`` says why it cannot serve; a fresh measurement replaces it."""
    facts = describe(sizes)
    wanted = [int(t) for t in threads] if threads is not None else \
        default_thread_counts(facts.physical_cores)
    if not wanted:
        raise UsageError("probe: expected at least one thread count")
    path = cache_path(facts)
    data = _read_cache(path) if cache else {}
    if data.get("facts") and not refresh:
        old = facts_from_json(data["facts"])
        if not stale(old, facts, wanted):
            # the description is re-read (env vars may differ); the roofs are the stored ones
            for name in ("sizes", "measured", "curve_target", "sgemm_gflops", "copy_gbs",
                         "triad_gbs", "gemv_gbs", "read_gbs", "curve"):
                setattr(facts, name, getattr(old, name))
            return facts
    measure(facts, wanted, progress)
    if cache:
        _write_cache(path, {"version": CACHE_VERSION, "key": cache_key(facts),
                            "fingerprint": facts.fingerprint(), "facts": facts.to_json()})
    return facts
