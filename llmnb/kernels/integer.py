"""Integer products on quantized blocks: activations quantized to 8 bits, byte dot products,
float scales once per block (llama.cpp's CPU path).

A quantized weight value is ``d * q`` (plus an offset), with q a small integer and d one
float per block of 32 (or 16) inputs. If the activations x are also quantized per block,
x = dx * qx with qx an int8, then one block's share of an output is

    sum_j (dw * qw_j) (dx * qx_j) = (dw * dx) * sum_j qw_j qx_j

so the inner sum is over integers, exact in any order, four byte products per instruction
(``simd.dot4``: ``vpdpbusd`` does 64 of them at once), and the floats meet once per block.
The activations are quantized as llama.cpp quantizes them (``quantize_q8_0``, ``_k``): per 32 inputs
for the legacy formats (Q8_0, with Q8_1's scaled sum for the formats with a minimum), per
256 for the k-quants (Q8_K), so the integer sums are llama.cpp's.

Offsets. The instruction multiplies unsigned bytes by signed ones, so the weight quants are
stored unsigned: Q4 as its nibbles 0..15, every byte format as q + 128. What the stored
value adds is a multiple of the block's sum of qx, taken off once per block by starting
the block's integer sum from it (``starts``): Q4_0 (q - 8): sum (q-8) qx = -8 sum qx + sum q qx.

The layout (``pack``): outputs in panels of 16, a panel's quants for one block as
(chunks, 16 outputs, 4 bytes), so one 64-byte load holds four consecutive inputs of 16
outputs: one ``vpdpbusd`` multiplies them by four activation bytes broadcast to every lane.
Nibbles hold inputs 4c..4c+3 (low) and 16+4c..16+4c+3 (high) in chunk c, as Q4_0's own
blocks pair j with j + 16.

The kernels walk a panel's blocks once for a whole block of R rows (``simd``'s row-blocked
values: each weight register feeds R rows' accumulators). Every output's sum runs in one
fixed order whatever the rows and threads, so a row of a T-row product is bit-identical to
that row alone, at every thread count.

k-quants add a second level: 8 sub-blocks of 32 (Q6_K: 16 of 16), each with its own small
integer scale (and Q4_K/Q5_K a minimum), under one float d (and dmin) per 256. The sub-block
sums are multiplied by their integer scales and added as integers, and the floats meet once
per 256 inputs: d dx sum_s sc_s isum_s - dmin dx sum_s m_s sum(qx over s).

The file reads in that order: the activations' quantizers, the weights' layout, the kernels
that read both, the call from Python. It is one module of about 750 lines because the three
parts are one contract (a block's quants, offsets and scales as ``pack`` lays them out are
what the kernels and the activations' sums assume); split, one format's definition would
sit in three files.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType
from llmnb.kernels import simd
from llmnb.kernels.isa import integer_isa
from llmnb.kernels.simd import (
    bor, broadcast4, dot4, dot4_part, dot4_part_wide, dot4_wide, fabs, fadd, fbigger,
    fifth_bits, fma, fmul, fsplat, fsplat_rows, fsub, fzero, half_rounded, high_nibbles, iadd,
    imul, isplat_rows, izero, lanes, lanes_isum, lanes_max, load_bytes, load_floats,
    load_halves, load_widened, low_nibbles, one_chain, padd, prefetch, pzero, rows, store_bytes,
    store_rows, to_floats, to_ints, wide_offset, widen,
)
from llmnb.quant.kquants_dequant import k4_scales_mins

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
U16 = npt.NDArray[np.uint16]
T = GGMLType

PANEL = 16                     # outputs per panel: one AVX-512 register of int32 sums
LEGACY = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)
KQUANTS = (T.Q4_K, T.Q5_K, T.Q6_K)
INTEGER_TYPES = LEGACY + KQUANTS
# bytes ahead of each load of quants that the kernels ask the caches for (``simd.prefetch``).
# A decode step reads every weight once, from memory: the CPU's own prefetcher does not keep
# far enough ahead of a kernel that also computes, so without the hint each cache line's wait
# adds to the arithmetic instead of hiding under it. On a 2-core Zen 1 (AVX2), one thread,
# a 49152 x 576 Q8_0 product (SmolLM2's 30 MB head) took 4.0 ms without it and 2.5 ms with
# it, run for run (512 to 4096 ahead measured alike); products on weights already in the
# caches do not change. `llmnb bench ar` there: SmolLM2's decode 1.15-1.31x llama.cpp's at
# one thread before, 1.44-1.54x after.
AHEAD = 2048
# the activations' format per weight format (llama.cpp's vec_dot_type)
ACTIVATIONS = {T.Q4_0: "q8_0", T.Q5_0: "q8_0", T.Q8_0: "q8_0", T.Q4_1: "q8_1", T.Q5_1: "q8_1",
               T.Q4_K: "q8_k", T.Q5_K: "q8_k", T.Q6_K: "q8_k"}


# --- the activations: quantized as llama.cpp's x86 code quantizes them --------------------

# 1.5 * 2^23: a float32 of magnitude below 2^22 plus this, minus it, is that float rounded to
# the nearest integer, ties to even (the sum's spacing is 1): rint without a library call
ROUNDER = np.float32(12582912.0)


@njit(inline="always")
def largest(x, r, start, count):  # type: ignore[no-untyped-def]
    """max |x[r, start : start + count]| (count a multiple of 8, at least 0) in eight chains,
    not one: a maximum is the same in any order, and the chains run side by side."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(0)
    for j in range(start, start + count, 8):
        m0 = max(m0, abs(x[r, j]))
        m1 = max(m1, abs(x[r, j + 1]))
        m2 = max(m2, abs(x[r, j + 2]))
        m3 = max(m3, abs(x[r, j + 3]))
        m4 = max(m4, abs(x[r, j + 4]))
        m5 = max(m5, abs(x[r, j + 5]))
        m6 = max(m6, abs(x[r, j + 6]))
        m7 = max(m7, abs(x[r, j + 7]))
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@njit(cache=True)
def quantize_q8_0(isa, x, q, d, sums, s):  # type: ignore[no-untyped-def]
    """x (T, n) float32 -> per block of 32: q (T*n,) int8, d (T*n/32,) the scale as fp16
    rounds it, sums the int sum of q, s = fp16(d * sum) (Q8_1's term for a minimum); `isa`
    (one row) the registers that do it, a block in two (AVX-512) or four.

    llama.cpp's AVX2 ``quantize_row_q8_0`` / ``_q8_1``: d = amax / 127, q = round-to-even(x *
    (127 / amax)); the unrounded d scales the sum."""
    rows, n = x.shape
    nb = n // 32
    L = lanes(isa)
    xs = x.reshape(rows * n)
    rounder = fsplat(isa, ROUNDER)
    for k in range(rows * nb):
        at = k * 32
        top = fabs(load_floats(isa, xs, at))
        for c in range(L, 32, L):
            top = fbigger(top, fabs(load_floats(isa, xs, at + c)))
        amax = lanes_max(top)
        dd = amax / np.float32(127)
        inv = fsplat(isa, np.float32(127) / amax if amax != 0 else np.float32(0))
        total = izero(isa)
        for c in range(0, 32, L):
            v = to_ints(fsub(fadd(fmul(load_floats(isa, xs, at + c), inv), rounder), rounder))
            store_bytes(isa, q, at + c, v)
            total = iadd(total, v)
        whole = lanes_isum(total)
        d[k] = half_rounded(dd)
        sums[k] = whole
        s[k] = half_rounded(dd * np.float32(whole))


@njit(cache=True)
def quantize_q8_k(x, q, d, sums, group):  # type: ignore[no-untyped-def]
    """x (T, n) float32 -> per block of 256: q (T*n,) int8, d (T*n/256,) float32, and sums,
    the int sum of q per `group` inputs (16 or 32).

    llama.cpp's ``quantize_row_q8_K_ref``: the value of largest magnitude (the first one)
    maps to -127, iscale = -127 / max, q = min(127, round-to-even(iscale * x)), d = 1 / iscale."""
    rows, n = x.shape
    nb = n // 256
    per = 256 // group
    for r in range(rows):
        for b in range(nb):
            base = r * n + b * 256
            amax = largest(x, r, b * 256, 256)
            mx = np.float32(0)
            for j in range(256):                       # the first value of that magnitude
                if abs(x[r, b * 256 + j]) == amax:
                    mx = x[r, b * 256 + j]
                    break
            k = r * nb + b
            if amax == 0:
                d[k] = 0
                for j in range(256):
                    q[base + j] = 0
                for g in range(per):
                    sums[k * per + g] = 0
                continue
            iscale = np.float32(-127) / mx
            for g in range(per):
                total = np.int32(0)
                xg = x[r, b * 256 + g * group:b * 256 + (g + 1) * group]
                qg = q[base + g * group:base + (g + 1) * group]
                for j in range(group):
                    v = min(np.int32(127), np.int32((iscale * xg[j] + ROUNDER) - ROUNDER))
                    qg[j] = v
                    total += v
                sums[k * per + g] = total
            d[k] = np.float32(1) / iscale


@dataclass
class Activations:
    """x quantized for one weight format: q (T*n,) int8, d per block, sums per group, s
    (Q8_1's fp16(d * sum), else empty)."""

    rows: int
    q: I8
    d: F32
    sums: I32
    s: F32


_buffers: dict[tuple[str, int, int, int], Activations] = {}


def float_rows(x: F32) -> F32:
    """x as the compiled quantizers read it: C-contiguous float32 (a copy only if it is not)."""
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        return np.ascontiguousarray(x, dtype=np.float32)
    return x


def quantize(x: F32, kind: str, group: int = 32) -> Activations:
    """x (T, n) float32 -> its 8-bit blocks as `kind` ('q8_0', 'q8_1' or 'q8_k'), in buffers
    reused by the next call of the same kind and shape (a product uses them at once)."""
    x = float_rows(x)
    rows, n = x.shape
    key = (kind, group, rows, n)
    a = _buffers.get(key)
    if a is None:
        blocks = rows * n // (256 if kind == "q8_k" else 32)
        a = Activations(rows, np.empty(rows * n, np.int8), np.empty(blocks, np.float32),
                        np.empty(rows * n // group, np.int32),
                        np.empty(0 if kind == "q8_k" else blocks, np.float32))
        if len(_buffers) > 64:
            _buffers.clear()
        _buffers[key] = a
    if kind == "q8_k":
        quantize_q8_k(x, a.q, a.d, a.sums, group)
    else:
        quantize_q8_0(_isas(_host_isa())[3], x, a.q, a.d, a.sums, a.s)
    return a


# --- the weights: a panel's quants as the instruction reads them ----------------------------

@dataclass
class IntMatrix:
    """A weight (n_out, n_in) in the integer kernels' layout (module docstring).

    Legacy formats: d (and m) per panel, block and output. k-quants: d and -dmin per panel,
    super-block and output, and the integer scales sc (and minimums mn) per sub-block. The
    float scales stay float16, as the file holds them: the kernel converts 16 at once."""

    ggml_type: int
    n_out: int
    n_in: int
    nibbles: bool          # Q4_0, Q4_1, Q4_K: two quants per byte; else one byte (q + 128)
    group: int             # inputs per integer sum: 32, or Q6_K's 16
    offset: int            # what a stored nibble adds (Q4_0's 8); bytes add 128 (``simd``)
    qs: U8                 # (panels, groups, group/4 or 4, 16, 4) flat
    d: npt.NDArray[np.generic]          # (panels, blocks, 16) flat, fp16 bits as in the file:
                                        # per 32 (legacy) or per 256 (k-quants)
    m: npt.NDArray[np.generic] | None   # legacy: the minimum per block; k-quants: -dmin per 256
    sc: npt.NDArray[np.generic] | None = None    # k-quants: (panels, 256-blocks, subs, 16)
    mn: npt.NDArray[np.generic] | None = None    # Q4_K/Q5_K: their minimums, the same shape
    qh: U8 | None = None   # 5-bit formats: each nibble's fifth bit, (panels, groups, 4, 2, 8)
    # the compiled product this weight runs for C-contiguous float32 rows, bound at its first
    # such call (``bind``), and its leading arguments: one call with no typing of arguments
    call: Callable[..., None] | None = field(default=None, init=False, repr=False, compare=False)
    lead: tuple[Any, ...] = field(default=(), init=False, repr=False, compare=False)
    looked: bool = field(default=False, init=False, repr=False, compare=False)  # bind has run

    @property
    def activations(self) -> str:
        return ACTIVATIONS[self.ggml_type]

    @property
    def n_panels(self) -> int:
        return -(-self.n_out // PANEL)

    @property
    def nbytes(self) -> int:
        extra = [a for a in (self.m, self.sc, self.mn, self.qh) if a is not None]
        return int(self.qs.nbytes + self.d.nbytes + sum(a.nbytes for a in extra))

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        """x (T, n_in) @ W.T -> (T, n_out), in `out` if given. A decode step makes a hundred of
        these: rows and a buffer of the kinds the bound product was compiled for go straight to
        it (the checks below are what its arguments' types say), anything else through
        ``matmul``, whose first call binds it."""
        if out is None:
            out = np.empty((x.shape[0], self.n_out), np.float32)
        call = self.call
        if call is not None:
            xf, of = x.flags, out.flags
            if (x.dtype is FLOAT32 and out.dtype is FLOAT32 and x.ndim == 2 and out.ndim == 2
                    and xf.c_contiguous and of.c_contiguous and xf.aligned and of.aligned
                    and of.writeable and x.shape[1] == self.n_in
                    and out.shape[0] == x.shape[0] and out.shape[1] == self.n_out):
                call(*self.lead, x, out, self.n_in)
                return out
        y = matmul(x, self, _host_isa(), out)
        if not self.looked:
            self.bind(x, out)
        return y

    def bind(self, x: F32, out: F32) -> None:
        """Keep the compiled product that ``matmul`` ran for x and out, if they are the kinds
        the fast path checks for and the product writes `out` itself (no padded outputs)."""
        if (self.n_panels * PANEL != self.n_out or x.dtype is not FLOAT32
                or out.dtype is not FLOAT32 or not x.flags.c_contiguous
                or not out.flags.c_contiguous or not out.flags.writeable):
            return
        block, four, two, one = _isas(_host_isa())
        lead: tuple[Any, ...]
        if self.ggml_type in LEGACY:
            kernel: Any = legacy_product
            lead = (block, four, two, one, self.nibbles, self.offset, self.qs, self.qh, self.d,
                    self.m)
        else:
            kernel = kquant_product
            lead = (block, four, two, one, self.nibbles, self.group, self.qs, self.qh, self.d,
                    self.m, self.sc, self.mn)
        self.call = compiled_entry(kernel, (*lead, x, out, self.n_in))
        self.lead = lead if self.call is not None else ()
        self.looked = True

    def unbind(self) -> None:
        """Forget the bound product (its arguments hold this weight's arrays): the next call
        binds again."""
        self.call, self.lead, self.looked = None, (), False


@dataclass
class IntParts:
    """Weights side by side along the outputs in different formats (Q, K and V of a Q4_K_M
    file): one product per part into its columns, each quantizing x for its own format (a
    small cost beside the product)."""

    parts: tuple[IntMatrix, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def matmul(self, x: F32, out: F32 | None = None) -> F32:
        isa = _host_isa()
        n = sum(p.n_out for p in self.parts)
        y = np.empty((x.shape[0], n), np.float32) if out is None else out
        c = 0
        for p in self.parts:
            matmul(x, p, isa, y[:, c:c + p.n_out])
            c += p.n_out
        return y


ARRAYS = ("qs", "d", "m", "sc", "mn", "qh")       # an IntMatrix's arrays, in the order they go
GATHER_BYTES = 32 << 20                          # buffers of about this size (numpy: >= 4 MB)


def gather(weights: list[IntMatrix | IntParts]) -> int:
    """Move the arrays of `weights` into a few shared buffers, in the order given (a decode
    step's), each aligned to 64 bytes: about GATHER_BYTES per buffer, which numpy asks Linux
    to back with 2 MB pages (``madvise``), where a matrix of its own (most are under 4 MB) gets
    4 KB pages and the stream through them pays a page walk every 4 KB. The arrays' values do
    not change; at most one buffer's worth is held twice while it fills, and the replaced
    arrays' pages go back to the system. Returns the bytes gathered."""
    mats = [m for w in weights for m in (w.parts if isinstance(w, IntParts) else (w,))]
    arrays = [(m, name) for m in mats for name in ARRAYS if getattr(m, name) is not None]
    done = 0
    while done < len(arrays):
        group: list[tuple[IntMatrix, str]] = []
        size = 0
        while done < len(arrays) and (not group or size < GATHER_BYTES):
            m, name = arrays[done]
            group.append((m, name))
            size += aligned(getattr(m, name).nbytes)
            done += 1
        buffer = np.empty(size + 64, np.uint8)
        at = -buffer.ctypes.data % 64
        for m, name in group:
            a = getattr(m, name)
            view = buffer[at:at + a.nbytes].view(a.dtype)
            view[:] = a.reshape(-1)
            setattr(m, name, view)
            m.unbind()
            at += aligned(a.nbytes)
    release_freed_pages()
    return sum(getattr(m, name).nbytes for m, name in arrays)


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a cache line (64 bytes)."""
    return -(-nbytes // 64) * 64


def release_freed_pages() -> None:
    """Give the pages of freed arrays back to the system: glibc's malloc keeps a freed block
    of under its threshold (up to 32 MB) for reuse, so without this the arrays ``gather``
    replaced would stay resident beside their copies. Elsewhere (no ``malloc_trim``): nothing."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def panels(a: npt.NDArray[np.generic], n_out: int) -> npt.NDArray[np.generic]:
    """Per-output rows (n_out, blocks, *rest) -> (panels, blocks, *rest, 16), zero-padded, flat."""
    pad = -n_out % PANEL
    if pad:
        a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), dtype=a.dtype)])
    p = a.reshape(-1, PANEL, *a.shape[1:])
    order = (0, *range(2, p.ndim), 1)                           # the output axis after the blocks
    return np.ascontiguousarray(p.transpose(order)).reshape(-1)


def quant_panels(q: npt.NDArray[np.generic], n_out: int, group: int, nibbles: bool) -> U8:
    """Quants (n_out, n_in) 0..15 (nibbles) or stored bytes -> (panels, groups, chunks, 16, 4)."""
    groups = q.shape[1] // group
    if nibbles:
        q4 = q.reshape(n_out, groups, 32).astype(np.uint8)
        q = q4[:, :, :16] | (q4[:, :, 16:] << np.uint8(4))      # byte j: input j | j + 16
        width = 16
    else:
        width = group
    chunks = q.reshape(n_out, groups, width // 4, 4)            # (out, groups, chunks, 4)
    pad = -n_out % PANEL
    if pad:
        chunks = np.concatenate([chunks, np.zeros((pad, *chunks.shape[1:]), dtype=chunks.dtype)])
    p = chunks.reshape(-1, PANEL, groups, width // 4, 4)        # (panels, 16, groups, chunks, 4)
    return np.ascontiguousarray(p.transpose(0, 2, 3, 1, 4)).reshape(-1).view(np.uint8)


def fifth_bit_panels(q: npt.NDArray[np.generic], n_out: int) -> U8:
    """5-bit quants (n_out, n_in) -> their fifth bits as the kernel reads them beside the
    nibbles of ``quant_panels``: per panel, block and chunk c, 64 bits for the low nibbles'
    bytes (output o, byte k: bit 4o + k) and 64 for the high ones', (panels, groups, 4, 2, 8)."""
    groups = q.shape[1] // 32
    # (out, groups, half, c, k)
    top = (q.reshape(n_out, groups, 2, 4, 4).astype(np.uint8) >> np.uint8(4))
    pad = -n_out % PANEL
    if pad:
        top = np.concatenate([top, np.zeros((pad, *top.shape[1:]), dtype=np.uint8)])
    p = top.reshape(-1, PANEL, groups, 2, 4, 4)             # (panels, o, groups, half, c, k)
    bits = np.ascontiguousarray(p.transpose(0, 2, 4, 3, 1, 5)).reshape(-1, 64)   # o, k inner
    return np.packbits(bits, axis=1, bitorder="little").reshape(-1)


def pack(raw: U8, ggml_type: int, n_out: int, n_in: int) -> IntMatrix:
    """A weight's GGUF bytes, (n_out, row bytes) or flat, -> its IntMatrix."""
    if ggml_type not in INTEGER_TYPES:
        raise ValueError(f"no integer kernel for type {ggml_type}")
    block, size = GGML_BLOCK_SIZES[ggml_type]
    blocks = np.ascontiguousarray(raw).reshape(-1, size)        # (n_out * n_in / block, size)
    nb = n_in // block
    with np.errstate(invalid="ignore", over="ignore"):
        if ggml_type in LEGACY:
            return _pack_legacy(blocks, ggml_type, n_out, n_in, nb)
        return _pack_kquant(blocks, ggml_type, n_out, n_in, nb)


def halves(blocks: U8, offset: int) -> U16:
    """The float16 at (even) byte `offset` of every block, its bits: (n,) uint16."""
    return np.ascontiguousarray(blocks.view(np.uint16)[:, offset // 2])


def _pack_legacy(blocks: U8, ggml_type: int, n_out: int, n_in: int, nb: int) -> IntMatrix:
    from llmnb.quant.legacy_dequant import nibbles as nibble_field, quants_5bit

    d = halves(blocks, 0).reshape(n_out, nb)
    m = halves(blocks, 2).reshape(n_out, nb) if ggml_type in (T.Q4_1, T.Q5_1) else None
    qh = None
    if ggml_type in (T.Q4_0, T.Q4_1):
        q = nibble_field(blocks, 2 if ggml_type == T.Q4_0 else 4)           # (n, 32) 0..15
        nibbles, offset = True, 8 if ggml_type == T.Q4_0 else 0
    elif ggml_type == T.Q8_0:
        q = (blocks[:, 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        nibbles, offset = False, 0
    else:                                   # Q5_0 (q5 - 16), Q5_1: nibbles and fifth bits
        q5 = quants_5bit(blocks, 2 if ggml_type == T.Q5_0 else 4).reshape(n_out, n_in)
        qh = fifth_bit_panels(q5, n_out)
        q, nibbles, offset = q5 & np.uint8(15), True, 16 if ggml_type == T.Q5_0 else 0
    qs = quant_panels(q.reshape(n_out, n_in), n_out, 32, nibbles)
    return IntMatrix(ggml_type, n_out, n_in, nibbles, 32, offset, qs, panels(d, n_out),
                     None if m is None else panels(m, n_out), qh=qh)


def _pack_kquant(blocks: U8, ggml_type: int, n_out: int, n_in: int, nb: int) -> IntMatrix:
    from llmnb.kernels.layout import kquant_quants

    q, _, _, group = kquant_quants(blocks, ggml_type)          # quants in element order
    subs = 256 // group
    if ggml_type == T.Q6_K:
        d = halves(blocks, 208).reshape(n_out, nb)
        sc: npt.NDArray[np.generic] = blocks[:, 192:208].view(np.int8).reshape(n_out, nb, subs)
        stored = (q.view(np.int8).astype(np.int16) + 128).astype(np.uint8)   # (q6 - 32) + 128
        qs = quant_panels(stored.reshape(n_out, n_in), n_out, 16, False)
        return IntMatrix(ggml_type, n_out, n_in, False, 16, 0, qs, panels(d, n_out), None,
                         panels(sc, n_out))
    d = halves(blocks, 0).reshape(n_out, nb)
    minus_dmin = halves(blocks, 2).reshape(n_out, nb) ^ np.uint16(0x8000)   # the sign bit
    sc6, mn6 = k4_scales_mins(blocks)                          # (n, 8) each
    q = q.view(np.uint8).reshape(n_out, n_in)                   # Q4_K 0..15, Q5_K 0..31
    qh = fifth_bit_panels(q, n_out) if ggml_type == T.Q5_K else None
    qs = quant_panels(q & np.uint8(15), n_out, 32, True)
    return IntMatrix(ggml_type, n_out, n_in, True, 32, 0, qs, panels(d, n_out),
                     panels(minus_dmin, n_out), panels(sc6.reshape(n_out, nb, subs), n_out),
                     panels(mn6.reshape(n_out, nb, subs), n_out), qh)


# --- the kernels ---------------------------------------------------------------------------
#
# One panel (16 outputs), one block of R rows starting at row r, in registers of lanes(isa)
# outputs (AVX-512: the whole panel; AVX2: half of it, or for one row all of it in two
# registers side by side, ``ONE_ROW_REGS``). `isa` carries R and the width (``simd``).

@njit(inline="always")
def legacy_block_sum(isa, nibbles, qs, at, qh, hat, xq, x0, n_in, a):  # type: ignore[no-untyped-def]
    """R rows' integer sums over one block of 32 inputs, added to `a`: stored quants at
    qs[at:] (and their fifth bits at qh[hat:], or qh None), activations at xq[x0:] (row stride
    n_in)."""
    chain = one_chain(isa)         # a constant of the build: the branches below fold away
    if nibbles:
        # the low and the high nibbles' products in two chains (half the dependent latency),
        # widened once for the block where the int16 partial sums allow it (``simd.widen``);
        # with VNNI and four or more rows, straight into the row's sum (``simd.one_chain``)
        lo = pzero(isa)
        hi = pzero(isa)
        for c in range(4):
            prefetch(qs, at + c * 64 + AHEAD)
            w = load_bytes(isa, qs, at + c * 64)
            wl = low_nibbles(w)
            wh = high_nibbles(w)
            if qh is not None:
                wl = bor(wl, fifth_bits(isa, qh, hat + c * 16))
                wh = bor(wh, fifth_bits(isa, qh, hat + c * 16 + 8))
            xl = broadcast4(isa, xq, x0 + 4 * c, n_in)
            xh = broadcast4(isa, xq, x0 + 16 + 4 * c, n_in)
            if chain:
                a = dot4(isa, dot4(isa, a, wl, xl), wh, xh)
            else:
                lo = dot4_part(isa, lo, wl, xl)
                hi = dot4_part(isa, hi, wh, xh)
        if chain:
            return a
        if qh is None:                                  # 8 products of nibbles <= 15
            return widen(isa, a, padd(lo, hi))
        return widen(isa, widen(isa, a, lo), hi)        # 4 and 4 of 5-bit quants <= 31
    if chain:
        for c in range(8):
            prefetch(qs, at + c * 64 + AHEAD)
            a = dot4_wide(isa, a, load_bytes(isa, qs, at + c * 64),
                          broadcast4(isa, xq, x0 + 4 * c, n_in))
        return a
    b = izero(isa)
    for c in range(0, 8, 2):
        prefetch(qs, at + c * 64 + AHEAD)
        prefetch(qs, at + c * 64 + 64 + AHEAD)
        a = dot4_wide(isa, a, load_bytes(isa, qs, at + c * 64),
                      broadcast4(isa, xq, x0 + 4 * c, n_in))
        b = dot4_wide(isa, b, load_bytes(isa, qs, at + (c + 1) * 64),
                      broadcast4(isa, xq, x0 + 4 * (c + 1), n_in))
    return iadd(a, b)


@njit(inline="always")
def legacy_shift(isa, nibbles, offset):  # type: ignore[no-untyped-def]
    """What the stored quants add per unit of sum(qx): Q4_0's 8, Q5_0's 16, bytes' 128 (VNNI),
    else 0."""
    return offset if nibbles else wide_offset(isa)


@njit(inline="always")
def legacy_panel(isa, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out, p, r, n_in):  # type: ignore[no-untyped-def]
    L = lanes(isa)
    nb = n_in // 32
    chunk = 256 if nibbles else 512                            # a block's bytes for 16 outputs
    shifted = legacy_shift(isa, nibbles, offset) != 0
    for h in range(16 // L):                                   # the panel's registers
        f = fzero(isa)
        for b in range(nb):
            k = (p * nb + b) * 16 + h * L                      # this register's scales
            # the sums start from -shift * sum(qx) (``starts``), which takes the shift off
            a0 = isplat_rows(isa, start, r * nb + b, nb) if shifted else izero(isa)
            a = legacy_block_sum(isa, nibbles, qs, (p * nb + b) * chunk + h * L * 4, qh,
                                 (p * nb + b) * 64 + h * L // 2, xq, r * n_in + b * 32, n_in, a0)
            f = fma(fmul(load_halves(isa, d, k), fsplat_rows(isa, xd, r * nb + b, nb)),
                    to_floats(a), f)
            if m is not None:
                f = fma(load_halves(isa, m, k), fsplat_rows(isa, xs, r * nb + b, nb), f)
        store_rows(isa, out, r, p * 16 + h * L, f)


@njit(inline="always")
def kquant_panel(isa, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, r,  # type: ignore[no-untyped-def]
                 n_in):
    for h in range(16 // lanes(isa)):                          # the panel's registers
        kquant_register(isa, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, h, r,
                        n_in)


@njit(inline="always")
def kquant_register(isa, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, h, r,  # type: ignore[no-untyped-def]
                    n_in):
    L = lanes(isa)
    nb = n_in // 256
    subs = 256 // group
    ng = n_in // group                                         # sums per row
    chunk = 256 if nibbles else 16 * group                     # a sub-block's bytes, 16 outputs
    f = fzero(isa)
    for b in range(nb):
        scaled = izero(isa)                                    # sum_s sc_s isum_s
        mins = izero(isa)                                      # sum_s mn_s sum(qx over s)
        for s in range(subs):
            g = b * subs + s
            at = (p * n_in // group + g) * chunk + h * L * 4
            if nibbles:
                a = legacy_block_sum(isa, True, qs, at, qh, (p * ng + g) * 64 + h * L // 2, xq,
                                     r * n_in + g * 32, n_in, izero(isa))
            else:                       # from -128 * sum(qx) (``starts``): q + 128 -> q
                part = pzero(isa)       # Q6_K: four products of |q| <= 32, widened once
                for c in range(group // 4):
                    prefetch(qs, at + c * 64 + AHEAD)
                    part = dot4_part_wide(isa, part, load_bytes(isa, qs, at + c * 64),
                                          broadcast4(isa, xq, r * n_in + g * group + 4 * c,
                                                     n_in))
                a = widen(isa, isplat_rows(isa, xsum, r * ng + g, ng), part)
            k = ((p * nb + b) * subs + s) * 16 + h * L
            scaled = iadd(scaled, imul(a, load_widened(isa, sc, k)))
            if mn is not None:
                mins = iadd(mins, imul(isplat_rows(isa, xsum, r * ng + g, ng),
                                       load_widened(isa, mn, k)))
        k = (p * nb + b) * 16 + h * L
        dx = fsplat_rows(isa, xd, r * nb + b, nb)
        f = fma(fmul(load_halves(isa, d, k), dx), to_floats(scaled), f)
        if m is not None:
            f = fma(fmul(load_halves(isa, m, k), dx), to_floats(mins), f)
    store_rows(isa, out, r, p * 16 + h * L, f)


@njit(inline="always")
def starts(sums, shift):  # type: ignore[no-untyped-def]
    """sums (of qx, per block) -> -shift * sums, in place: where each block's integer sum
    starts, so that the sum over stored quants q + shift comes out the sum over q."""
    for k in range(sums.size):
        sums[k] = -shift * sums[k]


@njit(parallel=True, cache=True)
def legacy_matmul(isa, four, two, one, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out,  # type: ignore[no-untyped-def]
                  n_in):
    """out (T, panels * 16) = x @ W.T for a legacy format: blocks of R rows (`isa`), then the
    rows left in a block of four (`four`, None where R is four: numba then prunes that branch
    and compiles one panel fewer), two (`two`) and one (`one`); a panel per thread.
    `start`: each block's -shift * sum(qx) (``starts``)."""
    R = rows(isa)
    t_rows = out.shape[0]
    for p in prange(out.shape[1] // 16):
        r = 0
        while r + R <= t_rows:
            legacy_panel(isa, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out, p, r, n_in)
            r += R
        if four is not None and r + 4 <= t_rows:
            legacy_panel(four, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out, p, r, n_in)
            r += 4
        if r + 2 <= t_rows:
            legacy_panel(two, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out, p, r, n_in)
            r += 2
        if r < t_rows:
            legacy_panel(one, nibbles, offset, qs, qh, d, m, xq, xd, start, xs, out, p, r, n_in)


@njit(parallel=True, cache=True)
def kquant_matmul(isa, four, two, one, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out,  # type: ignore[no-untyped-def]
                  n_in):
    """``legacy_matmul`` for the k-quants."""
    R = rows(isa)
    t_rows = out.shape[0]
    for p in prange(out.shape[1] // 16):
        r = 0
        while r + R <= t_rows:
            kquant_panel(isa, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, r, n_in)
            r += R
        if four is not None and r + 4 <= t_rows:
            kquant_panel(four, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, r, n_in)
            r += 4
        if r + 2 <= t_rows:
            kquant_panel(two, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, r, n_in)
            r += 2
        if r < t_rows:
            kquant_panel(one, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out, p, r, n_in)


@njit(cache=True)
def legacy_product(isa, four, two, one, nibbles, offset, qs, qh, d, m, x, out, n_in):  # type: ignore[no-untyped-def]
    """``legacy_matmul`` of x (T, n_in) float32 quantized here to Q8_0 blocks (with Q8_1's
    term): one call from Python where two were, since a decode step makes a hundred."""
    blocks = x.shape[0] * n_in // 32
    xq = np.empty(x.shape[0] * n_in, np.int8)
    xd = np.empty(blocks, np.float32)
    xsum = np.empty(blocks, np.int32)
    xs = np.empty(blocks, np.float32)
    quantize_q8_0(one, x, xq, xd, xsum, xs)
    starts(xsum, legacy_shift(isa, nibbles, offset))
    legacy_matmul(isa, four, two, one, nibbles, offset, qs, qh, d, m, xq, xd, xsum, xs, out, n_in)


@njit(cache=True)
def kquant_product(isa, four, two, one, nibbles, group, qs, qh, d, m, sc, mn, x, out, n_in):  # type: ignore[no-untyped-def]
    """``kquant_matmul`` of x (T, n_in) float32 quantized here to Q8_K blocks."""
    xq = np.empty(x.shape[0] * n_in, np.int8)
    xd = np.empty(x.shape[0] * n_in // 256, np.float32)
    xsum = np.empty(x.shape[0] * n_in // group, np.int32)
    quantize_q8_k(x, xq, xd, xsum, group)
    if not nibbles:
        starts(xsum, wide_offset(isa))
    kquant_matmul(isa, four, two, one, nibbles, group, qs, qh, d, m, sc, mn, xq, xd, xsum, out,
                  n_in)


FLOAT32 = np.dtype(np.float32)


def compiled_entry(kernel: Any, args: tuple[Any, ...]) -> Callable[..., None] | None:
    """The machine code numba compiled `kernel` to for arguments of the types of `args`, as a
    Python callable that skips the dispatcher (which types every argument on every call: about
    a microsecond for a product's twelve), or None if it has not compiled them. The caller must
    pass arguments of exactly those types."""
    cres = kernel.overloads.get(tuple(kernel.typeof_pyval(a) for a in args))
    return None if cres is None else cres.entry_point


# rows per register block: eight with AVX-512's 32 registers (each weight register then feeds
# eight rows: a 16-row verify batch costs 5% less than in blocks of four), four with 16
ROWS = {"vnni512": 8, "vnni256": 4, "avx2": 4}
# a row alone (decode) walks a panel's 16 outputs as one "register" of two AVX2 registers: the
# activations' broadcasts and the loop's own work are shared by both
ONE_ROW_REGS = {"avx2": 2}
_ISAS: dict[str, tuple[simd.Isa, simd.Isa | None, simd.Isa, simd.Isa]] = {}


def _host_isa() -> str:
    """The integer build this process runs (``isa.integer_isa``); AVX2's where the choice is
    the float kernels, for a caller that holds integer weights anyway."""
    return integer_isa() or "avx2"


def _isas(isa: str) -> tuple[simd.Isa, simd.Isa | None, simd.Isa, simd.Isa]:
    """`isa` with ROWS[isa] rows, four (None where ROWS[isa] is four: no block of four is ever
    left over, and a None lets numba skip compiling that block's code, a fifth to two fifths
    of a product's compile), two and one (made once: the kernels' first arguments)."""
    if isa not in _ISAS:
        _ISAS[isa] = (simd.Isa(isa, ROWS[isa]), simd.Isa(isa, 4) if ROWS[isa] > 4 else None,
                      simd.Isa(isa, 2), simd.Isa(isa, 1, ONE_ROW_REGS.get(isa, 1)))
    return _ISAS[isa]


def matmul(x: F32, w: IntMatrix, isa: str, out: F32 | None = None) -> F32:
    """x (T, n_in) float32 @ W.T -> (T, n_out) through the integer kernels of `isa`
    (``simd.ISAS``), into `out` if given (any (T, n_out) float32 view whose rows are
    contiguous, such as some columns of a wider array); x is quantized inside the same
    compiled call."""
    t, n_cols = x.shape[0], w.n_panels * PANEL
    y = np.empty((t, w.n_out), np.float32) if out is None else out
    target = y if n_cols == w.n_out and y.strides[1] == 4 else np.empty((t, n_cols), np.float32)
    block, four, two, one = _isas(isa)
    x = float_rows(x)
    if w.ggml_type in LEGACY:
        legacy_product(block, four, two, one, w.nibbles, w.offset, w.qs, w.qh, w.d, w.m, x,
                       target, w.n_in)
    else:
        kquant_product(block, four, two, one, w.nibbles, w.group, w.qs, w.qh, w.d, w.m, w.sc,
                       w.mn, x, target, w.n_in)
    if target is not y:
        y[...] = target[:, :w.n_out]
    return y
