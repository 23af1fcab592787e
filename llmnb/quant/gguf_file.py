"""Quantize a whole GGUF file (``llmnb quantize IN OUT TYPE``), choosing types like llama.cpp.

Which tensors are quantized (llama.cpp ``tensor_allows_quantization``, src/llama-quant.cpp):
names ending in ``weight`` with two or more dimensions, except ``*_norm.weight``,
``ffn_gate_inp.weight`` and positional / token-type embeddings. Everything else (norms,
biases, 1-D tensors) is copied byte for byte in its own type (F32 in the usual files).

The type of each quantized tensor (``llama_tensor_get_type``, dense models):

- F32, F16, BF16: every quantized tensor in that type ("pure"; llama.cpp applies no mixture
  to float targets).
- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K: that type, except the output matrix
  (``output.weight``, or ``token_embd.weight`` when embeddings are tied) which gets Q6_K
  unless the type is Q8_0 (or Q8_0 when its rows are not a multiple of that type's block).
  Note: ``llama-quantize`` reads "Q4_K" and "Q5_K" as aliases of Q4_K_M / Q5_K_M; here they
  mean "mostly Q4_K / Q5_K" (file type Q4_K_S / Q5_K_S).
- Q4_K_M: Q4_K, with Q6_K for the output matrix, and for ``attn_v.weight`` and
  ``ffn_down`` in the layers where ``use_more_bits(i, n)`` holds:
  ``i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2`` (integer division; i counts those tensors
  in file order, n is how many there are): the first and last eighth of the layers and
  every third layer in between. Fused ``attn_qkv.weight`` gets Q5_K.
- Q5_K_M: the same with Q5_K as the base and Q6_K for the bumped tensors (attn_qkv: Q6_K).

Rows that are not a multiple of the chosen type's block fall back as in llama.cpp:
Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 if even that does not divide
(Qwen2.5-0.5B's 896-wide rows are why its Q4_K_M file is mostly Q5_0 and Q8_0). A tensor
already in its target type is copied, not re-quantized. ``general.file_type`` is set to
llama.cpp's ``LLAMA_FTYPE`` value; all other metadata is copied unchanged.

diffuse-cpp's mixture (``diffuse-quantize``, reference/diffuse-cpp.md §2.4) is the rule for
its own files (arch ``diffuse``) and an option (``mixture="diffuse"``) for any other:

- norms, biases and every other tensor that is not quantized: F32 (an F16 norm is widened);
- ``token_embd.weight``: F16; ``output.weight``: Q6_K for Q4_K_M (and Q4_K, its alias in
  diffuse-cpp), else Q8_0;
- attention and FFN matrices: the type itself, with Q4_K_M (Q4_K) = Q4_K except the FFN
  (``ffn_gate``, ``ffn_up``, ``ffn_down``) of the first and the last layer, which get Q6_K;
- a matrix whose rows are not a multiple of the chosen type's block keeps its own type
  (diffuse-cpp has no fallback types). Float targets (F32, F16, BF16) are "pure" as above.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from llmnb.gguf.constants import GGML_BLOCK_SIZES, UINT32, GGMLType, type_name
from llmnb.gguf.reader import GGUFFile, MetadataField, TensorInfo, open_gguf
from llmnb.gguf.writer import TensorToWrite, write_gguf
from llmnb.output import check_output
from llmnb.quant.formats import QuantError, dequantize, quantize

T = GGMLType

# TYPE -> (base ggml type, llama.cpp LLAMA_FTYPE stored in general.file_type)
FILE_TYPES: dict[str, tuple[int, int]] = {
    "F32": (T.F32, 0), "F16": (T.F16, 1), "BF16": (T.BF16, 32),
    "Q4_0": (T.Q4_0, 2), "Q4_1": (T.Q4_1, 3), "Q8_0": (T.Q8_0, 7),
    "Q5_0": (T.Q5_0, 8), "Q5_1": (T.Q5_1, 9),
    "Q4_K": (T.Q4_K, 14), "Q5_K": (T.Q5_K, 16), "Q6_K": (T.Q6_K, 18),
    "Q4_K_M": (T.Q4_K, 15), "Q5_K_M": (T.Q5_K, 17),
}
FLOAT_TYPES = (T.F32, T.F16, T.BF16)
# llama.cpp's fallback when a row is not a multiple of a k-quant's 256-element block
FALLBACK = {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0}

Progress = Callable[[int, int], None]   # (tensors done, tensors in all)
MIXTURES = ("llama.cpp", "diffuse")


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's rule for the layers that get more bits in the _M mixtures."""
    return (i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8
            or (i_layer - n_layers // 8) % 3 == 2)


def allows_quantization(info: TensorInfo) -> bool:
    name = info.name
    return (len(info.shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name
            and name not in ("position_embd.weight", "token_types.weight"))


def fits(ggml_type: int, row: int) -> bool:
    return row % GGML_BLOCK_SIZES[ggml_type][0] == 0


def with_fallback(ggml_type: int, row: int) -> int:
    """The type itself if `row` is a multiple of its block, else llama.cpp's fallback."""
    if fits(ggml_type, row):
        return ggml_type
    fallback = FALLBACK.get(ggml_type, ggml_type)
    return fallback if fits(fallback, row) else T.F16


def plan_types(tensors: list[TensorInfo], file_type: str) -> dict[str, int]:
    """Target ggml type of every tensor (its own type for tensors that are copied)."""
    if file_type not in FILE_TYPES:
        raise QuantError(f"unknown quantization type {file_type!r}: expected one of "
                         f"{', '.join(FILE_TYPES)}")
    base = FILE_TYPES[file_type][0]
    mixture = file_type.endswith("_M")
    bump = T.Q6_K
    names = [t.name for t in tensors]
    tied = "output.weight" not in names
    n_v = sum("attn_v.weight" in n for n in names)
    n_down = sum("ffn_down" in n and allows_quantization(t) for n, t in zip(names, tensors))
    i_v = i_down = 0
    plan: dict[str, int] = {}
    for info in tensors:
        if not allows_quantization(info):
            plan[info.name] = info.ggml_type
            continue
        row = info.shape[-1]
        new = base
        if base not in FLOAT_TYPES:
            if info.name == "output.weight" or (tied and info.name == "token_embd.weight"):
                if not fits(base, row):
                    new = T.Q8_0
                elif base != T.Q8_0:
                    new = T.Q6_K
            elif "attn_v.weight" in info.name:
                if mixture and use_more_bits(i_v, n_v):
                    new = bump
                i_v += 1
            elif "ffn_down" in info.name:
                if mixture and use_more_bits(i_down, n_down):
                    new = bump
                i_down += 1
            elif "attn_qkv.weight" in info.name and mixture:
                new = T.Q5_K if base == T.Q4_K else T.Q6_K
            new = with_fallback(new, row)
        plan[info.name] = new
    return plan


def _layer(name: str) -> int:
    """``blk.7.ffn_up.weight`` -> 7; -1 for tensors outside the blocks."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() else -1


def plan_diffuse_types(tensors: list[TensorInfo], file_type: str) -> dict[str, int]:
    """Target types under diffuse-cpp's mixture (module docstring)."""
    if file_type not in FILE_TYPES:
        raise QuantError(f"unknown quantization type {file_type!r}: expected one of "
                         f"{', '.join(FILE_TYPES)}")
    base = FILE_TYPES[file_type][0]
    if base in FLOAT_TYPES:
        return plan_types(tensors, file_type)
    last = max((_layer(t.name) for t in tensors), default=-1)
    plan: dict[str, int] = {}
    for info in tensors:
        if not allows_quantization(info):
            plan[info.name] = T.F32 if info.ggml_type in (T.F16, T.BF16) else info.ggml_type
            continue
        if info.name == "token_embd.weight":
            new = T.F16
        elif info.name == "output.weight":
            new = T.Q6_K if base == T.Q4_K else T.Q8_0
        elif base == T.Q4_K and "ffn_" in info.name and _layer(info.name) in (0, last):
            new = T.Q6_K
        else:
            new = base
        plan[info.name] = new if fits(new, info.shape[-1]) else info.ggml_type
    return plan


def convert_tensor(f: GGUFFile, info: TensorInfo, new_type: int) -> TensorToWrite:
    raw = f.raw(info.name)
    if new_type == info.ggml_type:                 # copy: same bytes, same type
        if new_type == T.F32:
            return TensorToWrite(info.name, raw.view(np.float32), new_type, info.shape)
        if new_type == T.F16:
            return TensorToWrite(info.name, raw.view(np.float16), new_type, info.shape)
        return TensorToWrite(info.name, raw, new_type, info.shape)
    x = dequantize(raw, info.ggml_type, info.shape)  # float32, numpy shape
    if new_type == T.F32:
        return TensorToWrite(info.name, np.ascontiguousarray(x), new_type, info.shape)
    if new_type == T.F16:
        return TensorToWrite(info.name, x.astype(np.float16), new_type, info.shape)
    return TensorToWrite(info.name, quantize(x, new_type), new_type, info.shape)


def quantize_file(in_path: str | os.PathLike[str], out_path: str | os.PathLike[str],
                  file_type: str, progress: Progress | None = None,
                  mixture: str | None = None) -> dict[str, int]:
    """Read `in_path`, convert every tensor per the rules above, write `out_path` atomically.

    `mixture`: "llama.cpp" or "diffuse"; None = diffuse-cpp's for ``diffuse`` files, else
    llama.cpp's. Returns the chosen type of each tensor. On any error nothing is left at
    `out_path`."""
    key = file_type.upper()
    if mixture is not None and mixture not in MIXTURES:
        raise QuantError(f"mixture: expected one of {', '.join(MIXTURES)}, got {mixture!r}")
    check_output(out_path)                      # before any work: a device is never replaced
    with open_gguf(in_path) as f:
        tensors = list(f.tensors.values())
        if mixture is None:
            mixture = "diffuse" if f.architecture == "diffuse" else "llama.cpp"
        plan = (plan_diffuse_types if mixture == "diffuse" else plan_types)(tensors, key)
        converted: list[TensorToWrite] = []
        for i, info in enumerate(tensors):
            converted.append(convert_tensor(f, info, plan[info.name]))
            if progress is not None:
                progress(i + 1, len(tensors))
        fields = [fld for k, fld in f.fields.items() if k != "general.file_type"]
        fields.append(MetadataField("general.file_type", UINT32, FILE_TYPES[key][1]))
        write_gguf(out_path, f.architecture, fields, converted)
        del converted
    return plan


def describe_plan(plan: dict[str, int]) -> dict[str, int]:
    """How many tensors of each type a plan holds, e.g. {'Q4_K': 12, 'Q6_K': 12, 'F32': 121}."""
    counts: dict[str, int] = {}
    for t in plan.values():
        counts[type_name(t)] = counts.get(type_name(t), 0) + 1
    return counts
