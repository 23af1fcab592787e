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
from llmnb.quant import FORMATS  # noqa: E402

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
    label(ax, 2.0, 10.7, "how fast, and why", size=8, color=MUTED, ha="left")
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
            text = field if w > 0.62 * len(field) * 0.9 else field.split()[0]
            if w >= 1.4:
                label(ax, x + w / 2, y + 0.7, text, size=6.8, color="white")
            x += w
        label(ax, x + 0.4, y + 0.7, f"{total} B / {fmt.block_size} weights = "
              f"{fmt.bits_per_weight:.4g} bits per weight", size=7.5, ha="left", color=MUTED)

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
        label(ax, x + d + 1.2 + out / 2, top - d / 2, "W (d, out)\nevery weight read\n"
              "from memory once", size=7.5)
        label(ax, x + d + out + 1.8, top - d / 2, "=", size=11)
        ax.add_patch(Rectangle((x + d + out + 2.4, top - rows), out, rows, fc=DIFF, ec=INK))
        label(ax, x + d + out + 2.4 + out / 2, top - rows / 2 if rows > 1 else top + 0.5,
              f"({who}, out)", size=7.5)
        label(ax, x + (2 * d + out + 2.4) / 2 + 1.5, top + 1.6, name, size=9.5, weight="bold")
        label(ax, x + (2 * d + out + 2.4) / 2 + 1.5, top - d - 1.4, note, size=7.8,
              color=MUTED, va="top")

    product(1.0, 3.5, "P", "prefill: the P prompt tokens at once",
            "matrix-matrix: 2P FLOPs per weight read;\ncompute-bound (BLAS near its peak)")
    product(22.0, 0.45, "1", "decode: one token per pass",
            "matrix-vector: 2 FLOPs per weight read;\nmemory-bound (waits for the weights)")
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
                                   fc="#fb6a4a" if ok else "white", ec="#cccccc", lw=0.5))
    label(ax, mx + len(cols) * m / 2, my - 0.7, "row = query, column = key it may see",
          size=6.5, color=MUTED)
    return fig


# ------------------------------------------------------------------------------------------------
# 11 · the Initial-Key Cache: what an evicting cache keeps
# ------------------------------------------------------------------------------------------------

def kv_groups() -> Figure:
    fig, ax = canvas(44, 11.6, "What a cache with a budget keeps: sinks, the recent window, and "
                     "the middle by Score Sum", title_size=10.5)
    n, sinks, recent, budget = 24, 2, 5, 11
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


FIGURES: dict[str, Callable[[], Figure]] = {
    "00_map": map_of_notebooks,
    "01_gguf_layout": gguf_layout,
    "02_block_layouts": block_layouts,
    "03_bpe_merges": bpe_merges,
    "04_transformer_block": transformer_block,
    "05_kv_cache": kv_cache,
    "05_prefill_decode": prefill_decode,
    "06_sampler_chain": sampler_chain,
    "10_verify_tree": verify_tree,
    "11_kv_groups": kv_groups,
    "12_diffusion_loop": diffusion_loop,
    "15_active_set": active_set,
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
