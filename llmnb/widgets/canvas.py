"""A diffusion canvas, drawn: when each position was committed, and how unsure it was.

``commit_steps`` reads a ``llmnb.diffuse`` result's ``.history`` (the canvas after each
step) and returns the step that committed each position. ``step_entropies`` recomputes, for
every step, the entropy of each still-masked position from the canvas the step started from
(one full bidirectional forward per step, with ``llmnb.diffusion.entropy``: what an uncached
run sees). ``plot_canvas`` draws a run as a grid (rows = steps, columns = positions, colour =
entropy while masked, the token where it was committed); ``canvas_html`` renders the canvas
at one step as coloured cells, and ``canvas_viewer`` puts several runs side by side (one step
against many on the same prompt) under one step slider. The notebook calls the plain
functions, so nbval runs what the slider runs.
"""
from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm, to_hex
from matplotlib.figure import Figure

from llmnb.diffusion.engine import DiffusionResult, mask_id_of
from llmnb.model.model import Model
from llmnb.softmax import entropy

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
CSS_CLASS = "llmnb-canvas-viewer"
MASK_GLYPH = "▒"
STEP_CMAP = "viridis"
ENTROPY_CMAP = "magma_r"
H_RANGE = (1e-3, 8.0)          # nats, the colour scale of entropies (log)


def commit_steps(result: DiffusionResult, mask_id: int) -> I64:
    """(B,) the step (1-based) that committed each canvas position; 0 if never committed."""
    hist = np.array(result.history, dtype=np.int64)                # (steps, B)
    out: I64 = np.zeros(len(result.tokens), dtype=np.int64)
    for s in range(len(hist) - 1, -1, -1):                          # earliest step wins
        out[hist[s] != mask_id] = s + 1
    return out


def step_entropies(model: Model, result: DiffusionResult) -> F64:
    """(steps, B) nats: entry [s, i] is position i's predictive entropy at step s + 1, computed
    from the canvas that step started from; NaN where the position was already committed."""
    mask = mask_id_of(model)
    prompt = np.array(result.prompt_ids, dtype=np.int64)
    n_gen = len(result.tokens)
    before = [np.full(n_gen, mask, dtype=np.int64)] + list(result.history[:-1])
    rows = np.arange(len(prompt), len(prompt) + n_gen)
    if model.config.shift_logits:                                   # Dream reads row i - 1
        rows = rows - 1
    out: F64 = np.full((len(result.history), n_gen), np.nan)
    for s, canvas in enumerate(before):
        ids = np.concatenate([prompt, canvas])                      # (P + B,)
        h = model.transformer.hidden(ids, causal=False)             # (P + B, d)
        masked = canvas == mask
        logits = model.transformer.logits(h[rows[masked]])          # (m, V)
        out[s, masked] = entropy(logits)
    return out


@dataclass
class CanvasRun:
    """What the viewer shows of one run: its tokens' texts, commit steps and entropies."""

    label: str
    texts: list[str]         # (B,) each final token's text
    committed: I64           # (B,) commit step, 1-based
    entropies: F64           # (steps, B)
    steps: int
    answer: str


END = "⟨end⟩"                  # how an end-of-generation token (the canvas's filler) is shown


def canvas_run(model: Model, result: DiffusionResult, label: str) -> CanvasRun:
    eog = set(model.tokenizer.eog_ids)
    texts = [END if t in eog else model.tokenizer.decode([t]).replace("\n", "\\n") or "·"
             for t in result.tokens]
    return CanvasRun(label, texts, commit_steps(result, mask_id_of(model)),
                     step_entropies(model, result), result.steps_taken, result.text)


def _step_rgba(step: int, steps: int) -> tuple[float, float, float, float]:
    r, g, b, a = colormaps[STEP_CMAP](0.15 + 0.8 * (step - 1) / max(steps - 1, 1))
    return float(r), float(g), float(b), float(a)


def _step_color(step: int, steps: int) -> str:
    return str(to_hex(_step_rgba(step, steps)))


def _ink(step: int, steps: int) -> str:
    """Black or white text, whichever reads better on the step's colour."""
    r, g, b, _ = _step_rgba(step, steps)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def plot_canvas(run: CanvasRun, ax: Axes | None = None, max_positions: int | None = None) -> Figure:
    """Rows = steps, columns = canvas positions: a masked position is coloured by its entropy
    at that step (dark = unsure), a committed one shows its token on the row that committed
    it and stays blank after."""
    n = len(run.texts) if max_positions is None else min(max_positions, len(run.texts))
    if ax is None:
        fig = Figure(figsize=(min(2.0 + 0.42 * n, 18), 1.2 + 0.34 * run.steps),
                     layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()                                     # type: ignore[assignment]
    h = np.clip(run.entropies[:, :n], *H_RANGE)
    im = ax.imshow(h, cmap=ENTROPY_CMAP, norm=LogNorm(*H_RANGE), aspect="auto",
                   interpolation="nearest")
    for i in range(n):
        s = int(run.committed[i])
        if s:
            ax.text(i, s - 1, run.texts[i], ha="center", va="center", fontsize=6.5,
                    rotation=90 if len(run.texts[i]) > 3 else 0,
                    color=_ink(s, run.steps), backgroundcolor=_step_color(s, run.steps))
    ax.set_xticks(range(0, n, max(1, n // 16)))
    ax.set_yticks(range(run.steps), [str(s + 1) for s in range(run.steps)], fontsize=7)
    ax.set_xlabel("canvas position")
    ax.set_ylabel("step")
    ax.set_title(f"{run.label} -> {run.answer!r}", fontsize=9, loc="left")
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, label="entropy while masked (nats)")
    return fig


def _entropy_color(h: float) -> str:
    return str(to_hex(colormaps[ENTROPY_CMAP](float(LogNorm(*H_RANGE)(np.clip(h, *H_RANGE))))))


def canvas_html(run: CanvasRun, step: int) -> str:
    """The canvas after `step` (1-based; past the run's end, its last step) as HTML cells: a
    committed token on its commit step's colour (bold: committed at this step), a masked one
    as ▒; every position this step looked at is underlined by its entropy at this step."""
    s = min(max(step, 1), run.steps)
    cells = []
    for i, text in enumerate(run.texts):
        c = int(run.committed[i])
        h = float(run.entropies[s - 1, i])
        line = (f"border-bottom:4px solid {_entropy_color(h)};" if np.isfinite(h) else
                "border-bottom:4px solid transparent;")
        tip = f"entropy {h:.2f} nats at step {s}" if np.isfinite(h) else f"committed at step {c}"
        if 0 < c <= s:
            cells.append(f'<span class="tok" style="background:{_step_color(c, run.steps)};'
                         f'color:{_ink(c, run.steps)};'
                         f'font-weight:{"bold" if c == s else "normal"};{line}" '
                         f'title="{tip}">{html.escape(text)}</span>')
        else:
            cells.append(f'<span class="tok mask" style="{line}" title="{tip}">'
                         f"{MASK_GLYPH}</span>")
    n_done = int(((run.committed > 0) & (run.committed <= s)).sum())
    head = (f"<div><b>{html.escape(run.label)}</b>: step {s} of {run.steps}, {n_done} of "
            f"{len(run.texts)} committed</div>")
    style = ("<style>.llmnb-canvas .tok{display:inline-block;margin:1px;padding:1px 3px;"
             "border-radius:3px;font-family:monospace;font-size:12px}"
             ".llmnb-canvas .mask{color:#999}</style>")
    return f'{style}<div class="llmnb-canvas">{head}<div>{"".join(cells)}</div></div>'


def canvas_viewer(model: Model, results: Mapping[str, DiffusionResult]) -> Any:
    """One step slider over several runs of ``llmnb.diffuse`` (label -> result), shown one
    under the other; a run that took fewer steps stays on its last one. Returns an
    ``ipywidgets.VBox`` with CSS class ``llmnb-canvas-viewer``."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    runs = [canvas_run(model, r, name) for name, r in results.items()]
    longest = max(r.steps for r in runs)
    slider = widgets.IntSlider(value=1, min=1, max=longest, description="step",
                               continuous_update=False)
    views = [widgets.HTML() for _ in runs]

    def redraw(_change: object = None) -> None:
        for view, run in zip(views, runs):
            view.value = canvas_html(run, int(slider.value))

    slider.observe(redraw, names="value")
    redraw()
    legend = widgets.HTML(value=("colour: the step a token was committed at (early dark, late "
                                 f"light; bold: this step); {MASK_GLYPH}: still masked; {END}: "
                                 "end of text; underline: entropy at this step (dark = unsure)"))
    box = widgets.VBox([slider, *views, legend])
    box.add_class(CSS_CLASS)
    return box
