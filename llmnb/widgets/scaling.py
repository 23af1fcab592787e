"""Thread scaling, run and drawn: AR decode against diffusion steps as threads are added.

``run_scaling`` is ``llmnb.perf.scaling.thread_sweep`` (each point is handed to `on_point`
as soon as it is measured); ``plot_scaling`` draws tokens/s and the scaling factor per
thread count for both kinds, with the ideal (linear) line. ``scaling_runner`` is a button
that runs the sweep with a progress bar and redraws the curves as points arrive; the
notebook calls the two plain functions, so nbval runs the button's code.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from llmnb.model.model import Model
from llmnb.perf.scaling import AR, DIFFUSION, OnPoint, ScalingPoint, thread_sweep
from llmnb.widgets.roofline import figure_png

CSS_CLASS = "llmnb-scaling-runner"
LABELS = {AR: "AR decode (tok/s)", DIFFUSION: "diffusion step (tok/s at 16 steps)"}
COLORS = {AR: "tab:red", DIFFUSION: "tab:blue"}


def run_scaling(ar: Model | None, diffusion: Model | None, threads: Sequence[int],
                gen_length: int = 64, repeats: int = 3,
                on_point: OnPoint | None = None) -> list[ScalingPoint]:
    """The sweep the runner's button starts: AR decode and diffusion steps at each thread
    count (see ``llmnb.perf.scaling.thread_sweep``)."""
    return thread_sweep(ar, diffusion, threads, gen_length=gen_length, repeats=repeats,
                        on_point=on_point)


def plot_scaling(points: Sequence[ScalingPoint], threads: Sequence[int] | None = None,
                 title: str | None = None, axes: tuple[Axes, Axes] | None = None) -> Figure:
    """Two panels: tokens/s per thread count, and the scaling factor against the ideal
    (drawn on `axes` when given, e.g. from ``plt.subplots(1, 2)``; else on a new figure)."""
    if axes is None:
        fig = Figure(figsize=(9, 3.6), layout="constrained")
        speed, factor = fig.subplots(1, 2)
    else:
        speed, factor = axes
        fig = speed.get_figure()                                  # type: ignore[assignment]
    counts = sorted(set(threads or []) | {p.threads for p in points}) or [1]
    for kind in (AR, DIFFUSION):
        pts = sorted((p for p in points if p.kind == kind), key=lambda p: p.threads)
        if not pts:
            continue
        xs = [p.threads for p in pts]
        speed.plot(xs, [p.tok_s for p in pts], "o-", color=COLORS[kind], label=LABELS[kind])
        factor.plot(xs, [p.scaling for p in pts], "o-", color=COLORS[kind],
                    label=f"{kind.replace('_', ' ')}: {pts[-1].scaling:.2f}x at {xs[-1]}")
    factor.plot(counts, [c / counts[0] for c in counts], "--", color="gray", label="linear")
    for ax in (speed, factor):
        ax.set_xticks(counts)
        ax.set_xlabel("threads")
        ax.grid(True, alpha=0.3)
    speed.set_yscale("log")
    speed.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    speed.yaxis.set_major_formatter(ScalarFormatter())
    speed.yaxis.set_minor_formatter(NullFormatter())
    speed.set_ylabel("tokens/s")
    factor.set_ylabel(f"speed / speed at {counts[0]} thread{'s' if counts[0] > 1 else ''}")
    if points:
        speed.legend(fontsize=8)
        factor.legend(fontsize=8)
    title = title or "thread scaling: AR decode vs diffusion steps"
    if axes is None:
        fig.suptitle(title, fontsize=10)
    else:
        speed.set_title(title, fontsize=10, loc="left")
    return fig


def scaling_runner(ar: Model | None, diffusion: Model | None, threads: Sequence[int],
                   gen_length: int = 64, repeats: int = 3,
                   points: Sequence[ScalingPoint] = ()) -> Any:
    """A button that runs ``run_scaling`` with a progress bar and redraws ``plot_scaling``
    as each point arrives; `points` (an earlier sweep) are shown until then. Returns an
    ``ipywidgets.VBox`` with CSS class ``llmnb-scaling-runner``."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    counts = [int(t) for t in threads]
    total = len(counts) * ((ar is not None) + (diffusion is not None))
    button = widgets.Button(description="Run thread sweep", icon="play",
                            layout=widgets.Layout(width="180px"))
    progress = widgets.IntProgress(value=len(points), min=0, max=max(total, 1),
                                   description="points")
    status = widgets.Label(value=f"{len(points)} of {total} points" if points else
                           f"threads {', '.join(map(str, counts))}: press the button")
    image = widgets.Image(value=figure_png(plot_scaling(points, counts)), format="png",
                          layout=widgets.Layout(width="720px"))

    def on_point(p: ScalingPoint, done: int, n: int) -> None:
        got.append(p)
        progress.value = done
        status.value = (f"{done} of {n}: {p.kind.replace('_', ' ')} at {p.threads} threads, "
                        f"{p.tok_s:.1f} tok/s ({p.scaling:.2f}x)")
        image.value = figure_png(plot_scaling(got, counts))

    got: list[ScalingPoint] = []

    def on_click(_button: object) -> None:
        got.clear()
        button.disabled = True
        progress.value = 0
        status.value = "measuring..."
        try:
            run_scaling(ar, diffusion, counts, gen_length, repeats, on_point)
        except Exception as e:          # shown in the widget: a callback has nowhere else to say it
            status.value = f"failed: {e}"
        finally:
            button.disabled = False

    button.on_click(on_click)
    box = widgets.VBox([widgets.HBox([button, progress, status]), image])
    box.add_class(CSS_CLASS)
    return box
