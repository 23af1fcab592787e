"""Vector instructions for numba: the few the integer products (and the exact attention's
scores and weighted sum of values) need, as numba intrinsics over LLVM vector types.

numba compiles Python loops to LLVM, which vectorises float arithmetic well but widens
integer arithmetic to 64 bits, so it never emits the byte dot products a quantized product
is built on. Here a vector is a value of its own numba type whose data model is an LLVM
vector, and each operation is one intrinsic. The one that matters:

    dot4(isa, acc, w, x)   acc[l] += w[4l] x[4l] + ... + w[4l+3] x[4l+3]
                           (w unsigned bytes, x signed bytes, acc int32 lanes)

is AVX-512 VNNI's ``vpdpbusd`` (16 lanes at once), AVX-VNNI's (8 lanes), or on AVX2 the pair
``vpmaddubsw`` (byte products summed in pairs to int16) and ``vpmaddwd`` (pairs of int16
summed to int32).

An instruction set (``Isa``: a value with no data, its numba type carries the name) is the
first argument of every intrinsic, so the kernels are one Python source compiled once per
set they are called with. A kernel for a set the CPU lacks must never be compiled (LLVM stops
the process with "Cannot select"): ``llmnb.kernels.isa`` picks the set from the host's
features before any call.

An ``Isa`` also carries a number of rows R. A value "of R rows" is R registers side by side
in one LLVM vector (LLVM keeps them in R registers): the activations of R rows, broadcast
(``broadcast4``), and the R accumulators they feed. A value of one row (a weight vector, a
per-output scale) meets one of R rows by being repeated in each, which costs nothing: the
register is reused. So a kernel written once for R rows keeps R rows' sums in registers and
reads each weight vector once for all of them (a register-blocked product).

AVX2's ``vpmaddubsw`` saturates its int16 pair sums. Unsigned weights up to 127 against int8
activations never reach the limit, but weights stored as q + 128 (every byte format here:
Q8_0's q spans -128..127) can. ``dot4_wide`` is the product for those: with VNNI the plain
product (its offset, 128 * sum(x), is taken off by the caller: ``wide_offset``), on AVX2 the
product of q itself by llama.cpp's sign trick (|q| times x with q's sign), offset 0.

Where the weights are small (nibbles), AVX2's int16 pair sums of several products are added
before one ``vpmaddwd`` widens them (``dot4_part``, ``widen``): the multiplies are most of a
product's time on CPUs with one vector multiply pipe.

The module is long (about 950 lines) because each of its forty-odd operations is a typing rule
and a few lines of LLVM IR; they share the vector type and its helpers, and read as one list.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import (
    NativeValue, intrinsic, models, register_model, typeof_impl, unbox,
)

import llmnb.kernels.jit  # noqa: F401  (numba configured before the first compile)

VECTOR_BYTES = {"vnni512": 64, "vnni256": 32, "avx2": 32}
ISAS = tuple(VECTOR_BYTES)


class IsaType(types.Type):  # type: ignore[misc]
    def __init__(self, name: str, rows: int, regs: int = 1) -> None:
        self.isa = name
        self.rows = rows
        self.nbytes = VECTOR_BYTES[name] * regs
        super().__init__(name=f"Isa[{name},{rows}]" if regs == 1 else f"Isa[{name},{rows},x{regs}]")


class Isa:
    """An instruction set the kernels are compiled for (one of ``ISAS``), the rows R its
    row-blocked values hold, and how many of the CPU's registers one "register" of a row is
    (`regs`: two AVX2 registers side by side cover 16 outputs, as one AVX-512 register does)."""

    def __init__(self, name: str, rows: int = 1, regs: int = 1) -> None:
        if name not in VECTOR_BYTES:
            raise ValueError(f"instruction set: expected one of {', '.join(ISAS)}, got {name!r}")
        if rows not in (1, 2, 4, 8):
            raise ValueError(f"rows: expected 1, 2, 4 or 8, got {rows}")
        if regs not in (1, 2):
            raise ValueError(f"regs: expected 1 or 2, got {regs}")
        self.name = name
        self.rows = rows
        self.regs = regs
        self._numba_type_ = IsaType(name, rows, regs)   # numba reads it without a typeof call

    @property
    def lanes(self) -> int:
        """int32 or float32 lanes in one register."""
        return VECTOR_BYTES[self.name] * self.regs // 4

    def __repr__(self) -> str:
        regs = f", regs={self.regs}" if self.regs > 1 else ""
        return f"Isa({self.name!r}, rows={self.rows}{regs})"


class VectorType(types.Type):  # type: ignore[misc]
    """`rows` registers of `nbytes` each, as one LLVM vector of bytes (i8), ints (i32) or
    floats (f32)."""

    def __init__(self, elem: str, nbytes: int, rows: int) -> None:
        self.elem = elem
        self.nbytes = nbytes
        self.rows = rows
        super().__init__(name=f"Vector[{elem},{nbytes}B,x{rows}]")

    @property
    def lanes(self) -> int:
        """Elements in one register."""
        return self.nbytes // WIDTHS[self.elem]

    def llvm(self) -> ir.VectorType:
        return ir.VectorType(SCALARS[self.elem], self.lanes * self.rows)

    def with_rows(self, rows: int) -> VectorType:
        return VectorType(self.elem, self.nbytes, rows)


I8, I16, I32, F32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.FloatType()
SCALARS = {"i8": I8, "i16": I16, "i32": I32, "f32": F32}
WIDTHS = {"i8": 1, "i16": 2, "i32": 4, "f32": 4}


@register_model(IsaType)
class IsaModel(models.OpaqueModel):  # type: ignore[misc]
    pass


@register_model(VectorType)
class VectorModel(models.PrimitiveModel):  # type: ignore[misc]
    def __init__(self, dmm: Any, fe_type: VectorType) -> None:
        super().__init__(dmm, fe_type, fe_type.llvm())


@typeof_impl.register(Isa)
def _typeof_isa(val: Isa, c: Any) -> IsaType:
    return IsaType(val.name, val.rows, val.regs)


@unbox(IsaType)
def _unbox_isa(typ: IsaType, obj: Any, c: Any) -> Any:
    return NativeValue(c.context.get_dummy_value())


# --- LLVM helpers -----------------------------------------------------------------------------

def _jit_only(f: Any) -> Any:
    """An intrinsic, typed for mypy as what it is to Python code: callable only from jitted code."""
    return f


def _vec(isa: IsaType, elem: str, rows: int | None = None) -> VectorType:
    return VectorType(elem, isa.nbytes, isa.rows if rows is None else rows)


def _splat(builder: ir.IRBuilder, value: ir.Value, count: int) -> ir.Value:
    """`value` (a scalar) in `count` lanes."""
    vt = ir.VectorType(value.type, count)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, count), None))


def _lanes_of(builder: ir.IRBuilder, v: ir.Value, start: int, count: int) -> ir.Value:
    """Lanes start .. start + count - 1 of v."""
    return _picks(builder, v, range(start, start + count))


def _picks(builder: ir.IRBuilder, v: ir.Value, lanes: range) -> ir.Value:
    """The lanes `lanes` of v, in that order."""
    picks = ir.Constant(ir.VectorType(I32, len(lanes)), list(lanes))
    return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), picks)


def _split(builder: ir.IRBuilder, v: ir.Value, parts: int) -> list[ir.Value]:
    """v in `parts` equal pieces, in order."""
    n = v.type.count // parts
    return [_lanes_of(builder, v, k * n, n) for k in range(parts)]


def _join(builder: ir.IRBuilder, parts: list[ir.Value]) -> ir.Value:
    """Vectors of one type (a power of two of them), end to end."""
    while len(parts) > 1:
        n = parts[0].type.count
        mask = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
        parts = [builder.shuffle_vector(a, b, mask) for a, b in zip(parts[0::2], parts[1::2])]
    return parts[0]


def _rows(builder: ir.IRBuilder, v: ir.Value, rows: int) -> list[ir.Value]:
    """v's R registers."""
    n = v.type.count // rows
    return [_lanes_of(builder, v, k * n, n) for k in range(rows)] if rows > 1 else [v]


def _repeat(builder: ir.IRBuilder, v: ir.Value, rows: int) -> ir.Value:
    """One register's value in each of R."""
    if rows == 1:
        return v
    n = v.type.count
    mask = [i % n for i in range(n * rows)]
    return builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, n * rows), mask))


def _pointer(context: Any, builder: ir.IRBuilder, aryty: Any, ary: ir.Value, index: ir.Value,
             as_type: ir.Type) -> ir.Value:
    """The address of element `index` of a 1-D contiguous array, as a pointer to `as_type`."""
    array = context.make_array(aryty)(context, builder, ary)
    return builder.bitcast(builder.gep(array.data, [index]), as_type.as_pointer())


def _index(builder: ir.IRBuilder, base: ir.Value, k: int, stride: ir.Value) -> ir.Value:
    return base if k == 0 else builder.add(base, builder.mul(stride, ir.Constant(stride.type, k)))


def _row_pointers(context: Any, builder: ir.IRBuilder, sig: Any, args: Any, rows: int,
                  as_type: ir.Type) -> list[ir.Value]:
    """The addresses of arr[r + k, c] for k < rows, as pointers to `as_type`: the call's
    arguments (isa, arr, r, c, ...), arr a 2-D array whose rows are contiguous."""
    array = context.make_array(sig.args[1])(context, builder, args[1])
    shape = cgutils.unpack_tuple(builder, array.shape, 2)
    strides = cgutils.unpack_tuple(builder, array.strides, 2)
    r0 = _ints(context, builder, args[2], sig.args[2])
    col = _ints(context, builder, args[3], sig.args[3])
    step = ir.Constant(r0.type, 1)
    return [builder.bitcast(cgutils.get_item_pointer2(context, builder, array.data, shape,
                                                      strides, "A",
                                                      [_index(builder, r0, k, step), col]),
                            as_type.as_pointer()) for k in range(rows)]


def _array(arr: Any, dtypes: tuple[Any, ...]) -> None:
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype in dtypes):
        raise TypeError(f"expected a 1-D array of {dtypes}, got {arr}")


def _call(builder: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    fn = cgutils.get_or_insert_function(builder.module,
                                        ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


def _ints(context: Any, builder: ir.IRBuilder, value: ir.Value, ty: Any) -> ir.Value:
    return context.cast(builder, value, ty, types.intp)


# --- constants and loads ----------------------------------------------------------------------

@_jit_only
@intrinsic
def lanes(typingctx: Any, isa: IsaType) -> Any:
    """int32 (or float32) lanes in one register: 16 with AVX-512, else 8."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return context.get_constant(types.intp, isa.nbytes // 4)
    return types.intp(isa), codegen


@_jit_only
@intrinsic
def izero(typingctx: Any, isa: IsaType) -> Any:
    """int32 zeros, R rows."""
    vt = _vec(isa, "i32")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return ir.Constant(vt.llvm(), None)
    return vt(isa), codegen


@_jit_only
@intrinsic
def fzero(typingctx: Any, isa: IsaType) -> Any:
    """float32 zeros, R rows."""
    vt = _vec(isa, "f32")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return ir.Constant(vt.llvm(), None)
    return vt(isa), codegen


@_jit_only
@intrinsic
def load_bytes(typingctx: Any, isa: IsaType, arr: Any, i: Any) -> Any:
    """One register of bytes, arr[i : i + vector bytes] (uint8 or int8, 1-D), unaligned."""
    _array(arr, (types.uint8, types.int8))
    vt = _vec(isa, "i8", 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        return builder.load(_pointer(context, builder, arr, args[1], index, vt.llvm()), align=1)
    return vt(isa, arr, i), codegen


@_jit_only
@intrinsic
def prefetch(typingctx: Any, arr: Any, i: Any) -> Any:
    """Ask for the cache line of arr[i] (1-D) to be read into the caches, without waiting for
    it: a hint, never a fault, so i may run past the array's end."""
    _array(arr, (types.uint8, types.int8))

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        array = context.make_array(sig.args[0])(context, builder, args[0])
        index = _ints(context, builder, args[1], sig.args[1])
        at = builder.bitcast(builder.gep(array.data, [index]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        _call(builder, "llvm.prefetch.p0", ir.VoidType(),
              [at, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.none(arr, i), codegen


@_jit_only
@intrinsic
def load_floats(typingctx: Any, isa: IsaType, arr: Any, i: Any) -> Any:
    """One register of float32, arr[i : i + lanes], unaligned."""
    _array(arr, (types.float32,))
    vt = _vec(isa, "f32", 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        return builder.load(_pointer(context, builder, arr, args[1], index, vt.llvm()), align=4)
    return vt(isa, arr, i), codegen


@_jit_only
@intrinsic
def load_halves(typingctx: Any, isa: IsaType, arr: Any, i: Any) -> Any:
    """One register of float32 from float16 bit patterns arr[i : i + lanes] (uint16, 1-D):
    ``vcvtph2ps``, exact."""
    _array(arr, (types.uint16,))
    vt = _vec(isa, "f32", 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        halves = builder.load(_pointer(context, builder, arr, args[1], index,
                                       ir.VectorType(ir.HalfType(), vt.lanes)), align=2)
        return builder.fpext(halves, vt.llvm())
    return vt(isa, arr, i), codegen


@_jit_only
@intrinsic
def load_widened(typingctx: Any, isa: IsaType, arr: Any, i: Any) -> Any:
    """One register of int32 from bytes arr[i : i + lanes]: uint8 zero-extended, int8
    sign-extended."""
    _array(arr, (types.uint8, types.int8))
    vt = _vec(isa, "i32", 1)
    extend = "sext" if arr.dtype == types.int8 else "zext"

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        small = builder.load(_pointer(context, builder, arr, args[1], index,
                                      ir.VectorType(I8, vt.lanes)), align=1)
        return getattr(builder, extend)(small, vt.llvm())
    return vt(isa, arr, i), codegen


@_jit_only
@intrinsic
def broadcast4(typingctx: Any, isa: IsaType, arr: Any, i: Any, stride: Any) -> Any:
    """R rows of bytes: row k holds arr[i + k*stride : i + k*stride + 4] in every 4-byte lane
    (the activations of R rows, four inputs each)."""
    _array(arr, (types.int8, types.uint8))
    vt = _vec(isa, "i8")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        i0 = _ints(context, builder, args[2], sig.args[2])
        step = _ints(context, builder, args[3], sig.args[3])
        words = []
        for k in range(isa.rows):
            ptr = _pointer(context, builder, arr, args[1], _index(builder, i0, k, step), I32)
            words.append(_splat(builder, builder.load(ptr, align=1), isa.nbytes // 4))
        return builder.bitcast(_join(builder, words), vt.llvm())
    return vt(isa, arr, i, stride), codegen


def _per_row(elem: str) -> Any:
    dtype = types.float32 if elem == "f32" else types.int32

    @intrinsic
    def fn(typingctx: Any, isa: IsaType, arr: Any, i: Any, stride: Any) -> Any:
        _array(arr, (dtype,))
        vt = _vec(isa, elem)

        def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
            i0 = _ints(context, builder, args[2], sig.args[2])
            step = _ints(context, builder, args[3], sig.args[3])
            regs = []
            for k in range(isa.rows):
                ptr = _pointer(context, builder, arr, args[1], _index(builder, i0, k, step),
                               SCALARS[elem])
                regs.append(_splat(builder, builder.load(ptr), vt.lanes))
            return _join(builder, regs)
        return vt(isa, arr, i, stride), codegen
    return fn


fsplat_rows = _per_row("f32")
fsplat_rows.__doc__ = "R rows of float32: row k holds arr[i + k*stride] in every lane."
isplat_rows = _per_row("i32")
isplat_rows.__doc__ = "R rows of int32: row k holds arr[i + k*stride] in every lane."


@_jit_only
@intrinsic
def rows(typingctx: Any, isa: IsaType) -> Any:
    """The rows R of `isa`'s row-blocked values."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return context.get_constant(types.intp, isa.rows)
    return types.intp(isa), codegen


@_jit_only
@intrinsic
def load_rows(typingctx: Any, isa: IsaType, arr: Any, r: Any, c: Any) -> Any:
    """R rows of float32: row k holds arr[r + k, c : c + lanes] (a 2-D float32 array whose rows
    are contiguous, any row stride): what ``store_rows`` stores."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
        raise TypeError(f"load_rows: expected a 2-D float32 array, got {arr}")
    vt = _vec(isa, "f32")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        one = ir.VectorType(F32, vt.lanes)
        return _join(builder, [builder.load(ptr, align=4) for ptr in
                               _row_pointers(context, builder, sig, args, isa.rows, one)])
    return vt(isa, arr, r, c), codegen


@_jit_only
@intrinsic
def store_rows(typingctx: Any, isa: IsaType, arr: Any, r: Any, c: Any, v: VectorType) -> Any:
    """arr[r + k, c : c + lanes] = row k of v, for each of its R rows (a 2-D float32 array
    whose rows are contiguous, any row stride)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
        raise TypeError(f"store_rows: expected a 2-D float32 array, got {arr}")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        regs = _rows(builder, args[4], v.rows)
        for reg, ptr in zip(regs, _row_pointers(context, builder, sig, args, v.rows,
                                                regs[0].type)):
            builder.store(reg, ptr, align=4)
        return context.get_dummy_value()
    return types.void(isa, arr, r, c, v), codegen


@_jit_only
@intrinsic
def store_floats(typingctx: Any, isa: IsaType, arr: Any, i: Any, v: VectorType) -> Any:
    """arr[i : i + lanes] = v (one row of float32; arr 1-D and contiguous), unaligned."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == types.float32
            and arr.layout == "C" and isinstance(v, VectorType) and v.rows == 1):
        raise TypeError(f"store_floats: expected a contiguous 1-D float32 array and one row, "
                        f"got {arr}, {v}")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        builder.store(args[3], _pointer(context, builder, arr, args[1], index, args[3].type),
                      align=4)
        return context.get_dummy_value()
    return types.void(isa, arr, i, v), codegen


# --- arithmetic: elementwise, a one-row operand repeated over the other's rows -----------------

def _bigger(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """a > b ? a : b, lane by lane: x86's max (b if either is NaN)."""
    return builder.select(builder.fcmp_ordered(">", a, b), a, b)


def _elementwise(op: str, elem: str, n_args: int = 2) -> Any:
    def typing(args: tuple[Any, ...]) -> VectorType:
        if not all(isinstance(a, VectorType) and a.elem == elem and a.nbytes == args[0].nbytes
                   for a in args) or len({a.rows for a in args} - {1}) > 1:
            raise TypeError(f"{op}: expected {elem} vectors of one width, got {args}")
        return args[0].with_rows(max(a.rows for a in args))

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        rows = sig.return_type.rows
        vals = [_repeat(builder, v, rows) if t.rows == 1 else v for v, t in zip(args, sig.args)]
        if op in ("fma", "maxnum"):
            vt = vals[0].type
            return _call(builder, f"llvm.{op}.v{vt.count}f32", vt, vals)
        if op == "bigger":
            return _bigger(builder, *vals)
        return getattr(builder, op)(*vals)

    if n_args == 2:
        @intrinsic
        def fn2(typingctx: Any, a: Any, b: Any) -> Any:
            out = typing((a, b))
            return out(a, b), codegen
        return fn2

    @intrinsic
    def fn3(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
        out = typing((a, b, c))
        return out(a, b, c), codegen
    return fn3


iadd = _elementwise("add", "i32")
imul = _elementwise("mul", "i32")
fadd = _elementwise("fadd", "f32")
fmul = _elementwise("fmul", "f32")
fma = _elementwise("fma", "f32", 3)          # a * b + c with one rounding
fmax = _elementwise("maxnum", "f32")         # the larger of a and b, lane by lane
fbigger = _elementwise("bigger", "f32")      # fmax where neither is NaN: one vmaxps, no fix-ups


fsub = _elementwise("fsub", "f32")


def _one_row(v: Any, elem: str, what: str) -> None:
    if not (isinstance(v, VectorType) and v.elem == elem and v.rows == 1):
        raise TypeError(f"{what}: expected one register of {elem}, got {v}")


@_jit_only
@intrinsic
def fabs(typingctx: Any, a: VectorType) -> Any:
    """|a|, lane by lane (one register)."""
    _one_row(a, "f32", "fabs")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        vt = args[0].type
        return _call(builder, f"llvm.fabs.v{vt.count}f32", vt, [args[0]])
    return a(a), codegen


@_jit_only
@intrinsic
def fsplat(typingctx: Any, isa: IsaType, x: Any) -> Any:
    """One register of float32, `x` in every lane."""
    vt = _vec(isa, "f32", 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return _splat(builder, context.cast(builder, args[1], sig.args[1], types.float32),
                      vt.lanes)
    return vt(isa, x), codegen


@_jit_only
@intrinsic
def to_ints(typingctx: Any, a: VectorType) -> Any:
    """float32 lanes -> int32, toward zero (exact for the whole numbers it is given)."""
    _one_row(a, "f32", "to_ints")
    vt = VectorType("i32", a.nbytes, 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.fptosi(args[0], vt.llvm())
    return vt(a), codegen


@_jit_only
@intrinsic
def store_bytes(typingctx: Any, isa: IsaType, arr: Any, i: Any, v: VectorType) -> Any:
    """arr[i : i + lanes] = v's int32 lanes cut to their low bytes (int8 or uint8 arr, 1-D)."""
    _array(arr, (types.int8, types.uint8))
    _one_row(v, "i32", "store_bytes")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        index = _ints(context, builder, args[2], sig.args[2])
        small = builder.trunc(args[3], ir.VectorType(I8, v.lanes))
        builder.store(small, _pointer(context, builder, arr, args[1], index, small.type),
                      align=1)
        return context.get_dummy_value()
    return types.void(isa, arr, i, v), codegen


@_jit_only
@intrinsic
def lanes_max(typingctx: Any, a: VectorType) -> Any:
    """The largest lane of one register of float32 (by halving, ``fbigger``'s max: for lanes
    that are not NaN, the same in any order)."""
    _one_row(a, "f32", "lanes_max")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        v = args[0]
        g = v.type.count
        while g > 1:
            g //= 2
            v = _bigger(builder, _lanes_of(builder, v, 0, g), _lanes_of(builder, v, g, g))
        return builder.extract_element(v, ir.Constant(I32, 0))
    return types.float32(a), codegen


@_jit_only
@intrinsic
def half_rounded(typingctx: Any, x: Any) -> Any:
    """float32 x rounded to the nearest float16 (ties to even; past the largest half,
    infinity) and back: what storing a scale as fp16 and reading it gives (F16C's vcvtps2ph,
    as ``load_halves`` reads with vcvtph2ps)."""
    if x != types.float32:
        raise TypeError(f"half_rounded: expected float32, got {x}")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), F32)
    return types.float32(x), codegen


@_jit_only
@intrinsic
def lanes_isum(typingctx: Any, a: VectorType) -> Any:
    """The sum of one register's int32 lanes (exact in any order)."""
    _one_row(a, "i32", "lanes_isum")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        vt = args[0].type
        return _call(builder, f"llvm.vector.reduce.add.v{vt.count}i32", I32, [args[0]])
    return types.int32(a), codegen


@_jit_only
@intrinsic
def to_floats(typingctx: Any, a: VectorType) -> Any:
    """int32 lanes -> float32 (exact below 2^24, rounded to nearest above)."""
    vt = VectorType("f32", a.nbytes, a.rows)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.sitofp(args[0], vt.llvm())
    return vt(a), codegen


@_jit_only
@intrinsic
def low_nibbles(typingctx: Any, w: VectorType) -> Any:
    """Each byte's low four bits, 0..15."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.and_(args[0], ir.Constant(args[0].type, [15] * args[0].type.count))
    return w(w), codegen


@_jit_only
@intrinsic
def high_nibbles(typingctx: Any, w: VectorType) -> Any:
    """Each byte's high four bits, 0..15."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.lshr(args[0], ir.Constant(args[0].type, [4] * args[0].type.count))
    return w(w), codegen


@_jit_only
@intrinsic
def fifth_bits(typingctx: Any, isa: IsaType, arr: Any, i: Any) -> Any:
    """One register of bytes, 16 where bit b of the bits at arr[i:] is set, else 0, for each
    byte b of the register (AVX-512: one mask register and one masked move)."""
    _array(arr, (types.uint8,))
    vt = _vec(isa, "i8", 1)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        n = vt.lanes
        index = _ints(context, builder, args[2], sig.args[2])
        word = builder.load(_pointer(context, builder, arr, args[1], index, ir.IntType(n)), align=1)
        bits = builder.bitcast(word, ir.VectorType(ir.IntType(1), n))
        return builder.select(bits, ir.Constant(vt.llvm(), [16] * n), ir.Constant(vt.llvm(), None))
    return vt(isa, arr, i), codegen


@_jit_only
@intrinsic
def bor(typingctx: Any, a: VectorType, b: VectorType) -> Any:
    """Bitwise or of two byte registers."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.or_(args[0], args[1])
    return a(a, b), codegen


# --- the byte dot product -----------------------------------------------------------------------

def _dot4_one(builder: ir.IRBuilder, isa: str, wide: bool, acc: ir.Value, w: ir.Value,
              x: ir.Value) -> ir.Value:
    """One register: acc + four byte products per int32 lane."""
    n = w.type.count                                               # bytes in the register
    parts = n // VECTOR_BYTES[isa]                                 # the CPU's registers in it
    if parts > 1:
        return _join(builder, [_dot4_one(builder, isa, wide, a, ww, xx) for a, ww, xx in
                               zip(_split(builder, acc, parts), _split(builder, w, parts),
                                   _split(builder, x, parts))])
    if isa.startswith("vnni"):
        return _call(builder, f"llvm.x86.avx512.vpdpbusd.{8 * n}", acc.type, [acc, w, x])
    if wide:
        w, x = _signed(builder, w, x)
    return _widened(builder, acc, _pairs(builder, w, x))


def _dot4(wide: bool) -> Any:
    def typing(isa: IsaType, acc: Any, w: Any, x: Any) -> Any:
        if not (acc == _vec(isa, "i32") and w == _vec(isa, "i8", 1) and x == _vec(isa, "i8")):
            raise TypeError(f"dot4: expected R-row ints, one-row bytes and R-row bytes of {isa}, "
                            f"got {acc}, {w}, {x}")
        return acc(isa, acc, w, x)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        isa = sig.args[0]
        accs = _rows(builder, args[1], isa.rows)
        xs = _rows(builder, args[3], isa.rows)
        return _join(builder, [_dot4_one(builder, isa.isa, wide, a, args[2], x)
                               for a, x in zip(accs, xs)])

    @intrinsic
    def fn(typingctx: Any, isa: IsaType, acc: Any, w: Any, x: Any) -> Any:
        return typing(isa, acc, w, x), codegen
    return fn


# --- byte products summed before they are widened (AVX2: one vpmaddwd for several) ------------
#
# On AVX2 a byte dot product is two multiplies: vpmaddubsw (byte pairs to int16) and vpmaddwd
# (int16 pairs to int32, by ones). Where the weights are small, several vpmaddubsw results can be
# added as int16 first and widened once: a Q4 block's eight products (nibbles <= 15 against
# |x| <= 127: 8 * 2 * 15 * 127 = 30,480 < 32,767) take one vpmaddwd where they took eight. On
# CPUs whose vector multiplies share one pipe (AMD Zen 1 and 2) that is most of the products'
# time. With VNNI the partial sums are int32 (vpdpbusd widens as it goes) and the widening is an
# add: the same integers either way.

def _partial(isa: IsaType) -> VectorType:
    return _vec(isa, "i16" if isa.isa == "avx2" else "i32")


@_jit_only
@intrinsic
def pzero(typingctx: Any, isa: IsaType) -> Any:
    """Zero partial sums, R rows (``dot4_part``): int16 pairs on AVX2, int32 with VNNI."""
    vt = _partial(isa)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return ir.Constant(vt.llvm(), None)
    return vt(isa), codegen


def _signed(builder: ir.IRBuilder, w: ir.Value, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Weights stored as q + 128 -> |q| and x with q's sign (llama.cpp's sign trick: the
    unsigned-by-signed product of the two is q x)."""
    n = w.type.count
    q = builder.xor(w, ir.Constant(w.type, [-128] * n))
    x = _per_register(builder, "psign.b", x.type, x, q)
    return _call(builder, f"llvm.abs.v{n}i8", q.type, [q, ir.Constant(ir.IntType(1), 0)]), x


def _per_register(builder: ir.IRBuilder, op: str, ret: ir.VectorType, a: ir.Value,
                  b: ir.Value) -> ir.Value:
    """AVX2's 32-byte `op` (``llvm.x86.avx2.<op>``) of a and b, byte vectors of 32 or more
    bytes, register by register; for a CPU without AVX2 (the AVX2 kernels compiled for integer
    weights held there anyway), SSSE3's on 16-byte pieces: LLVM cannot compile the 32-byte form
    for it."""
    if _target_has_avx2():
        size, name = 32, f"llvm.x86.avx2.{op}"
    else:
        size, name = 16, f"llvm.x86.ssse3.{op}.128"
    parts = a.type.count // size
    piece = ir.VectorType(ret.element, ret.count // parts)
    return _join(builder, [_call(builder, name, piece, [x, y]) for x, y in
                           zip(_split(builder, a, parts), _split(builder, b, parts))])


def _target_has_avx2() -> bool:
    """Whether numba compiles for a CPU with AVX2 (``isa.cpu_features``)."""
    if not _AVX2:
        from llmnb.kernels.isa import cpu_features

        _AVX2.append("avx2" in cpu_features())
    return _AVX2[0]


_AVX2: list[bool] = []


def _widened(builder: ir.IRBuilder, acc: ir.Value, pairs: ir.Value) -> ir.Value:
    """acc (int32) + the int16 `pairs` summed two by two: vpmaddwd by ones (without AVX2, the
    even and the odd lanes sign-extended and added)."""
    n = pairs.type.count
    wide = ir.VectorType(I32, n // 2)
    if _target_has_avx2():
        ones = ir.Constant(ir.VectorType(pairs.type.element, 16), [1] * 16)
        quads = [_call(builder, "llvm.x86.avx2.pmadd.wd", ir.VectorType(I32, 8), [p, ones])
                 for p in _split(builder, pairs, n // 16)]
        return builder.add(acc, _join(builder, quads))
    even = builder.sext(_picks(builder, pairs, range(0, n, 2)), wide)
    odd = builder.sext(_picks(builder, pairs, range(1, n, 2)), wide)
    return builder.add(acc, builder.add(even, odd))


def _pairs(builder: ir.IRBuilder, w: ir.Value, x: ir.Value) -> ir.Value:
    """vpmaddubsw: byte products w * x (unsigned by signed) summed in pairs to int16."""
    return _per_register(builder, "pmadd.ub.sw",
                         ir.VectorType(ir.IntType(16), w.type.count // 2), w, x)


def _dot4_part(wide: bool) -> Any:
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        isa = sig.args[0]
        parts = _rows(builder, args[1], isa.rows)
        xs = _rows(builder, args[3], isa.rows)
        out = []
        for s, x in zip(parts, xs):
            if isa.isa.startswith("vnni"):
                out.append(_dot4_one(builder, isa.isa, wide, s, args[2], x))
                continue
            w = args[2]
            if wide:
                w, x = _signed(builder, w, x)
            out.append(builder.add(s, _pairs(builder, w, x)))
        return _join(builder, out)

    @intrinsic
    def fn(typingctx: Any, isa: IsaType, s: Any, w: Any, x: Any) -> Any:
        if not (s == _partial(isa) and w == _vec(isa, "i8", 1) and x == _vec(isa, "i8")):
            raise TypeError(f"dot4_part: expected R-row partial sums, one-row bytes and R-row "
                            f"bytes of {isa}, got {s}, {w}, {x}")
        return s(isa, s, w, x), codegen
    return fn


dot4_part = _dot4_part(False)
dot4_part.__doc__ = """``dot4`` into partial sums `s` (``pzero``): on AVX2 s + vpmaddubsw(w, x) as
int16, with no widening. The caller keeps every int16 lane below 2^15 until ``widen``: at most
eight products of weights <= 15 (nibbles), four of weights <= 31."""
dot4_part_wide = _dot4_part(True)
dot4_part_wide.__doc__ = """``dot4_part`` for weights stored as q + 128 (``dot4_wide``): on AVX2
|q| times x with q's sign, so at most four products of |q| <= 32 (Q6_K) before ``widen``."""


@_jit_only
@intrinsic
def padd(typingctx: Any, a: VectorType, b: VectorType) -> Any:
    """The sum of two partial sums (``dot4_part``), lane by lane."""
    if not (isinstance(a, VectorType) and a == b and a.elem in ("i16", "i32")):
        raise TypeError(f"padd: expected two partial sums of one type, got {a}, {b}")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return builder.add(args[0], args[1])
    return a(a, b), codegen


@_jit_only
@intrinsic
def widen(typingctx: Any, isa: IsaType, acc: VectorType, s: VectorType) -> Any:
    """acc (int32, R rows) + the partial sums `s`: on AVX2 their int16 pairs summed to int32 by
    one vpmaddwd (by ones), with VNNI an add."""
    if not (acc == _vec(isa, "i32") and s == _partial(isa)):
        raise TypeError(f"widen: expected R-row int32 sums and partial sums of {isa}, "
                        f"got {acc}, {s}")

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        if isa.isa.startswith("vnni"):
            return builder.add(args[1], args[2])
        return _join(builder, [_widened(builder, a, p) for a, p in
                               zip(_rows(builder, args[1], isa.rows),
                                   _rows(builder, args[2], isa.rows))])
    return acc(isa, acc, s), codegen


dot4 = _dot4(False)
dot4.__doc__ = """acc + four byte products per int32 lane, in each of R rows: w (one register)
unsigned, at most 127 on AVX2; x (R rows) signed."""
dot4_wide = _dot4(True)
dot4_wide.__doc__ = """``dot4`` for weights stored as q + 128 (any byte value): with VNNI the
same product (its offset, 128 * sum(x), is the caller's to take off: ``wide_offset``), on AVX2
the product of q itself."""


@_jit_only
@intrinsic
def one_chain(typingctx: Any, isa: IsaType) -> Any:
    """Whether a block's byte products go straight into the row's int32 sum, one chain of
    ``dot4`` per row: with VNNI (no int16 partial sums to widen) and four or more rows, whose
    chains are independent work enough to hide each vpdpbusd's latency. Fewer rows keep two
    chains a row, added at the end."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return context.get_constant(types.boolean, isa.isa.startswith("vnni") and isa.rows >= 4)
    return types.boolean(isa), codegen


@_jit_only
@intrinsic
def wide_offset(typingctx: Any, isa: IsaType) -> Any:
    """What ``dot4_wide`` adds per unit of sum(x): 128 with VNNI, 0 on AVX2."""
    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        return context.get_constant(types.int32, 128 if isa.isa.startswith("vnni") else 0)
    return types.int32(isa), codegen


# --- the attention's scores: a row's dot products with keys, in one order however many -----------

def _halving(n: int) -> list[tuple[list[int], list[int]]]:
    """The picks that sum n vectors of n lanes into one whose lane m is vector m's lanes summed
    by halving (lane l with lane l + n/2, then l with l + n/4, ... as ``_reduce_one`` does): at
    each level two vectors holding keys in groups of g lanes give one holding twice the keys in
    groups of g/2, as the first halves of every group (A) plus the second halves (B)."""
    levels = []
    g = n
    while g > 1:
        h = g // 2
        a: list[int] = []
        b: list[int] = []
        for base in range(0, 2 * n, g):
            a += list(range(base, base + h))
            b += list(range(base + h, base + g))
        levels.append((a, b))
        g = h
    return levels


def _reduce_many(builder: ir.IRBuilder, vecs: list[ir.Value], n: int) -> ir.Value:
    for a, b in _halving(n):
        pa = ir.Constant(ir.VectorType(I32, n), a)
        pb = ir.Constant(ir.VectorType(I32, n), b)
        vecs = [builder.fadd(builder.shuffle_vector(x, y, pa), builder.shuffle_vector(x, y, pb))
                for x, y in zip(vecs[0::2], vecs[1::2])]
    return vecs[0]


def _reduce_one(builder: ir.IRBuilder, v: ir.Value, n: int) -> ir.Value:
    g = n
    while g > 1:
        h = g // 2
        v = builder.fadd(_lanes_of(builder, v, 0, h), _lanes_of(builder, v, h, h))
        g = h
    return builder.extract_element(v, ir.Constant(I32, 0))


def _key_dots(context: Any, builder: ir.IRBuilder, isa: IsaType, sig: Any, args: Any,
              count: int) -> list[ir.Value]:
    """Vectors of lanes for keys j .. j + count - 1: lane l of key m sums row[c + l] *
    keys[j + m, c + l] over the chunks c = 0, n, 2n, ... below hd (one fused multiply-add each,
    in that order)."""
    n = isa.nbytes // 4
    vt = ir.VectorType(F32, n)
    row = context.make_array(sig.args[1])(context, builder, args[1])
    keys = context.make_array(sig.args[2])(context, builder, args[2])
    hd = cgutils.unpack_tuple(builder, row.shape, 1)[0]
    j = _ints(context, builder, args[3], sig.args[3])
    accs = [cgutils.alloca_once_value(builder, ir.Constant(vt, None)) for _ in range(count)]
    with cgutils.for_range(builder, builder.udiv(hd, ir.Constant(hd.type, n))) as loop:
        c = builder.mul(loop.index, ir.Constant(hd.type, n))
        q = builder.load(builder.bitcast(builder.gep(row.data, [c]), vt.as_pointer()), align=4)
        for m in range(count):
            at = builder.add(builder.mul(builder.add(j, ir.Constant(j.type, m)), hd), c)
            k = builder.load(builder.bitcast(builder.gep(keys.data, [at]), vt.as_pointer()),
                             align=4)
            builder.store(_call(builder, f"llvm.fma.v{n}f32", vt, [k, q, builder.load(accs[m])]),
                          accs[m])
    return [builder.load(a) for a in accs]


def _rows_and_keys(row: Any, keys: Any) -> None:
    if not (isinstance(row, types.Array) and row.ndim == 1 and row.dtype == types.float32
            and row.layout == "C" and isinstance(keys, types.Array) and keys.ndim == 2
            and keys.dtype == types.float32 and keys.layout == "C"):
        raise TypeError(f"expected a contiguous float32 row and (S, hd) keys, got {row}, {keys}")


@_jit_only
@intrinsic
def key_scores(typingctx: Any, isa: IsaType, row: Any, keys: Any, j: Any, out: Any) -> Any:
    """out[j : j + lanes] = row . keys[j + m] for the next `lanes` keys m, each summed in the
    order ``key_score`` sums it: the same bits, a block of keys at a time (their lanes are summed
    together, a few shuffles for all of them). row (hd,), keys (S, hd) with hd a multiple of
    lanes (the caller adds the rest), both contiguous."""
    _rows_and_keys(row, keys)
    _array(out, (types.float32,))

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        n = isa.nbytes // 4
        total = _reduce_many(builder, _key_dots(context, builder, isa, sig, args, n), n)
        j = _ints(context, builder, args[3], sig.args[3])
        builder.store(total, _pointer(context, builder, sig.args[4], args[4], j, total.type),
                      align=4)
        return context.get_dummy_value()
    return types.void(isa, row, keys, j, out), codegen


@_jit_only
@intrinsic
def key_score(typingctx: Any, isa: IsaType, row: Any, keys: Any, j: Any) -> Any:
    """row . keys[j] over the multiples of lanes in hd: a vector of lanes, each summing its
    elements chunk by chunk (fused multiply-adds), then the lanes by halving."""
    _rows_and_keys(row, keys)

    def codegen(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> ir.Value:
        n = isa.nbytes // 4
        return _reduce_one(builder, _key_dots(context, builder, isa, sig, args, 1)[0], n)
    return types.float32(isa, row, keys, j), codegen


__all__ = [
    "ISAS", "Isa", "bor", "broadcast4", "dot4", "dot4_wide", "fabs", "fadd", "fbigger",
    "fifth_bits", "fma", "fmax", "fmul", "fsplat", "fsplat_rows", "fsub", "fzero", "half_rounded",
    "high_nibbles", "iadd", "imul", "isplat_rows", "izero", "key_score",
    "key_scores", "lanes", "lanes_isum", "lanes_max", "load_bytes", "load_floats", "load_halves",
    "load_rows", "load_widened", "low_nibbles", "one_chain", "padd", "pzero", "rows", "store_bytes",
    "store_floats", "store_rows", "to_floats", "to_ints", "dot4_part", "dot4_part_wide", "widen",
    "wide_offset"
]
