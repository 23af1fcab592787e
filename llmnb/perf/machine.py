"""This machine's limits, measured: the two roofs of the roofline model and what sets them.

A roofline needs two numbers per thread count: the peak FLOP/s (here: float32 sgemm
measured, the operation a diffusion step repeats, so a fraction of it is a "fraction of
measured sgemm", not of a theoretical peak) and the memory bandwidth (``peaks.py`` measures
them). The memory roof is the read bandwidth (the best of numpy's sum, a numba parallel read
loop and STREAM's copy, McCalpin 1995), because decoding reads weights and writes almost nothing;
STREAM's triad and the float32 matrix @ vector product (the GEMV an f32 decode repeats: what
one engine achieves on one layout, not the machine's limit) are reported beside it. Beside
them: the CPU, its physical cores and caches (from /sys), the BLAS library and kernel
threadpoolctl reports, and whether OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE force a kernel.

Measuring takes seconds, so ``probe`` caches the result as JSON under the llmnb cache
(``$LLMNB_HOME`` or ``~/.cache/llmnb``)/machine/, keyed by CPU model and BLAS kernel, and
re-measures only when asked (``refresh=True``), when the sizes differ or a thread count
is new. Every figure here is a median after a warm-up; on a shared machine it is noisy.
"""
from __future__ import annotations

import json
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from llmnb.errors import UsageError
from llmnb.hub import cache_dir
from llmnb.output import atomic_path
from llmnb.perf.peaks import gemv_bandwidth, read_bandwidth, sgemm_gflops, stream_bandwidth
from llmnb.perf.roofline import Roof
from llmnb.perf.threads import threads as use_threads

CACHE_VERSION: Final = 2
MEMORY_ROOFS: Final = ("read", "gemv", "triad", "copy")


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


@dataclass(frozen=True)
class ProbeSizes:
    """How big each measurement is: sgemm's n, each STREAM array, GEMV's matrix; repeats."""

    sgemm_n: int
    stream_bytes: int
    gemv_bytes: int
    repeats: int

    def key(self) -> str:
        return f"{self.sgemm_n}-{self.stream_bytes}-{self.gemv_bytes}-{self.repeats}"


FULL: Final = ProbeSizes(sgemm_n=2048, stream_bytes=128 << 20, gemv_bytes=256 << 20, repeats=5)
QUICK: Final = ProbeSizes(sgemm_n=1024, stream_bytes=48 << 20, gemv_bytes=96 << 20, repeats=3)


def default_thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... below the physical core count, and the core count itself."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if cores > 1:
        counts.append(cores)
    return counts


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
    measured_at: str = ""
    sgemm_gflops: dict[int, float] = field(default_factory=dict)    # threads -> GFLOP/s
    copy_gbs: dict[int, float] = field(default_factory=dict)        # threads -> GB/s
    triad_gbs: dict[int, float] = field(default_factory=dict)
    gemv_gbs: dict[int, float] = field(default_factory=dict)
    read_gbs: dict[int, float] = field(default_factory=dict)        # best read kernel (roof)

    @property
    def threads(self) -> list[int]:
        return sorted(self.sgemm_gflops)

    @property
    def blas_kernel(self) -> str:
        return ", ".join(f"{b.get('internal_api')} {b.get('version')} {b.get('architecture')}"
                         for b in self.blas) or "none found"

    def roof(self, threads: int, memory: str = "read") -> Roof:
        """The roofline at `threads`: measured sgemm peak and the `memory` bandwidth. The
        default is the read bandwidth: decoding reads weights and writes almost nothing, and
        a read stream runs faster than STREAM's triad, which also writes (a roof that decode
        could beat would be no roof); GEMV's is one engine's achievement, not a limit."""
        if memory not in MEMORY_ROOFS:
            raise UsageError(f"roof: memory must be one of {', '.join(MEMORY_ROOFS)}, got "
                             f"{memory!r}")
        if threads not in self.sgemm_gflops:
            raise UsageError(f"roof: no measurement at {threads} threads "
                             f"(measured: {', '.join(map(str, self.threads))})")
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
            "sizes": {"sgemm_n": self.sizes.sgemm_n, "stream_bytes": self.sizes.stream_bytes,
                      "gemv_bytes": self.sizes.gemv_bytes, "repeats": self.sizes.repeats},
            "measured_at": self.measured_at,
            "sgemm_gflops": {str(k): v for k, v in sorted(self.sgemm_gflops.items())},
            "copy_gbs": {str(k): v for k, v in sorted(self.copy_gbs.items())},
            "triad_gbs": {str(k): v for k, v in sorted(self.triad_gbs.items())},
            "gemv_gbs": {str(k): v for k, v in sorted(self.gemv_gbs.items())},
            "read_gbs": {str(k): v for k, v in sorted(self.read_gbs.items())},
        }

    def lines(self) -> list[str]:
        """A short human-readable summary (the header of ``llmnb bench``)."""
        caches = " ".join(f"{k} {v >> 10} KiB" for k, v in self.caches.items())
        out = [f"cpu: {self.cpu} ({self.physical_cores} physical cores, {self.logical_cpus} "
               "logical)",
               f"caches: {caches or 'unknown'}",
               f"blas: {self.blas_kernel}",
               f"OPENBLAS_CORETYPE={self.openblas_coretype or '(unset)'} "
               f"OPENBLAS_L2_SIZE={self.openblas_l2_size or '(unset)'}",
               f"python {self.python}, numpy {self.numpy}, llmnb compiled: {self.compiled}",
               f"measured {self.measured_at} (sgemm n={self.sizes.sgemm_n}, stream "
               f"{self.sizes.stream_bytes >> 20} MiB/array, gemv {self.sizes.gemv_bytes >> 20} "
               f"MiB, median of {self.sizes.repeats})",
               f"{'threads':>8} {'sgemm GFLOP/s':>14} {'read GB/s':>10} {'copy GB/s':>10} "
               f"{'triad GB/s':>11} {'gemv GB/s':>10} {'ridge FLOP/B':>13}"]
        for n in self.threads:
            out.append(f"{n:>8} {self.sgemm_gflops[n]:>14.1f} {self.read_gbs[n]:>10.1f} "
                       f"{self.copy_gbs[n]:>10.1f} {self.triad_gbs[n]:>11.1f} "
                       f"{self.gemv_gbs[n]:>10.1f} {self.roof(n).ridge:>13.1f}")
        return out


def _int_keys(d: dict[str, Any]) -> dict[int, float]:
    return {int(k): float(v) for k, v in d.items()}


def facts_from_json(d: dict[str, Any]) -> MachineFacts:
    s = d["sizes"]
    return MachineFacts(
        cpu=str(d["cpu"]), logical_cpus=int(d["logical_cpus"]),
        physical_cores=int(d["physical_cores"]),
        caches={str(k): int(v) for k, v in d["caches"].items()}, blas=list(d["blas"]),
        openblas_coretype=d.get("OPENBLAS_CORETYPE"), openblas_l2_size=d.get("OPENBLAS_L2_SIZE"),
        python=str(d["python"]), numpy=str(d["numpy"]), compiled=bool(d["compiled"]),
        sizes=ProbeSizes(int(s["sgemm_n"]), int(s["stream_bytes"]), int(s["gemv_bytes"]),
                         int(s["repeats"])),
        measured_at=str(d["measured_at"]),
        sgemm_gflops=_int_keys(d["sgemm_gflops"]), copy_gbs=_int_keys(d["copy_gbs"]),
        triad_gbs=_int_keys(d["triad_gbs"]), gemv_gbs=_int_keys(d["gemv_gbs"]),
        read_gbs=_int_keys(d.get("read_gbs") or d["gemv_gbs"]),   # records before the read roof
    )


def describe(sizes: ProbeSizes = FULL) -> MachineFacts:
    """Everything except the measured roofs (instant)."""
    return MachineFacts(
        cpu=cpu_model(), logical_cpus=os.cpu_count() or 1, physical_cores=physical_cores(),
        caches=cache_sizes(), blas=blas_info(),
        openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"),
        openblas_l2_size=os.environ.get("OPENBLAS_L2_SIZE"),
        python=platform.python_version(), numpy=np.__version__, compiled=is_compiled(),
        sizes=sizes,
    )


def machine_facts() -> dict[str, Any]:
    """The machine's description as JSON (CPU, cores, caches, BLAS kernel, overrides), no roofs."""
    return describe().to_json()


def measure(facts: MachineFacts, threads: Sequence[int],
            progress: Callable[[str], None] | None = None) -> MachineFacts:
    """Measure sgemm, read, copy, triad and GEMV at each thread count into `facts` (and
    return it); the read roof is the best of the read kernels and STREAM's copy."""
    s = facts.sizes
    for t in threads:
        n = int(t)
        if n < 1:
            raise UsageError(f"probe: thread counts must be positive, got {n}")
        if progress is not None:
            progress(f"measuring the roofs at {n} thread{'s' if n > 1 else ''}")
        with use_threads(n):
            facts.sgemm_gflops[n] = sgemm_gflops(s.sgemm_n, s.repeats)
            facts.gemv_gbs[n] = gemv_bandwidth(s.gemv_bytes, s.repeats) / 1e9
            read = read_bandwidth(s.gemv_bytes, s.repeats, n)[0] / 1e9
        facts.copy_gbs[n] = stream_bandwidth("copy", s.stream_bytes, n, s.repeats) / 1e9
        facts.triad_gbs[n] = stream_bandwidth("triad", s.stream_bytes, n, s.repeats) / 1e9
        facts.read_gbs[n] = max(read, facts.copy_gbs[n])
    facts.measured_at = time.strftime("%Y-%m-%d %H:%M:%S")
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


def probe(threads: Sequence[int] | None = None, sizes: ProbeSizes = FULL,
          refresh: bool = False, cache: bool = True,
          progress: Callable[[str], None] | None = None) -> MachineFacts:
    """This machine's facts with its roofs at `threads` (default: 1, 2, 4 ... physical cores).

    With `cache`, a stored measurement of the same sizes is reused unless `refresh` or a
    thread count is missing; fresh measurements are written back."""
    facts = describe(sizes)
    wanted = [int(t) for t in threads] if threads is not None else \
        default_thread_counts(facts.physical_cores)
    if not wanted:
        raise UsageError("probe: expected at least one thread count")
    path = cache_path(facts)
    data = _read_cache(path) if cache else {}
    records: dict[str, Any] = data.get("records", {})
    stored = records.get(sizes.key())
    if stored is not None and not refresh:
        old = facts_from_json(stored)
        if all(t in old.sgemm_gflops for t in wanted):
            # the description is re-read (env vars may differ); the roofs are the stored ones
            facts.sgemm_gflops, facts.copy_gbs = old.sgemm_gflops, old.copy_gbs
            facts.triad_gbs, facts.gemv_gbs = old.triad_gbs, old.gemv_gbs
            facts.read_gbs = old.read_gbs
            facts.measured_at = old.measured_at
            return facts
    measure(facts, wanted, progress)
    if cache:
        records[sizes.key()] = facts.to_json()
        _write_cache(path, {"version": CACHE_VERSION, "key": cache_key(facts), "records": records})
    return facts
