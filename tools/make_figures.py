"""Draw the notebooks' figures (notebooks/figures/*.svg) from code, so they can be regenerated.

Each figure is one function below, named after the file it writes; the notebooks show them in
markdown (`![...](figures/NAME.svg)`). Byte counts come from the package (`llmnb.quant.FORMATS`,
`llmnb.gguf` constants), so a drawing cannot disagree with the code it explains.

    python tools/make_figures.py            # (re)write every figure
    python tools/make_figures.py --check    # draw into a temp folder; exit 1 if any differs
    python tools/make_figures.py --png DIR  # also write PNG previews into DIR

Needs matplotlib (the notebooks extra). The SVGs are byte-for-byte reproducible with the
pinned matplotlib (constraints.txt): no dates, fixed ids, text drawn as paths.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

import numpy as np  # noqa: E402

from llmnb.ar import Sampler  # noqa: E402
from llmnb.diffusion.schedulers import entropy_bound_pick  # noqa: E402
from llmnb.gguf.constants import GGMLType  # noqa: E402
from llmnb.quant import FORMATS, dequantize, quantize  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "notebooks" / "figures"

plt.rcParams.update({
    "svg.fonttype": "path", "svg.hashsalt": "llmnb", "font.family": "DejaVu Sans",
    "font.size": 9, "path.simplify": False,
})

# One palette for the whole course.
FILE, MODEL, AR, DIFF, PERF, BOTH = "#d9d9d9", "#c6dbef", "#fcbba1", "#c7e9c0", "#fdd0a2", "#dadaeb"
INK, MUTED = "#222222", "#777777"
FIELD = {"d": "#e6550d", "m": "#fd8d3c", "dmin": "#fd8d3c", "scales": "#9e9ac8", "qh": "#6baed6",
         "qs": "#3182bd", "ql": "#3182bd", "hmask": "#6baed6"}
ROLE = {"prompt": "#bdbdbd", "cached": "#9ecae1", "active": "#fd8d3c", "masked": "#ffffff",
        "new": "#e6550d", "kept": "#3182bd", "evicted": "#f0f0f0", "sink": "#756bb1",
        "recent": "#31a354"}


# ------------------------------------------------------------------------------------------------
# Drawing primitives: a canvas in figure units (1 unit = 0.25 inch), boxes, arrows
# ------------------------------------------------------------------------------------------------

UNIT = 0.25


def canvas(w: float, h: float, title: str, title_size: float = 11) -> tuple[Figure, Axes]:
    """A w x h canvas (lower-left origin) with `title` centred along its top."""
    fig = plt.figure(figsize=(w * UNIT, h * UNIT))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, w)
    ax.set_ylim(0, h)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.text(w / 2, h - 0.8, title, ha="center", va="center", fontsize=title_size, color=INK,
            weight="bold")
    return fig, ax


def box(ax: Axes, x: float, y: float, w: float, h: float, text: str = "", fc: str = "white",
        ec: str = INK, size: float = 9, color: str = INK, round_: bool = True, lw: float = 1.0,
        weight: str = "normal", ls: str = "-", align: str = "center") -> None:
    """A box with its lower-left corner at (x, y) and `text` centred in it."""
    style = "round,pad=0,rounding_size=0.35" if round_ else "square,pad=0"
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=style, fc=fc, ec=ec, lw=lw, ls=ls))
    if text:
        tx = x + w / 2 if align == "center" else x + 0.4
        ax.text(tx, y + h / 2, text, ha=align, va="center", fontsize=size, color=color,
                weight=weight, linespacing=1.25)


def arrow(ax: Axes, a: tuple[float, float], b: tuple[float, float], color: str = INK,
          lw: float = 1.2, rad: float = 0.0, style: str = "-|>", ls: str = "-") -> None:
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=9, color=color, lw=lw,
                                 connectionstyle=f"arc3,rad={rad}", shrinkA=0, shrinkB=0, ls=ls))


def label(ax: Axes, x: float, y: float, text: str, size: float = 9, color: str = INK,
          ha: str = "center", va: str = "center", weight: str = "normal",
          style: str = "normal") -> None:
    ax.text(x, y, text, ha=ha, va=va, fontsize=size, color=color, weight=weight, style=style,
            linespacing=1.25)


def split_braces(ax: Axes, x0: float, y: float, pitch: float, gap: float, first: int, rest: int,
                 first_text: str, rest_text: str) -> None:
    """Brackets under a row of cells `pitch` apart: the first `first` cells, then `rest` more."""
    brace(ax, x0, x0 + first * pitch - gap, y, first_text, size=7.5)
    brace(ax, x0 + first * pitch, x0 + (first + rest) * pitch - gap, y, rest_text, size=7.5)


def legend(ax: Axes, x: float, y: float, items: Sequence[tuple[str, str]], step: float) -> None:
    """Colour swatches in a row from (x, y), `step` apart: (colour, text) each."""
    for k, (fc, text) in enumerate(items):
        ax.add_patch(Rectangle((x + k * step, y), 1.0, 1.0, fc=fc, ec="#999999"))
        label(ax, x + 1.4 + k * step, y + 0.5, text, size=8, ha="left")


def brace(ax: Axes, x0: float, x1: float, y: float, text: str, up: bool = False,
          size: float = 8, color: str = INK) -> None:
    """A bracket under (or over) x0..x1 at height y, with `text` beyond it."""
    d = 0.35 if up else -0.35
    ax.plot([x0, x0, x1, x1], [y, y + d, y + d, y], color=color, lw=0.8)
    label(ax, (x0 + x1) / 2, y + 2.4 * d, text, size=size, color=color,
          va="bottom" if up else "top")


# ------------------------------------------------------------------------------------------------
# 00 · the map of the course
# ------------------------------------------------------------------------------------------------

def map_of_notebooks() -> Figure:
    fig, ax = canvas(45, 26, "The course: two engines re-created from their descriptions")
    w, h = 7.6, 2.4
    xs = [2.0, 10.8, 19.6, 28.4, 37.2]                          # five columns

    def nb(col: float, y: float, number: str, name: str, fc: str, weight: str = "normal",
           width: float = w) -> None:
        box(ax, col, y, width, h, f"{number}  {name}", fc=fc, weight=weight, size=7.6)

    def chain(y: float, cols: Sequence[float]) -> None:
        for a, b in zip(cols, cols[1:]):
            arrow(ax, (a + w, y + h / 2), (b, y + h / 2))

    label(ax, 2.0, 22.6, "shared: the file, the weights, the model", size=8, color=MUTED,
          ha="left")
    for col, (n, name) in zip(xs, [("01", "gguf"), ("02", "quantization"), ("03", "tokenizer"),
                                   ("04", "transformer")]):
        nb(col, 19.6, n, name, FILE if n < "03" else MODEL)
    chain(19.6, xs[:4])
    # 04's forward feeds both engines: a trunk down the left margin
    tx, ty = 0.8, 18.2
    ax.plot([xs[3] + w / 2, xs[3] + w / 2, tx, tx], [19.6, ty, ty, 3.2], color=INK, lw=1.2)
    arrow(ax, (tx, 14.2), (xs[0], 14.2))
    arrow(ax, (tx, 3.2), (xs[0], 3.2))
    label(ax, xs[3] + w / 2 + 0.4, 18.6, "causal for AR, bidirectional for diffusion", size=7,
          color=MUTED, ha="left")
    label(ax, 2.0, 16.6, "the autoregressive CPU engine (llm-cpu)", size=8, color=MUTED, ha="left")
    for col, (n, name) in zip(xs, [("05", "generation"), ("06", "sampling"), ("07", "perplexity"),
                                   ("10", "superspec"), ("11", "initial_key_cache")]):
        nb(col, 13.0, n, name, AR)
    chain(13.0, xs)
    label(ax, xs[0] + w / 2 + 0.6, 10.9, "how fast, and why", size=8, color=MUTED,
          ha="left")                                              # right of the 05 -> 08 arrow
    nb(xs[0], 7.4, "08", "roofline", PERF)
    nb(xs[1], 7.4, "09", "quantized_matvec", PERF)
    chain(7.4, xs[:2])
    arrow(ax, (xs[0] + w / 2, 13.0), (xs[0] + w / 2, 9.8))        # 05 -> 08
    box(ax, xs[3] + 1.2, 7.4, w + 7.6, h, "17  regime_inversion\nAR vs diffusion: the paper's "
        "tables on this machine", fc=BOTH, size=7.6)
    arrow(ax, (xs[1] + w, 8.6), (xs[3] + 1.2, 8.6))              # 09 -> 17
    arrow(ax, (xs[4] + w / 2, 13.0), (xs[4] + w / 2, 9.8))        # 11 -> 17
    arrow(ax, (xs[4] + w / 2, 4.4), (xs[4] + w / 2, 7.4))         # 16 -> 17
    label(ax, 2.0, 5.6, "the diffusion-LM CPU engine (diffuse-cpp)", size=8, color=MUTED, ha="left")
    for col, (n, name) in zip(xs, [("12", "masked_diffusion"), ("13", "dream"),
                                   ("14", "entropy_exit"), ("15", "interstep_cache"),
                                   ("16", "fast_sampling")]):
        nb(col, 2.0, n, name, DIFF)
    chain(2.0, xs)
    label(ax, 44.8, 0.6, "00_tour: this map, the machine, the models, the symbols", size=7.5,
          color=MUTED, ha="right")
    return fig


# ------------------------------------------------------------------------------------------------
# 01 · the GGUF file
# ------------------------------------------------------------------------------------------------

def gguf_layout() -> Figure:
    fig, ax = canvas(44, 14.6, "A GGUF file, start to end (all little-endian)")
    parts = [("header", 6, FILE, '"GGUF"  u32 version\nu64 n_tensors  u64 n_kv'),
             ("metadata: n_kv key/value pairs", 12, MODEL, "key | u32 type | value\n"
              "architecture, hyper-parameters,\ntokenizer vocabulary, merges, template"),
             ("tensor infos: n_tensors entries", 11, BOTH, "name | u32 n_dims | ne[n_dims]\n"
              "u32 ggml_type | u64 offset"),
             ("pad", 2, "white", ""),
             ("tensor data", 11, PERF, "tensors at their offsets,\neach aligned")]
    x = 1.0
    spans = []
    for name, w, fc, text in parts:
        box(ax, x, 8.6, w, 3.2, text, fc=fc, round_=False, size=7.5)
        label(ax, x + w / 2, 12.4, name, size=8, weight="bold")
        spans.append((x, x + w))
        x += w
    # the padding
    ax.add_patch(Rectangle((spans[3][0], 8.6), 2, 3.2, fc="white", ec=INK, hatch="////", lw=1))
    label(ax, spans[3][0] + 1, 7.6, "zeros up to\ngeneral.alignment\n(default 32)", size=7,
          color=MUTED, va="top")
    # one key/value pair, zoomed
    kx = 1.0
    for text, w, fc in [("u64 len = 20", 5.0, "white"), ('"general.architecture"', 9.0, "white"),
                        ("u32 type = 8\n(STRING)", 5.0, "white"), ("u64 len = 5", 5.0, "white"),
                        ('"llama"', 3.6, "white")]:
        box(ax, kx, 3.0, w, 2.4, text, fc=fc, round_=False, size=7.5)
        kx += w
    arrow(ax, (spans[1][0] + 6, 8.6), (spans[1][0] + 6, 5.4), color=MUTED, ls="--")
    label(ax, 1, 2.2, "one metadata pair: a key, its value type, its value; a string is a u64 "
          "length and UTF-8 bytes (no terminator)", size=7.5, ha="left", color=MUTED, va="top")
    # the data region: offsets are relative to its start
    dx0, dx1 = spans[4]
    sub = [(3.4, "token_embd"), (0.8, None), (3.2, "blk.0..."), (0.6, None), (3.0, "...")]
    sx = dx0
    for w, name in sub:
        if name is None:
            ax.add_patch(Rectangle((sx, 8.6), w, 0.9, fc="white", ec=INK, hatch="////", lw=0.6))
        else:
            ax.add_patch(Rectangle((sx, 8.6), w, 0.9, fc="#f16913", ec=INK, lw=0.6))
            label(ax, sx + w / 2, 9.05, name, size=6, color="white")
        sx += w
    brace(ax, dx0, dx1, 8.4, "offset = bytes from the start of the data,\n"
          "a multiple of the alignment", size=7)
    label(ax, 1, 0.5, "a tensor's shape is stored innermost first (ggml's ne); numpy order is "
          "the reverse", size=7.5, color=MUTED, ha="left")
    return fig


# ------------------------------------------------------------------------------------------------
# 02 · a block's bytes, per format
# ------------------------------------------------------------------------------------------------

# ggml-common.h, field by field (name, bytes); the registry's type_size checks each sum.
BLOCKS: dict[str, list[tuple[str, int]]] = {
    "Q8_0": [("d", 2), ("qs  32 x int8", 32)],
    "Q4_0": [("d", 2), ("qs  32 x 4 bit", 16)],
    "Q4_1": [("d", 2), ("m", 2), ("qs  32 x 4 bit", 16)],
    "Q5_0": [("d", 2), ("qh", 4), ("qs  32 x 4 low bits", 16)],
    "Q5_1": [("d", 2), ("m", 2), ("qh", 4), ("qs  32 x 4 low bits", 16)],
    "Q2_K": [("scales  16 x (4+4 bit)", 16), ("qs  256 x 2 bit", 64), ("d", 2), ("dmin", 2)],
    "Q3_K": [("hmask  256 x 1 bit", 32), ("qs  256 x 2 low bits", 64), ("scales 16 x 6 bit", 12),
             ("d", 2)],
    "Q4_K": [("d", 2), ("dmin", 2), ("scales  8+8 x 6 bit", 12), ("qs  256 x 4 bit", 128)],
    "Q5_K": [("d", 2), ("dmin", 2), ("scales  8+8 x 6 bit", 12), ("qh  256 x 1 bit", 32),
             ("qs  256 x 4 low bits", 128)],
    "Q6_K": [("ql  256 x 4 low bits", 128), ("qh  256 x 2 high bits", 64),
             ("scales  16 x int8", 16), ("d", 2)],
}


BY_NAME = {f.name: f for f in FORMATS.values()}


def block_layouts() -> Figure:
    fig, ax = canvas(46, 27, "One block of each format: the bytes, in file order")
    legacy = [n for n in BLOCKS if not n.endswith("_K")]
    kquant = [n for n in BLOCKS if n.endswith("_K")]

    def row(name: str, y: float, scale: float) -> None:
        fmt = BY_NAME[name]
        fields = BLOCKS[name]
        total = sum(b for _, b in fields)
        assert total == fmt.type_size, (name, total, fmt.type_size)
        label(ax, 0.6, y + 0.7, name, size=9, weight="bold", ha="left")
        x = 4.2
        for field, nbytes in fields:
            w = nbytes * scale
            fc = FIELD[field.split()[0]]
            ax.add_patch(Rectangle((x, y), w, 1.4, fc=fc, ec="white", lw=1.2))
            full = f"{field}: {nbytes} B"
            text = (full if w > 0.5 * len(full) else field if w > 0.5 * len(field)
                    else field.split()[0])
            if w >= 1.4:
                label(ax, x + w / 2, y + 0.7, text, size=6.8, color="white")
            x += w
        note = ("; qs byte j: element j in its low 4 bits, j + 16 in its high 4"
                if name == "Q4_0" else "")
        label(ax, x + 0.4, y + 0.7, f"{total} B / {fmt.block_size} weights = "
              f"{fmt.bits_per_weight:.4g} bits per weight{note}", size=7.5, ha="left", color=MUTED)

    label(ax, 0.6, 24.4,
          "blocks of 32 weights (bytes drawn 4x wider than for the super-blocks below)",
          size=8, color=MUTED, ha="left")
    for i, n in enumerate(legacy):
        row(n, 22.2 - i * 1.9, 0.6)
    label(ax, 0.6, 12.3, "super-blocks of 256 weights (k-quants: sub-blocks with their own "
          "scale, scales quantized too)", size=8, color=MUTED, ha="left")
    for i, n in enumerate(kquant):
        row(n, 10.1 - i * 1.9, 0.15)
    keys = [("d", "scale (f16)"), ("m", "min (f16)"), ("scales", "sub-block scales"),
            ("qh", "high bits"), ("qs", "low bits / quants")]
    for i, (k, text) in enumerate(keys):
        ax.add_patch(Rectangle((4.2 + i * 8.2, 0.4), 0.9, 0.9, fc=FIELD[k], ec="none"))
        label(ax, 5.4 + i * 8.2, 0.85, text, size=7.5, ha="left")
    return fig


# ------------------------------------------------------------------------------------------------
# 03 · BPE merges, drawn as a tree
# ------------------------------------------------------------------------------------------------

TOY_CORPUS = {"low": 5, "lower": 2, "newest": 6, "widest": 3}      # notebook 03's corpus


def _learn_merges(corpus: dict[str, int], n: int) -> list[tuple[str, str]]:
    words = {w: list(w) for w in corpus}
    merges = []
    for _ in range(n):
        pairs: dict[tuple[str, str], int] = {}
        for w, s in words.items():
            for a, b in zip(s, s[1:]):
                pairs[a, b] = pairs.get((a, b), 0) + corpus[w]
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        for w, s in words.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            words[w] = out
    return merges


def bpe_merges() -> Figure:
    merges = _learn_merges(TOY_CORPUS, 6)
    word = "lowest"
    fig, ax = canvas(40, 17,
                     f"Encoding \"{word}\" with the toy corpus's merges, in the order learned")
    pieces = [(c, i, i + 1) for i, c in enumerate(word)]          # (text, first, end) columns
    col = 3.2
    y = 13.0
    x0 = 9.0

    def draw(level: list[tuple[str, int, int]], y: float, new: set[int]) -> dict[int, float]:
        centres = {}
        for j, (text, a, b) in enumerate(level):
            x = x0 + a * col + 0.15
            w = (b - a) * col - 0.3
            box(ax, x, y, w, 1.5, text, fc=AR if j in new else "white", size=9, round_=False)
            centres[a] = x + w / 2
        return centres

    centres = draw(pieces, y, set())
    label(ax, 0.5, y + 0.75, "characters", size=8, ha="left", color=MUTED)
    skipped = []
    for rank, pair in enumerate(merges):
        out, new, i = [], set(), 0
        while i < len(pieces):
            if i + 1 < len(pieces) and (pieces[i][0], pieces[i + 1][0]) == pair:
                out.append((pieces[i][0] + pieces[i + 1][0], pieces[i][1], pieces[i + 1][2]))
                new.add(len(out) - 1)
                i += 2
            else:
                out.append(pieces[i])
                i += 1
        if not new:
            skipped.append(f"'{pair[0]}' + '{pair[1]}'")
            continue
        y -= 2.6
        below = draw(out, y, new)
        for j in new:
            _, a, b = out[j]
            for _, pa, _ in pieces:
                if a <= pa < b:
                    arrow(ax, (centres[pa], y + 2.6), (below[a], y + 1.5), color=MUTED, lw=0.8)
        label(ax, 0.5, y + 0.75, f"merge {rank + 1}:\n'{pair[0]}' + '{pair[1]}'", size=7.5,
              ha="left", color=MUTED)
        pieces = out
        centres = {p[1]: below.get(p[1], centres[p[1]]) for p in pieces}
    label(ax, 30, 4.0, "merges that match no\nadjacent pair are skipped\n"
          f"(here: {', '.join(skipped)})", size=7.5, ha="left", color=MUTED)
    label(ax, 20, 0.8, f"result: {[p[0] for p in pieces]}, two tokens of the vocabulary",
          size=8.5)
    return fig


# ------------------------------------------------------------------------------------------------
# 04 · one transformer block, with shapes
# ------------------------------------------------------------------------------------------------

def transformer_block() -> Figure:
    steps = [("ids", "token ids", "(T,)  integers", FILE),
             ("emb", "embed: one row of the table per id", "(T, d)", "white"),
             ("n1", "RMSNorm", "(T, d)", MODEL),
             ("qkv", "x @ Wqkv  (+ bias for Qwen2)", "(T, (n_head + 2 n_kv) d_head)", "white"),
             ("rope", "split q, k, v; RoPE on q and k",
              "q (n_head, T, d_head),  k, v (n_kv, T, d_head)", "white"),
             ("att", "softmax(q k^T / sqrt(d_head) + mask) v",
              "weights (n_head, T, S) -> (T, n_head d_head)", AR),
             ("wo", "@ Wo, add to the residual", "(T, d)", "white"),
             ("n2", "RMSNorm", "(T, d)", MODEL),
             ("gu", "x @ Wgate_up", "(T, 2 n_ff)", "white"),
             ("sw", "silu(gate) * up, @ Wdown, add", "(T, n_ff) -> (T, d)", DIFF),
             ("fn", "final RMSNorm", "(T, d)", MODEL),
             ("head", "@ W_head (often the embedding, tied)", "(T, V)  logits", "white")]
    pitch, h, gap_layer = 2.5, 1.6, 1.4
    height = len(steps) * pitch + 2 * gap_layer + 5.0
    fig, ax = canvas(42, height, "The forward pass, with the shape of every array")
    label(ax, 21, height - 2.0, "T tokens in the pass, S keys they attend to (S = T without a "
          "cache), d model width, V vocabulary", size=7.5, color=MUTED)
    cx, w = 12.0, 14.0
    x = cx - w / 2
    ys: dict[str, float] = {}
    y = height - 3.4 - h
    for key, text, shape, fc in steps:
        if key in ("n1", "fn"):
            y -= gap_layer
        box(ax, x, y, w, h, text, fc=fc, size=8.2)
        label(ax, x + w + 1.0, y + h / 2, shape, size=7.8, ha="left", color="#08519c")
        ys[key] = y
        y -= pitch
    order = [k for k, *_ in steps]
    for a, b in zip(order, order[1:]):
        arrow(ax, (cx, ys[a]), (cx, ys[b] + h))
    top, bottom = ys["n1"] + h + 0.9, ys["sw"] - 0.7
    ax.add_patch(FancyBboxPatch((x - 2.2, bottom), w + 2.9, top - bottom,
                                boxstyle="round,pad=0,rounding_size=0.6", fc="#f7fbff",
                                ec="#6baed6", lw=1.2, ls="--", zorder=0))
    label(ax, x - 2.2, top + 0.35, "one layer, repeated n_layer times", size=7.5,
          color="#2171b5", ha="left")
    # the residual stream: h goes around each half and is added back
    for src, dst in (("n1", "wo"), ("n2", "sw")):
        y0, y1 = ys[src] + h + 0.45, ys[dst] + h / 2
        ax.plot([cx, x - 1.0, x - 1.0], [y0, y0, y1], color=INK, lw=1.0)
        arrow(ax, (x - 1.0, y1), (x, y1))
        label(ax, x - 1.3, (y0 + y1) / 2, "residual", size=7, color=MUTED, ha="right",
              style="italic")
    # the mask, drawn small beside the attention
    n, m = 6, 0.5
    mx, my = 30.0, ys["n2"] - 0.6
    for i in range(n):
        for j in range(n):
            ax.add_patch(Rectangle((mx + j * m, my + (n - 1 - i) * m), m, m,
                                   fc="#fb6a4a" if j <= i else "white", ec="#cccccc", lw=0.4))
    label(ax, mx + n * m / 2, my + n * m + 0.5, "causal mask", size=7, color=MUTED)
    label(ax, mx + n * m + 0.5, my + n * m / 2, "row = query, column = key:\n"
          "query t sees keys 0..t;\ndiffusion models see all", size=6.5, color=MUTED, ha="left")
    label(ax, 21, 0.8, "SmolLM2-135M: d = 576, n_head = 9, n_kv = 3, d_head = 64, n_ff = 1536, "
          "n_layer = 30, V = 49,152", size=7.5, color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 05 · the KV cache, prefill and decode
# ------------------------------------------------------------------------------------------------

def kv_cache() -> Figure:
    fig, ax = canvas(36, 20, "The KV cache grows by one position per decoded token")
    P, N, c = 6, 4, 1.5                                           # prompt, decode steps, cell
    x0, y0 = 6.5, 2.5
    rows = ["prefill"] + [f"decode {i + 1}" for i in range(N)]
    for r, name in enumerate(rows):
        y = y0 + (len(rows) - 1 - r) * 2.6
        label(ax, x0 - 0.6, y + c / 2, name, size=8, ha="right")
        length = P + r
        for j in range(P + N):
            fc = (ROLE["cached"] if j < length - (P if r == 0 else 1) else
                  ROLE["new"] if j < length else "white")
            ax.add_patch(Rectangle((x0 + j * (c + 0.15), y), c, c, fc=fc, ec="#999999", lw=0.6))
        computed = P if r == 0 else 1
        label(ax, x0 + (P + N) * (c + 0.15) + 0.6, y + c / 2,
              f"computes {computed} row{'s' if computed > 1 else ''}, reads {length} keys",
              size=7.5, ha="left", color=MUTED)
    split_braces(ax, x0, y0 - 0.2, c + 0.15, 0.15, P, N, "prompt: P positions",
                 "generated tokens")
    legend(ax, 2, 16.6, [(ROLE["cached"], "K, V read from the cache"),
                         (ROLE["new"], "K, V computed now and appended")], 14)
    label(ax, 2, 15.6, "one column = one position: a key and a value vector per layer and K/V "
          "head, (n_layer, n_kv, capacity, d_head) each", size=7.3, ha="left", color=MUTED)
    return fig


def prefill_decode() -> Figure:
    fig, ax = canvas(42, 16, "Prefill multiplies each weight by many rows; decode, by one")
    d, out, top = 5.0, 6.0, 11.4

    def product(x: float, rows: float, who: str, name: str, note: str) -> None:
        ax.add_patch(Rectangle((x, top - rows), d, rows, fc=AR, ec=INK))
        label(ax, x + d / 2, top - rows / 2 if rows > 1 else top + 0.5,
              f"x ({who}, d)", size=7.5)
        label(ax, x + d + 0.6, top - d / 2, "@", size=11)
        ax.add_patch(Rectangle((x + d + 1.2, top - d), out, d, fc=FILE, ec=INK))
        label(ax, x + d + 1.2 + out / 2, top - d / 2, "W (d, out)\nevery weight\nread once",
              size=7.5)
        label(ax, x + d + out + 1.8, top - d / 2, "=", size=11)
        ax.add_patch(Rectangle((x + d + out + 2.4, top - rows), out, rows, fc=DIFF, ec=INK))
        label(ax, x + d + out + 2.4 + out / 2, top - rows / 2 if rows > 1 else top + 0.5,
              f"({who}, out)", size=7.5)
        label(ax, x + (2 * d + out + 2.4) / 2 + 1.5, top + 1.6, name, size=9.5, weight="bold")
        label(ax, x + (2 * d + out + 2.4) / 2 + 1.5, top - d - 1.4, note, size=7.8,
              color=MUTED, va="top")

    product(1.0, 3.5, "P", "prefill: the P prompt tokens at once",
            "matrix-matrix: 2P FLOPs per weight read;\nthe roofline predicts compute-bound")
    product(22.0, 0.45, "1", "decode: one token per pass",
            "matrix-vector: 2 FLOPs per weight read;\nthe roofline predicts memory-bound")
    label(ax, 21, 0.8, "arithmetic intensity = FLOPs / bytes read = 2P / b for prefill, 2 / b "
          "for decode (b = bytes per weight)", size=7.8)
    return fig


# ------------------------------------------------------------------------------------------------
# 06 · the sampler chain
# ------------------------------------------------------------------------------------------------

def sampler_chain() -> Figure:
    fig, ax = canvas(46, 14, "From logits to a token: llmnb's (and llama.cpp's) order")
    probs = np.array([0.30, 0.22, 0.14, 0.10, 0.07, 0.05, 0.04, 0.03, 0.03, 0.02])
    logits = np.log(probs).astype(np.float32)
    k, top_p, min_p, temp = 6, 0.9, 0.25, 0.6
    # each stage's distribution, computed by the package's sampler
    stages = [("softmax", "p over the whole\nvocabulary", Sampler()),
              (f"top-k = {k}", "the k most likely", Sampler(top_k=k)),
              (f"top-p = {top_p}", "smallest set whose\nmass reaches p",
               Sampler(top_k=k, top_p=top_p)),
              (f"min-p = {min_p}", "p >= min_p x p_max",
               Sampler(top_k=k, top_p=top_p, min_p=min_p)),
              (f"temperature {temp}", "softmax(z / temp)\nover the survivors",
               Sampler(temperature=temp, top_k=k, top_p=top_p, min_p=min_p)),
              ("draw", "a seeded generator", Sampler(temperature=temp, top_k=k, top_p=top_p,
                                                     min_p=min_p, seed=0))]
    drawn = stages[-1][2].sample(logits)
    x = 1.0
    for i, (name, note, sampler) in enumerate(stages):
        q = sampler.probs(logits)
        box(ax, x, 4.4, 6.4, 6.6, "", fc="white", ec="#bbbbbb")
        label(ax, x + 3.2, 10.2, name, size=8.5, weight="bold")
        label(ax, x + 3.2, 3.4, note, size=7, color=MUTED, va="top")
        for j in range(len(probs)):
            kept = q[j] > 0
            h = 10.0 * (q[j] if kept else probs[j])
            fc = "#e6550d" if name == "draw" and j == drawn else "#3182bd" if kept else "#e0e0e0"
            ax.add_patch(Rectangle((x + 0.5 + j * 0.54, 5.0), 0.42, h, fc=fc, ec="none"))
        label(ax, x + 3.2, 4.7, f"{int((q > 0).sum())} can be drawn" if name != "draw" else
              f"token {drawn} drawn", size=6.5, color=MUTED)
        if i < len(stages) - 1:
            arrow(ax, (x + 6.4, 7.6), (x + 7.4, 7.6))
        x += 7.4
    label(ax, 23, 0.6, "the filters look at the temperature-1 distribution, so temperature "
          "changes the shares of the survivors, never which tokens survive", size=7.5)
    return fig


# ------------------------------------------------------------------------------------------------
# 07 · perplexity: the next token's probability, windows and the half rule, re-quantizing
# ------------------------------------------------------------------------------------------------

def next_token_nll() -> Figure:
    fig, ax = canvas(46, 18, "Perplexity: the probability the model gave each next token "
                             "of the text")
    words = ["It", "is", "a", "truth", "universally", "acknowledged"]
    n, c, gap, x0 = len(words), 5.0, 0.6, 5.4
    ty, dy = 13.4, 4.6
    label(ax, x0 - 0.5, ty + 0.8, "the text", size=8, ha="right")
    label(ax, x0 - 0.5, dy + 2.4, "logits", size=8, ha="right")
    label(ax, x0 + c / 2, dy + 2.6, "nothing before x0\npredicts it", size=7, color=MUTED)
    rng = np.random.default_rng(7)                  # bars: a few of the vocabulary's tokens
    for t in range(n + 1):
        bx = x0 + t * (c + gap)
        if t < n:
            box(ax, bx, ty, c, 1.6, f"x{t} = {words[t]}", fc=ROLE["prompt"], round_=False, size=7.2)
        if t == 0:
            continue
        row = t - 1                                 # row t-1 predicts the token above it, x[t]
        box(ax, bx, dy, c, 5.2, "", fc="white", ec="#bbbbbb")
        label(ax, bx + c / 2, dy - 0.6, f"row {row}: p( · | x0..x{row})" if row else
              "row 0: p( · | x0)", size=6.9)
        probs = rng.dirichlet(np.full(6, 0.6))
        true = int(rng.integers(0, 6))
        for k, pk in enumerate(probs):
            hot = k == true and t < n
            ax.add_patch(Rectangle((bx + 0.45 + k * 0.72, dy + 0.5), 0.52, 0.3 + 3.0 * pk,
                                   fc="#e6550d" if hot else "#9ecae1", ec="none"))
        if t < n:
            bar_x = bx + 0.71 + true * 0.72
            arrow(ax, (bar_x, dy + 0.95 + 3.0 * probs[true]), (bar_x, ty), color="#e6550d", lw=0.9)
            label(ax, bar_x + 0.3, (dy + 5.2 + ty) / 2, f"-log p(x{t})", size=7.5, color="#e6550d",
                  ha="left")
        else:
            label(ax, bx + c / 2, (dy + 5.2 + ty) / 2, "predicts past the\ntext: not scored",
                  size=7, color=MUTED)
    label(ax, 23, 1.9, "NLL = the mean of -log p(x[t+1] | x0..x[t]) over the scored tokens, in nats"
          " per token;   perplexity = exp(NLL)", size=8.2)
    label(ax, 23, 0.7, "orange: the token the text really has next; a perplexity of 20 is as "
          "unsure as a uniform pick among 20 tokens", size=7.5, color=MUTED)
    return fig


def windows_half_rule() -> Figure:
    fig, ax = canvas(46, 15.4, "A long text in windows of ctx tokens, one forward pass each; "
                     "which tokens each rule scores", title_size=10.5)
    ctx, n_win, c, gap, wgap, x0 = 8, 3, 1.25, 0.1, 1.2, 7.6
    scored, seen, first = "#31a354", "#d9d9d9", "white"
    for rule, y, note in [("half", 8.8, "tokens ctx/2+1 .. ctx-1: ctx/2 - 1 per window, each "
                           "predicted from at least ctx/2 tokens (llama-perplexity)"),
                          ("full", 3.6, "tokens 1 .. ctx-1: the first ones, predicted from "
                           "almost nothing, pull the average up")]:
        label(ax, 0.8, y + c / 2, f'rule="{rule}"', size=8.5, ha="left", weight="bold")
        for w in range(n_win):
            wx = x0 + w * (ctx * (c + gap) + wgap)
            for j in range(ctx):
                on = j >= ctx // 2 + 1 if rule == "half" else j >= 1
                ax.add_patch(Rectangle((wx + j * (c + gap), y), c, c,
                                       fc=scored if on else first if j == 0 else seen,
                                       ec="#999999", lw=0.6))
            if rule == "half":
                brace(ax, wx, wx + ctx * (c + gap) - gap, y + c + 0.25, f"window {w + 1}", up=True,
                      size=7.5)
            if w == 0:
                for j in range(ctx):
                    label(ax, wx + j * (c + gap) + c / 2, y - 0.35, str(j), size=6, color=MUTED)
        label(ax, x0, y - 0.9, note, size=7.5, ha="left", color=MUTED, va="top")
    legend(ax, 1.0, 0.6, [(scored, "scored: its -log p is in the average"),
                          (seen, "predicted, not scored"),
                          (first, "a window's first token: nothing before it")], 14.5)
    label(ax, 45.2, 12.6, f"ctx = {ctx} here; each window starts with no context", size=7.5,
          ha="right", color=MUTED)
    return fig


def requantize() -> Figure:
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 0.02, 32).astype(np.float32)                   # one block of weights
    block41 = quantize(x, GGMLType.Q4_1)                               # d (f16), m (f16), 16 bytes
    q41 = dequantize(block41, GGMLType.Q4_1, (32,))                    # the file's values
    d41, m41 = (float(v) for v in block41[:4].view(np.float16))
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9), sharey=True)
    shown = np.arange(16)
    for ax, name in zip(axes, ("Q8_0", "Q4_0")):
        ggml = getattr(GGMLType, name)
        block = quantize(q41, ggml)
        again = dequantize(block, ggml, (32,))
        for level in m41 + d41 * np.arange(16):                        # Q4_1: m + d q, q = 0..15
            ax.axhline(level, color="#6baed6", lw=0.6, zorder=1)
        if name == "Q4_0":
            d40 = float(block[:2].view(np.float16)[0])
            for level in d40 * (np.arange(16) - 8):                    # Q4_0: d (q - 8)
                ax.axhline(level, color="#fdae6b", lw=0.8, ls="--", zorder=0)
        ax.vlines(shown, q41[shown], again[shown], color="#e6550d", lw=1.6, zorder=2)
        ax.scatter(shown, q41[shown], s=22, color="#3182bd", zorder=3,
                   label="the Q4_1 file's value, on Q4_1's 16 levels (blue lines)")
        ax.scatter(shown, again[shown], s=26, marker="x", color="#e6550d", zorder=4,
                   label="re-quantized")
        rms = float(np.sqrt(np.mean((again - q41) ** 2)))
        grid = ("its 255 levels too close to draw" if name == "Q8_0"
                else "its 16 levels dashed orange")
        ax.set_title(f"Q4_1 -> {name} ({grid}):\nextra error {rms / abs(d41):.2f} of a Q4_1 step "
                     "(rms over the block)", fontsize=8.5)
        ax.set_xlabel("weight (16 of the block's 32)")
        ax.set_xticks(shown[::3])
    axes[0].set_ylabel("value")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncols=2, fontsize=8, frameon=False)
    fig.suptitle("Re-quantizing a Q4_1 block rounds it a second time, onto another grid",
                 fontsize=10.5, weight="bold")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ------------------------------------------------------------------------------------------------
# 08 · the roofline, before any measurement
# ------------------------------------------------------------------------------------------------

PEAK, BANDWIDTH = 100.0, 20.0             # illustrative roofs: GFLOP/s and GB/s (08 measures them)


def roofline_axes(ax: Axes, points: Sequence[tuple[str, float, str, tuple[float, float]]]) -> None:
    """Both roofs on log axes, the ridge marked, and `points` (label, AI, colour, text offset in
    points) placed on the roof: a workload's best speed at its arithmetic intensity."""
    ai = np.logspace(-1, 3, 200)
    ax.loglog(ai, np.minimum(PEAK, ai * BANDWIDTH), color=INK, lw=1.6)
    ridge = PEAK / BANDWIDTH
    ax.axvline(ridge, color=MUTED, lw=0.8, ls=":")
    ax.annotate(f"ridge: AI = peak / bandwidth\n= {ridge:g} FLOP per byte", (ridge, 1.2),
                xytext=(6, 0), textcoords="offset points", fontsize=7.5, color=MUTED)
    ax.annotate("memory roof: AI x bandwidth", (0.25, 0.25 * BANDWIDTH), xytext=(0.12, 60),
                fontsize=7.5, color=INK, arrowprops={"arrowstyle": "-", "color": INK, "lw": 0.6})
    ax.text(60, PEAK * 1.12, "compute roof: peak FLOP/s", fontsize=7.5, color=INK, ha="center")
    for text, x, color, offset in points:
        y = min(PEAK, x * BANDWIDTH)
        ax.scatter([x], [y], s=40, color=color, zorder=3)
        ax.annotate(text, (x, y), xytext=offset, textcoords="offset points", fontsize=7.5,
                    color=color, arrowprops={"arrowstyle": "-", "color": color, "lw": 0.6})
    ax.fill_betweenx([0.5, 500], 0.1, ridge, color="#fdd0a2", alpha=0.25, lw=0)
    ax.fill_betweenx([0.5, 500], ridge, 1000, color="#c6dbef", alpha=0.3, lw=0)
    ax.text(0.16, 320, "memory-bound: waits for bytes", fontsize=7.5, color="#a63603")
    ax.text(ridge * 1.3, 320, "compute-bound: waits for arithmetic", fontsize=7.5, color="#08519c")
    ax.set_xlim(0.1, 1000)
    ax.set_ylim(0.5, 500)
    ax.set_xlabel("arithmetic intensity AI (FLOPs per byte read)")
    ax.set_ylabel("attainable GFLOP/s")


def roofline_ridge() -> Figure:
    fig, ax = plt.subplots(figsize=(8.2, 4.6))
    roofline_axes(ax, [
        ("decode, float32 weights (b = 4):\nAI = 2 / b = 0.5", 2 / 4, "#a63603", (18, -34)),
        ("decode, Q4_1 (b = 0.625):\nAI = 2 / b = 3.2", 2 / 0.625, "#e6550d", (12, -30)),
        ("prefill of 64 tokens, float32:\nAI = 2 x 64 / b = 32", 2 * 64 / 4, "#08519c",
         (-10, -48))])
    ax.set_title("The roofline: a workload's best speed = min(peak, AI x bandwidth)\n"
                 "(illustrative roofs; notebook 08 measures this machine's)", fontsize=9.5)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# 09 · one quantized block times the activations
# ------------------------------------------------------------------------------------------------

def q4_0_dot() -> Figure:
    fig, ax = canvas(46, 22, "One Q4_0 block times 32 activations: the scale is applied once per "
                     "block", title_size=10.5)
    # the block's bytes
    x0 = 9.0
    box(ax, x0, 17.2, 3.0, 1.6, "d", fc=FIELD["d"], round_=False, size=8, color="white")
    for i in range(16):
        ax.add_patch(Rectangle((x0 + 3.0 + i * 1.2, 17.2), 1.2, 1.6, fc=FIELD["qs"], ec="white",
                               lw=0.8))
    label(ax, x0 - 0.5, 18.0, "block j of a row", size=8, ha="right", weight="bold")
    label(ax, x0 + 1.5, 16.6, "f16 scale,\n2 bytes", size=7, color=MUTED, va="top")
    label(ax, x0 + 3.0 + 9.6, 16.6, "16 bytes: 32 quants q of 4 bits (0..15); "
          "weight i = d (q_i - 8)", size=7, color=MUTED, va="top")
    label(ax, 44.5, 18.0, "18 bytes for 32 weights:\n0.5625 bytes per weight", size=7.5,
          ha="right", color=MUTED)
    for x, title, inputs, product, scale, fc in [
            (1.0, "float path", "the block's q_i - 8, unpacked\nand converted to float",
             "s = sum_i (q_i - 8) x_i\nfloat multiply-adds", "y += d s", FILE),
            (24.0, "integer path (llama.cpp's)", "the q_i - 8 stay small integers; x in 8-bit "
             "blocks,\nx_i = d_x x8_i, made once per product",
             "s = sum_i (q_i - 8) x8_i\ninteger multiply-adds",
             "y += (d d_x) s", PERF)]:
        label(ax, x, 13.0, title, size=9, weight="bold", ha="left")
        box(ax, x, 9.0, 21.0, 3.0, inputs + ("" if x > 1 else ""), fc=AR if x > 1 else FILE,
            size=7.5)
        box(ax, x, 4.6, 21.0, 3.0, product, fc=fc, size=7.5)
        box(ax, x, 0.6, 21.0, 2.6, scale + ": one scale per block", fc=DIFF, size=7.5)
        arrow(ax, (x + 10.5, 9.0), (x + 10.5, 7.6))
        arrow(ax, (x + 10.5, 4.6), (x + 10.5, 3.2))
        arrow(ax, (x + 10.5, 15.0), (x + 10.5, 12.0), color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 10 · speculative decoding: drafts as a tree, verified in one pass
# ------------------------------------------------------------------------------------------------

def verify_tree() -> Figure:
    fig, ax = canvas(39, 19, "Several drafts, one verify pass, the longest accepted prefix wins")
    c, ry = 1.6, 12.2
    label(ax, 1, ry + 2.4, "committed (in the\ntarget's cache)", size=7.5, ha="left",
          color=MUTED)
    for j in range(4):
        ax.add_patch(Rectangle((1 + j * (c + 0.1), ry), c, c, fc=ROLE["cached"], ec="#888888"))
    rx = 1 + 4 * (c + 0.1)
    box(ax, rx, ry, c, c, "r", fc=ROLE["prompt"], round_=False, size=8)
    label(ax, rx + c / 2, ry - 0.6, "root", size=7, color=MUTED)
    for name, toks, accepted, y in [("lookup", ["a1", "a2", "a3"], 2, ry + 2.6),
                                    ("self:2", ["b1", "b2"], 1, ry - 2.6)]:
        bx = rx + c + 2.0
        arrow(ax, (rx + c, ry + c / 2), (bx, y + c / 2), color=MUTED, lw=0.9)
        for i, t in enumerate(toks):
            box(ax, bx + i * (c + 0.4), y, c, c, t, fc="#a1d99b" if i < accepted else "#fcae91",
                round_=False, size=8)
        label(ax, bx + len(toks) * (c + 0.4) + 0.3, y + c / 2,
              f"drafter {name}: {accepted} of {len(toks)} accepted", size=7.5, ha="left")
    label(ax, 1, 7.4, "green: the target's own choice there; red: the first mismatch and what "
          "follows it", size=7, ha="left", color=MUTED)
    label(ax, 1, 3.6, "1. each drafter proposes K tokens after the root (with its own cache)\n"
          "2. one target pass over all T rows: each row sees the prefix, the root\n"
          "    and the earlier rows of its own branch\n"
          "3. commit the longest accepted prefix (a1 a2) and the target's next token\n"
          "4. roll the target's cache back to what was committed", size=7.8, ha="left")
    # the verify mask
    rows = ["r", "a1", "a2", "a3", "b1", "b2"]
    branch_of = {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b"}
    cols = ["p", "p"] + rows
    mx, my, m = 28.5, 3.0, 1.05
    label(ax, mx + len(cols) * m / 2, my + len(rows) * m + 2.0,
          f"the verify mask: (T, prefix + T), T = {len(rows)}", size=8, weight="bold")
    for j, name in enumerate(cols):
        if name != "p":
            label(ax, mx + j * m + m / 2, my + len(rows) * m + 0.5, name, size=6.5)
    label(ax, mx + m, my + len(rows) * m + 0.5, "prefix", size=6.5)
    for i, r in enumerate(rows):
        label(ax, mx - 0.4, my + (len(rows) - 1 - i) * m + m / 2, r, size=6.5, ha="right")
        for j, col in enumerate(cols):
            ok = col in ("p", "r") or (branch_of.get(col) == branch_of.get(r)
                                        and rows.index(col) <= i)
            ax.add_patch(Rectangle((mx + j * m, my + (len(rows) - 1 - i) * m), m, m,
                                   fc="#525252" if ok else "white", ec="#cccccc", lw=0.5))
    # dark, not red: red already means "rejected" in the drafts on the left
    label(ax, mx + len(cols) * m / 2, my - 0.7, "row = query; dark: a key it may see",
          size=6.5, color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 11 · the Initial-Key Cache: what an evicting cache keeps
# ------------------------------------------------------------------------------------------------

def kv_groups() -> Figure:
    fig, ax = canvas(44, 11.6, "What a cache with a budget keeps: sinks, the recent window, and "
                     "the middle by Score Sum", title_size=10.5)
    n, sinks, recent, budget = 24, 2, 4, 12        # notebook 11's BUDGET, SINKS, RECENT
    score = [0.9, 0.7, 0.2, 0.6, 0.1, 0.3, 1.4, 0.2, 0.15, 0.9, 0.25, 0.1, 1.1, 0.3, 0.2, 0.7,
             0.1, 0.5, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]
    middle = list(range(sinks, n - recent))
    chosen = sorted(sorted(middle, key=lambda j: -score[j])[:budget - sinks - recent])
    c, x0, y0 = 1.5, 4.0, 4.0
    for j in range(n):
        role = "sink" if j < sinks else "recent" if j >= n - recent else (
            "kept" if j in chosen else "evicted")
        x = x0 + j * (c + 0.1)
        ax.add_patch(Rectangle((x, y0), c, c, fc=ROLE[role], ec="#999999", lw=0.6))
        if sinks <= j < n - recent:
            ax.add_patch(Rectangle((x + 0.2, y0 + c + 0.3), c - 0.4, 2.6 * score[j],
                                   fc="#3182bd" if j in chosen else "#c6dbef", ec="none"))
    label(ax, x0 - 0.5, y0 + c / 2, "positions", size=7.5, ha="right")
    label(ax, x0 - 0.5, y0 + c + 1.6, "Score Sum", size=7.5, ha="right")
    brace(ax, x0, x0 + sinks * (c + 0.1) - 0.1, y0 - 0.2, "sinks", size=7.5)
    brace(ax, x0 + (n - recent) * (c + 0.1), x0 + n * (c + 0.1) - 0.1, y0 - 0.2,
          "recent", size=7.5)
    brace(ax, x0 + sinks * (c + 0.1), x0 + (n - recent) * (c + 0.1) - 0.1, y0 - 0.2,
          f"middle: the {budget - sinks - recent} highest Score Sums are kept, the rest evicted",
          size=7.5)
    label(ax, 22, 0.6, f"budget {budget} = {sinks} sinks + {recent} recent + "
          f"{budget - sinks - recent} by score;  Score Sum = attention a key received from the "
          "last few queries", size=7.5, color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 12 · the masked-diffusion loop
# ------------------------------------------------------------------------------------------------

def diffusion_loop() -> Figure:
    fig, ax = canvas(44, 22, "Masked diffusion: every step predicts every masked position and "
          "commits a few")
    bw, bh, top = 10.0, 3.6, 15.6
    nodes = [(1.0, "canvas\nthe prompt, then B masks", BOTH),
             (16.0, "forward\nbidirectional: every\nposition sees all of them", MODEL),
             (31.0, "choose\nfor each masked position:\na token and its confidence", DIFF)]
    for x, text, fc in nodes:
        box(ax, x, top, bw, bh, text, fc=fc, size=8.2)
    arrow(ax, (11.0, top + bh / 2), (16.0, top + bh / 2))
    arrow(ax, (26.0, top + bh / 2), (31.0, top + bh / 2))
    label(ax, 28.5, top + bh / 2 + 0.6, "logits (B, V)", size=6.8, color=MUTED)
    box(ax, 31.0, 8.6, bw, bh, "commit\nthe n most confident;\nn comes from the schedule",
        fc=AR, size=8.2)
    arrow(ax, (36.0, top), (36.0, 8.6 + bh))
    ax.plot([31.0, 6.0], [10.4, 10.4], color=INK, lw=1.2)
    arrow(ax, (6.0, 10.4), (6.0, top))
    label(ax, 18.5, 11.0, "repeat until no mask is left (at most the given number of steps)",
          size=7.5, color=MUTED)
    # a run, as snapshots of the canvas
    c = 2.2
    prompt = ["capital", "of", "France?"]
    final = ["The", "capital", "is", "Paris", ".", "<e>", "<e>"]
    commits = [{1, 6}, {0, 3, 5}, {2, 4}]                         # positions per step
    done: set[int] = set()
    for s_, new in enumerate([set()] + commits):
        done |= new
        y = 6.6 - s_ * 1.9
        for j, t in enumerate(prompt):
            box(ax, 1.0 + j * (c + 0.08), y, c, 1.5, t, fc=ROLE["prompt"], round_=False,
                size=6.3, lw=0.6)
        for j, t in enumerate(final):
            x = 1.0 + (len(prompt) + j) * (c + 0.08)
            fc = "#fd8d3c" if j in new else "#a1d99b" if j in done else "white"
            box(ax, x, y, c, 1.5, t if j in done else "▒", fc=fc, round_=False, size=6.3,
                lw=0.6, color=INK if j in done else MUTED)
        note = "before step 1: all masked" if not s_ else (
            f"after step {s_}: {len(new)} committed (orange)")
        if s_ == len(commits):
            note += "; <e> = end of text"
        label(ax, 1.0 + (len(prompt) + len(final)) * (c + 0.08) + 0.4, y + 0.75, note,
              size=7.5, ha="left", color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 15 · the inter-step cache's active set
# ------------------------------------------------------------------------------------------------

def active_set() -> Figure:
    fig, ax = canvas(40, 17.2, "The inter-step cache: which positions each step recomputes")
    P, B, c = 4, 10, 1.4
    commits = [[6], [2, 9], [0, 5], [1, 7, 8], [3, 4]]           # canvas positions per step
    x0, y0 = 6.5, 2.4
    committed_at: dict[int, int] = {p: s for s, ps in enumerate(commits) for p in ps}
    for s in range(len(commits)):
        y = y0 + (len(commits) - 1 - s) * 2.3
        label(ax, x0 - 0.6, y + c / 2, f"step {s + 1}", size=8, ha="right")
        n_active = 0
        for j in range(P + B):
            if s == 0:
                role = "active"                                    # a full forward fills it
            elif j < P:
                role = "cached"
            else:
                g = j - P
                at = committed_at[g]
                role = "active" if at >= s - 1 else "cached"
            n_active += role == "active"
            ax.add_patch(Rectangle((x0 + j * (c + 0.1), y), c, c, fc=ROLE[role], ec="#999999",
                                   lw=0.6))
            if j >= P and committed_at[j - P] < s:
                label(ax, x0 + j * (c + 0.1) + c / 2, y + c / 2, "t", size=6.5)
            elif j >= P:
                label(ax, x0 + j * (c + 0.1) + c / 2, y + c / 2, "▒", size=6.5, color=MUTED)
        label(ax, x0 + (P + B) * (c + 0.1) + 0.5, y + c / 2,
              "full forward: fills the cache" if s == 0 else f"recompute {n_active} of {P + B}",
              size=7.5, ha="left", color=MUTED)
    split_braces(ax, x0, y0 - 0.2, c + 0.1, 0.1, P, B, "prompt", "canvas (▒ masked, t committed)")
    legend(ax, 2, 14.0, [(ROLE["active"], "active: still masked or committed last step"),
                         (ROLE["cached"], "K, V reused from the last forward")], 19)
    return fig


# ------------------------------------------------------------------------------------------------
# 13 · Dream reads its logits shifted by one
# ------------------------------------------------------------------------------------------------

def dream_shift() -> Figure:
    fig, ax = canvas(44, 20, "Dream reads its logits shifted by one: row i - 1 proposes the token "
                     "at position i", title_size=10.5)
    toks = ["capital", "of", "France?", "", "", "", ""]
    P, c, gap, x0 = 3, 4.0, 0.6, 8.0
    for name, y, shift, note in [
            ("LLaDA", 11.2, 0, "row i proposes position i: each masked position reads its own row"),
            ("Dream", 2.6, 1, "row i - 1 proposes position i, as in an AR model: the first canvas "
             "position reads the prompt's last row")]:
        label(ax, 1.0, y + 4.2, name, size=9.5, weight="bold", ha="left")
        for j, t in enumerate(toks):
            x = x0 + j * (c + gap)
            box(ax, x, y + 3.6, c, 1.4, t or "▒", fc=ROLE["prompt"] if j < P else ROLE["masked"],
                round_=False, size=7.5, color=INK if t else MUTED)
            ax.add_patch(Rectangle((x, y), c, 1.2, fc=MODEL, ec="#999999", lw=0.6))
            label(ax, x + c / 2, y + 0.6, f"row {j}", size=7)
            target = j + shift
            if P <= target < len(toks):
                tx = x0 + target * (c + gap)
                arrow(ax, (x + c / 2, y + 1.2), (tx + c / 2, y + 3.6),
                      color="#e6550d", lw=1.0)
        label(ax, x0 - 0.5, y + 4.3, "canvas", size=7.5, ha="right", color=MUTED)
        label(ax, x0 - 0.5, y + 0.6, "logits", size=7.5, ha="right", color=MUTED)
        label(ax, x0, y - 0.7, note, size=7.5, ha="left", color=MUTED)
    label(ax, 43.0, 0.6, "▒ a masked position", size=7.5, ha="right", color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 14 · entropy_exit: commit what the model is sure of
# ------------------------------------------------------------------------------------------------

def entropy_exit_rule() -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    tau, n_sched = 1.5, 2
    steps = [("a step where the model is sure of many positions",
              [0.05, 0.2, 2.8, 0.4, 3.1, 0.1, 0.9, 2.2, 0.3, 1.2]),
             ("a step where it is sure of few",
              [2.9, 1.1, 3.4, 2.6, 2.2, 3.0, 2.4])]
    for ax, (title, h) in zip(axes, steps):
        h = np.array(h)
        easy = int((h < tau).sum())
        n = max(n_sched, easy)
        commit = np.argsort(h, kind="stable")[:n]
        colors = ["#31a354" if j in commit else "#bdbdbd" for j in range(len(h))]
        ax.bar(np.arange(len(h)), h, color=colors)
        ax.axhline(tau, color="#e6550d", lw=1.2, ls="--")
        ax.text(1.01, tau, f"τ = {tau}", color="#e6550d", fontsize=8, va="center",
                transform=ax.get_yaxis_transform())
        ax.set_title(f"{title}:\n{easy} below τ, schedule {n_sched} -> commits "
                     f"max({n_sched}, {easy}) = {n}", fontsize=8.5)
        ax.set_xticks(np.arange(len(h)), [f"m{j}" for j in range(len(h))], fontsize=7.5)
        ax.set_xlabel("the masked positions of this step")
    axes[0].set_ylabel("entropy H of the position's\nnext-token distribution (nats)")
    handles = [Rectangle((0, 0), 1, 1, color="#31a354"), Rectangle((0, 0), 1, 1, color="#bdbdbd")]
    fig.legend(handles, ["committed this step (lowest entropy first)", "stays masked"],
               loc="lower center", ncols=2, fontsize=8, frameon=False)
    fig.suptitle("entropy_exit: a step commits max(the schedule's count, the positions below τ); "
                 "the loop ends when no mask is left", fontsize=10, weight="bold")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ------------------------------------------------------------------------------------------------
# 16 · EB-Sampler: an entropy budget per step
# ------------------------------------------------------------------------------------------------

def eb_sampler_rule() -> Figure:
    h = np.array([0.01, 0.02, 0.03, 1.18, 1.50, 2.10, 2.60, 3.00])      # sorted, lowest first
    gamma = 0.1
    admitted = len(entropy_bound_pick(np.arange(len(h)), h, gamma))
    spent = np.cumsum(h) - np.maximum.accumulate(h)
    fig, ax = plt.subplots(figsize=(8.6, 4.0))
    x = np.arange(len(h))
    # the committed positions' entropies are near 0: a shaded band shows which they are
    ax.axvspan(-0.5, admitted - 0.5, color="#c7e9c0", alpha=0.7, lw=0, zorder=0,
               label=f"the {admitted} positions this step commits")
    ax.bar(x, h, color=["#31a354" if j < admitted else "#bdbdbd" for j in x], width=0.6,
           label="entropy of the position (nats)")
    ax.plot(x, spent, "o-", color="#e6550d",
            label="prefix's sum - its largest (what the rule spends)")
    ax.axhline(gamma, color="#e6550d", lw=1.0, ls="--")
    ax.text(1.01, gamma, f"γ = {gamma}", color="#e6550d", fontsize=8, va="center",
            transform=ax.get_yaxis_transform())
    ax.annotate("the largest of the prefix is free:\nthis 1.18-nat position is admitted",
                (3, h[3]), xytext=(0.6, 2.2), fontsize=7.5, color=INK,
                arrowprops={"arrowstyle": "-", "color": INK, "lw": 0.6})
    ax.set_ylim(0, 3.4)                                         # the spent line leaves the top
    ax.set_xticks(x, [f"{v:g}" for v in h])
    ax.set_xlabel("the masked positions, sorted by entropy (lowest first); labels: their entropy")
    ax.set_ylabel("nats")
    ax.set_title(f"EB-Sampler: commit the longest prefix whose entropies, less the largest, sum to "
                 f"at most γ\n(shaded green: the {admitted} positions this step commits)",
                 fontsize=9.5)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------
# 17 · the regime inversion: where each engine sits on the roofline, and the break-even
# ------------------------------------------------------------------------------------------------

def regime_break_even() -> Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6),
                                      gridspec_kw={"width_ratios": [1.2, 1]})
    B, b = 64, 0.625
    roofline_axes(left, [("AR decode: 1 token per pass,\nAI = 2 / b", 2 / b, "#e6550d", (32, -95)),
                         (f"diffusion step: B = {B} tokens\nper pass, AI = 2 B / b", 2 * B / b,
                          "#08519c", (-70, -52))])
    left.set_title("The same weights, read once per pass (b = 0.625 bytes per weight)",
                   fontsize=9)
    t_dec, t_step = 10.0, 120.0                                   # illustrative, ms
    n = np.arange(1, 17)
    right.plot(n, n * t_step, color="#08519c", label="diffusion: n steps x t_step")
    right.axhline(B * t_dec, color="#e6550d", label="AR: B x t_dec")
    n_star = B * t_dec / t_step
    right.axvline(n_star, color=MUTED, ls=":", lw=0.9)
    right.annotate(f"break-even n* = B t_dec / t_step = {n_star:.1f} steps", (n_star, B * t_dec),
                   xytext=(n_star + 0.8, B * t_dec * 0.4), fontsize=8,
                   arrowprops={"arrowstyle": "-", "color": INK, "lw": 0.6})
    right.fill_betweenx([0, 16 * t_step], 1, n_star, color="#c6dbef", alpha=0.35, lw=0)
    right.text(1.3, 16 * t_step * 0.9, "diffusion\nfinishes first", fontsize=8, color="#08519c",
               va="top")
    right.set_xlim(1, 16)
    right.set_ylim(0, 16 * t_step)
    right.set_xlabel("denoising steps n for a canvas of B tokens")
    right.set_ylabel("time for B tokens (ms)")
    right.set_title(f"Who finishes B = {B} tokens first (illustrative times:\n"
                    f"t_dec = {t_dec:g} ms per token, t_step = {t_step:g} ms per step)", fontsize=9)
    right.legend(fontsize=8, loc="center right")
    fig.suptitle("The regime inversion: AR decode waits for memory, "
                 "a diffusion step for arithmetic", fontsize=10.5, weight="bold")
    fig.tight_layout()
    return fig


FIGURES: dict[str, Callable[[], Figure]] = {
    "00_map": map_of_notebooks,
    "01_gguf_layout": gguf_layout,
    "02_block_layouts": block_layouts,
    "03_bpe_merges": bpe_merges,
    "04_transformer_block": transformer_block,
    "05_kv_cache": kv_cache,
    "05_prefill_decode": prefill_decode,
    "06_sampler_chain": sampler_chain,
    "07_next_token_nll": next_token_nll,
    "07_windows_half_rule": windows_half_rule,
    "07_requantize": requantize,
    "08_roofline_ridge": roofline_ridge,
    "09_q4_0_dot": q4_0_dot,
    "10_verify_tree": verify_tree,
    "11_kv_groups": kv_groups,
    "12_diffusion_loop": diffusion_loop,
    "13_dream_shift": dream_shift,
    "14_entropy_exit_rule": entropy_exit_rule,
    "15_active_set": active_set,
    "16_eb_sampler_rule": eb_sampler_rule,
    "17_regime_break_even": regime_break_even,
}


def write_all(out: Path, png: Path | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        fig = draw()
        path = out / f"{name}.svg"
        tmp = path.with_suffix(".svg.tmp")
        fig.savefig(tmp, format="svg", metadata={"Date": None, "Creator": None})
        tmp.replace(path)
        if png is not None:
            png.mkdir(parents=True, exist_ok=True)
            fig.savefig(png / f"{name}.png", format="png", dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="draw into a temp folder and compare with notebooks/figures")
    ap.add_argument("--png", type=Path, help="also write PNG previews into this folder")
    args = ap.parse_args(argv)
    if not args.check:
        for p in write_all(OUT, args.png):
            print(p.relative_to(ROOT))
        return 0
    with tempfile.TemporaryDirectory() as d:
        fresh = write_all(Path(d), args.png)
        stale = [p.name for p in fresh if not (OUT / p.name).exists()
                 or (OUT / p.name).read_bytes() != p.read_bytes()]
    extra = sorted({p.name for p in OUT.glob("*.svg")} - {p.name for p in fresh})
    for name in stale:
        print(f"notebooks/figures/{name}: differs from what tools/make_figures.py draws",
              file=sys.stderr)
    for name in extra:
        print(f"notebooks/figures/{name}: no function in tools/make_figures.py draws it",
              file=sys.stderr)
    return 1 if stale or extra else 0


if __name__ == "__main__":
    sys.exit(main())
