"""Which products this CPU runs: integer kernels for its instruction set, or the float ones.

The integer products (``integer.py``) come in three builds of one source (``simd.ISAS``):

    vnni512   AVX-512 VNNI: ``vpdpbusd`` on 512-bit registers (16 int32 sums at once)
    vnni256   AVX-VNNI, or AVX-512 VNNI on 256-bit registers (8 sums)
    avx2      AVX2's ``vpmaddubsw`` into int16, widened by ``vpmaddwd`` (8 sums; for 4-bit
              weights one widening per block of eight, ``simd.dot4_part``)

and the float kernels (``matvec.py``: quants converted to float32, float multiply-adds) run
everywhere. The choice is read from the CPU features numba compiles for (llvmlite's names:
``avx512vnni``, ``avxvnni``, ``avx2``; ``NUMBA_CPU_FEATURES`` when set, as ``jit.py`` sets it),
before anything is compiled: compiling an instruction the CPU lacks stops the process.

``LLMNB_KERNELS`` forces one, for measuring: ``float``, ``avx2``, ``vnni256``, or ``vnni``
(the widest VNNI the CPU has). An unknown value, or one this CPU cannot run, is a usage
error that names what it can run.
"""
from __future__ import annotations

import os

from llmnb.errors import UsageError

KERNELS = ("float", "avx2", "vnni256", "vnni")


def cpu_features() -> set[str]:
    """The features numba compiles for: the ones ``NUMBA_CPU_FEATURES`` turns on, read as the
    whole list (as ``jit.py`` sets it); else the host's, unless ``NUMBA_CPU_NAME`` names
    another CPU, whose features are not known here: then none (the float kernels)."""
    import llmnb.kernels.jit  # noqa: F401  (sets NUMBA_CPU_FEATURES on AVX-512 hosts)

    text = os.environ.get("NUMBA_CPU_FEATURES")
    if not text:
        if os.environ.get("NUMBA_CPU_NAME", "host") != "host":
            return set()
        import llvmlite.binding as llvm

        text = llvm.get_host_cpu_features().flatten()
    return {f[1:] for f in text.split(",") if f.startswith("+")}


def available(features: set[str] | None = None) -> list[str]:
    """The integer builds this CPU can run, best first (``simd.ISAS`` names)."""
    f = cpu_features() if features is None else features
    runs = []
    if {"avx512vnni", "avx512bw", "avx512vl"} <= f:
        runs += ["vnni512", "vnni256"]
    elif {"avxvnni", "avx2"} <= f:
        runs.append("vnni256")
    if "avx2" in f:
        runs.append("avx2")
    return runs


def choose(request: str | None = None, features: set[str] | None = None) -> str | None:
    """The integer build to run (None: the float kernels), from `request` (default
    ``$LLMNB_KERNELS``, else the best this CPU has)."""
    runs = available(features)
    wanted = os.environ.get("LLMNB_KERNELS", "") if request is None else request
    if not wanted:
        return runs[0] if runs else None
    can = ", ".join(["float"] + [k for k in KERNELS[1:] if _resolve(k, runs)])
    if wanted not in KERNELS:
        raise UsageError(f"LLMNB_KERNELS: expected one of {', '.join(KERNELS)}, got {wanted!r} "
                         f"(this CPU runs: {can})")
    if wanted == "float":
        return None
    resolved = _resolve(wanted, runs)
    if resolved is None:
        raise UsageError(f"LLMNB_KERNELS={wanted}: this CPU cannot run it (it runs: {can})")
    return resolved


def _resolve(kind: str, runs: list[str]) -> str | None:
    if kind == "vnni":
        return next((r for r in runs if r.startswith("vnni")), None)
    return kind if kind in runs else None


_chosen: list[str | None] = []


def integer_isa() -> str | None:
    """The integer build this process runs (decided once), or None for the float kernels."""
    if not _chosen:
        _chosen.append(choose())
    return _chosen[0]
