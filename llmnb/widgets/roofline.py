"""The roofline, drawn: this machine's two roofs, where AR decode and a diffusion step land.

``plot_roofline`` draws one roof (sgemm peak and a memory bandwidth, both measured by
``llmnb.perf.machine``), the predicted position of each workload (its arithmetic intensity
and the roof above it) and measured runs (their intensity and the FLOP/s they reached).
``roofline_explorer`` wraps it in sliders: B (tokens per forward), bytes per weight and
threads; every change redraws the picture. ``plot_read_curve`` draws where the memory roof
comes from: read bandwidth against working-set size, the cache sizes the OS reports, and
the plateau the roof is read from. The notebook calls ``plot_roofline`` directly,
so what runs under nbval is the code the sliders run.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmnb.model.config import ModelConfig
from llmnb.perf.machine import MachineFacts
from llmnb.perf.roofline import (
    Measurement, Placement, Roof, Workload, ar_decode, bytes_per_weight, diffusion_step, place,
)

CSS_CLASS = "llmnb-roofline-explorer"
B_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
FORMATS = ("Q4_K", "Q4_1", "Q5_K", "Q6_K", "Q8_0", "F16", "F32")   # llama.cpp's weight formats
AI_RANGE = (0.05, 4096.0)                                         # FLOP/byte on the x axis
COLORS = {"AR": "tab:red", "diffusion": "tab:blue", "other": "tab:green"}


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (for an ``ipywidgets.Image``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _color(name: str) -> str:
    if name.startswith(("AR", "decode")):
        return COLORS["AR"]
    if "diffusion" in name:
        return COLORS["diffusion"]
    return COLORS["other"]


def plot_read_curve(facts: MachineFacts, threads: Sequence[int] | None = None,
                    ax: Axes | None = None, title: str | None = None) -> Figure:
    """Read bandwidth (GB/s) against working-set size at each of `threads` (default: all
    measured), each point's quartiles as an error bar; the cache sizes the OS reports as
    dotted verticals; each curve's plateau (the memory roof) as a dashed line from where it
    starts, and its cache edge as an open circle."""
    if ax is None:
        fig = Figure(figsize=(8, 4.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()                                     # type: ignore[assignment]
    counts = list(threads) if threads is not None else sorted(facts.curve)
    for i, n in enumerate(counts):
        pts = facts.curve[n]
        color = f"C{i}"
        xs = [p.nbytes for p in pts]
        ys = [p.gbs for p in pts]
        err = [[p.gbs - p.low for p in pts], [p.high - p.gbs for p in pts]]
        ax.errorbar(xs, ys, yerr=err, fmt="o-", ms=3, lw=1.2, capsize=2, color=color,
                    label=f"{n} thread{'s' if n > 1 else ''}")
        top = facts.plateau(n)
        ax.hlines(top.gbs, top.start, xs[-1], colors=color, linestyles="--", lw=2)
        ax.annotate(f"plateau {top.gbs:.1f} GB/s", (top.start, top.gbs),
                    textcoords="offset points", xytext=(0, -14 - 12 * i), fontsize=8, color=color)
        if top.edge is not None:
            edge = next(p for p in pts if p.nbytes == top.edge)
            ax.plot([edge.nbytes], [edge.gbs], "o", ms=10, mfc="none", color=color)
    for name, size in sorted(facts.caches.items(), key=lambda kv: kv[1]):
        if name.endswith("i"):
            continue                                               # instruction caches
        ax.axvline(size, color="0.5", ls=":", lw=1)
        ax.annotate(f"{name} {_size(size)} (reported)", (size, 1),
                    xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="0.35", rotation=90, va="top")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("working set (bytes, log scale)")
    ax.set_ylabel("read bandwidth (GB/s)")
    sizes = [p.nbytes for n in counts for p in facts.curve[n]]
    ticks = [1 << e for e in range(10, 41, 2) if min(sizes) / 2 <= 1 << e <= 2 * max(sizes)]
    ax.set_xticks(ticks, [_size(t) for t in ticks])
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "read bandwidth against working-set size (median, IQR)")
    return fig


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.4g} {unit}"
    return f"{nbytes} B"


def plot_roofline(roof: Roof, workloads: Sequence[Workload] = (),
                  placements: Sequence[Placement] = (), ax: Axes | None = None,
                  title: str | None = None) -> Figure:
    """Log-log roofline: attainable GFLOP/s against arithmetic intensity (FLOP/byte).

    Each workload is a hollow marker on the roof at its intensity (the best it can do);
    each placement a filled marker at the GFLOP/s it was measured at, labelled with its
    share of the roof (the legend names the workloads)."""
    if ax is None:
        fig = Figure(figsize=(7.5, 4.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()                                     # type: ignore[assignment]
    lo, hi = AI_RANGE
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.loglog(xs, [roof.attainable(x) / 1e9 for x in xs], color="black", lw=2)
    ax.axvline(roof.ridge, color="gray", ls=":", lw=1)
    ax.annotate(f"ridge {roof.ridge:.1f} FLOP/B", (roof.ridge, roof.peak_flops / 1e9),
                xytext=(6, -14), textcoords="offset points", fontsize=8, color="gray")
    ax.annotate(f"{roof.bandwidth / 1e9:.1f} GB/s", (lo * 1.5, roof.attainable(lo * 1.5) / 1e9),
                xytext=(14, -8), textcoords="offset points", fontsize=8)
    ax.annotate(f"{roof.peak_flops / 1e9:.0f} GFLOP/s", (roof.ridge, roof.peak_flops / 1e9),
                xytext=(6, 5), textcoords="offset points", fontsize=8)
    for w in workloads:
        y = roof.attainable(w.intensity) / 1e9
        ax.plot([w.intensity], [y], "o", mfc="none", mec=_color(w.name), ms=10, mew=2,
                label=f"{w.name}: AI {w.intensity:.2f} ({w.bound(roof)}-bound)")
    for i, p in enumerate(placements):
        # the workload's name is in the legend: the label beside a measured marker is only
        # its share of the roof, short enough that neighbouring placements do not collide
        # its own side of the roof's line: above it where it passes the roof (an integer
        # product can pass float32's sgemm), clear of the workloads' markers on the line
        ax.plot([p.intensity], [p.achieved_flops / 1e9], "o", color=_color(p.name), ms=7)
        dy = 4 + 10 * (i % 2)
        ax.annotate(f"{100 * p.fraction:.0f}% of roof", (p.intensity, p.achieved_flops / 1e9),
                    xytext=(7, dy if p.fraction > 1 else -dy), textcoords="offset points",
                    fontsize=8, color=_color(p.name))
    top = max([roof.peak_flops] + [p.achieved_flops for p in placements])
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(0.05, roof.attainable(lo) / 1e9 / 2), top / 1e9 * 3)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title if title is not None else f"roofline: {roof.label}", fontsize=10)
    if workloads:
        ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return fig


def explorer_state(facts: MachineFacts, config: ModelConfig, gen_length: int,
                   weight_bytes: float, threads: int, measured: Sequence[Measurement] = (),
                   prompt_tokens: int = 32, context: int = 32,
                   memory: str = "gemv") -> tuple[Roof, list[Workload], list[Placement]]:
    """What the explorer draws for one setting of its sliders: the roof at `threads`, AR
    decode and a diffusion step of B = `gen_length` at `weight_bytes` per weight, and the
    measured runs taken at `threads`."""
    roof = facts.roof(threads, memory)
    workloads = [ar_decode(config, weight_bytes, context),
                 diffusion_step(config, weight_bytes, gen_length, prompt_tokens)]
    placements = [place(m.workload, m.seconds, roof) for m in measured if m.threads == threads]
    return roof, workloads, placements


def summary(roof: Roof, workloads: Sequence[Workload], steps: int = 16) -> str:
    """One line per workload: intensity, bound and the roofline's predicted speed."""
    lines = []
    for w in workloads:
        t = w.seconds(roof)
        speed = (f"{1 / t:.1f} tok/s" if w.tokens == 1 else
                 f"{t * 1e3:.1f} ms per step")
        lines.append(f"{w.name}: AI {w.intensity:.2f} FLOP/B, {w.bound(roof)}-bound, "
                     f"predicted {speed}")
    return "<br>".join(lines)


def roofline_explorer(facts: MachineFacts, config: ModelConfig,
                      measured: Sequence[Measurement] = (), prompt_tokens: int = 32,
                      context: int = 32, memory: str = "gemv", gen_length: int = 64,
                      weight_format: str = "F32") -> Any:
    """Sliders for B (tokens per forward), bytes per weight and threads over the roofline
    of `facts` for a model of `config`; measured runs at the chosen thread count are shown.
    Returns an ``ipywidgets.VBox`` with CSS class ``llmnb-roofline-explorer``."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    b_slider = widgets.SelectionSlider(options=list(B_CHOICES), value=gen_length, description="B",
                                       continuous_update=False)
    fmt_options = [(f"{f} ({bytes_per_weight(f):.3g} B)", bytes_per_weight(f)) for f in FORMATS]
    w_slider = widgets.SelectionSlider(options=fmt_options, value=bytes_per_weight(weight_format),
                                       description="bytes/weight", continuous_update=False,
                                       style={"description_width": "initial"})
    counts = facts.threads
    t_slider = widgets.SelectionSlider(options=counts, value=counts[-1], description="threads",
                                       continuous_update=False)
    image = widgets.Image(format="png", layout=widgets.Layout(width="600px"))
    text = widgets.HTML()

    def redraw(_change: object = None) -> None:
        roof, workloads, placements = explorer_state(
            facts, config, int(b_slider.value), float(w_slider.value), int(t_slider.value),
            measured, prompt_tokens, context, memory)
        fig = plot_roofline(roof, workloads, placements)
        image.value = figure_png(fig)
        text.value = summary(roof, workloads)

    for s in (b_slider, w_slider, t_slider):
        s.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([widgets.HBox([b_slider, w_slider, t_slider]), image, text])
    box.add_class(CSS_CLASS)
    return box
