"""The next-token distribution, drawn: what temperature, top-k, top-p and min-p keep.

``filter_stages`` asks the package's own ``Sampler`` which tokens survive each filter of the
chain in turn (top-k, then top-p, then min-p) and what the final distribution is, so the
picture is the sampler's arithmetic, not a copy of it. ``plot_next_token`` draws the most
likely tokens: the model's distribution in grey, the one the sampler draws from in blue, and
each removed token coloured by the filter that removed it. ``next_token_explorer`` wraps it
in a prompt box and four sliders; the notebook calls the plain functions, so nbval runs
what the sliders run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from llmnb.ar.sampling import Sampler
from llmnb.model.model import Model
from llmnb.softmax import softmax
from llmnb.widgets.roofline import figure_png

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
CSS_CLASS = "llmnb-next-token-explorer"
FILTERS = ("top-k", "top-p", "min-p")
COLORS = {"kept": "tab:blue", "top-k": "tab:red", "top-p": "tab:orange", "min-p": "tab:purple"}


@dataclass
class FilterStages:
    """One setting of the sampler applied to one row of logits."""

    order: I64            # (V,) token ids, most likely first (ties to the lower id)
    p: F64                # (V,) the model's distribution, softmax(logits)
    q: F64                # (V,) what the sampler draws from (zeros where filtered)
    removed_by: list[str]  # per token in `order`: "" (kept) or the filter that removed it
    survivors: dict[str, int]   # filter -> tokens left after it (the chain so far)
    sampler: Sampler


def filter_stages(logits: F32, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                  min_p: float = 0.0) -> FilterStages:
    """The chain step by step: which tokens top-k, then top-p, then min-p remove, and the
    final distribution at `temperature` (0 = greedy), all from ``Sampler``."""
    chain = [Sampler(top_k=top_k), Sampler(top_k=top_k, top_p=top_p),
             Sampler(top_k=top_k, top_p=top_p, min_p=min_p)]
    keeps = [s.keep_mask(logits) for s in chain]                   # (V,) bool each
    order: I64 = np.argsort(-logits, kind="stable").astype(np.int64)   # (V,)
    removed: npt.NDArray[np.str_] = np.full(len(logits), "", dtype="<U5")
    alive = np.ones(len(logits), dtype=bool)
    for name, keep in zip(FILTERS, keeps):
        removed[alive & ~keep] = name
        alive &= keep
    sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    return FilterStages(order=order, p=softmax(logits), q=sampler.probs(logits),
                        removed_by=[str(removed[i]) for i in order],
                        survivors={n: int(k.sum()) for n, k in zip(FILTERS, keeps)},
                        sampler=sampler)


def stages_summary(st: FilterStages) -> str:
    """One line: how many tokens each filter leaves, and the top token's final share."""
    s = st.sampler
    top = int(np.argmax(st.q))
    parts = [f"top-k {s.top_k or 'off'}: {st.survivors['top-k']:,} left",
             f"top-p {s.top_p:g}: {st.survivors['top-p']:,}",
             f"min-p {s.min_p:g}: {st.survivors['min-p']:,}"]
    return (", ".join(parts) + f"; temperature {s.temperature:g} gives the top token "
            f"{st.q[top]:.0%}")


def plot_next_token(st: FilterStages, labels: list[str], n_show: int = 30,
                    ax: Axes | None = None, title: str | None = None) -> Figure:
    """The `n_show` most likely tokens: grey = the model's p (temperature 1), blue = what
    the sampler draws from; a removed token's grey bar is coloured by the filter that
    removed it. `labels[i]` is the text of token `st.order[i]`."""
    if ax is None:
        fig = Figure(figsize=(max(6.0, 0.25 * n_show + 2.5), 3.6), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()                                     # type: ignore[assignment]
    ids = st.order[:n_show]
    x = np.arange(len(ids))
    colors = [COLORS[r] if r else "lightgrey" for r in st.removed_by[:n_show]]
    ax.bar(x, st.p[ids], width=0.85, color=colors, alpha=0.55)
    ax.bar(x, st.q[ids], width=0.45, color=COLORS["kept"])
    ax.set_xticks(x, labels[:n_show], rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    ax.set_ylim(0, max(float(st.q[ids].max()), float(st.p[ids].max())) * 1.08)
    ax.grid(axis="y", alpha=0.3)
    handles = [Patch(color="lightgrey", alpha=0.55, label="model, temperature 1"),
               Patch(color=COLORS["kept"], label="sampler draws from")]
    handles += [Patch(color=COLORS[f], alpha=0.55, label=f"removed by {f}") for f in FILTERS]
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    ax.set_title(title if title is not None else stages_summary(st), fontsize=9, loc="left")
    return fig


def last_logits(model: Model, prompt: str) -> F32:
    """The next-token logits (V,) after `prompt` (one forward pass)."""
    ids = np.array(model.tokenizer.encode(prompt, add_special=True), dtype=np.int64)
    row: F32 = model.forward(ids)[-1]
    return row


def token_texts(model: Model, ids: I64) -> list[str]:
    return [repr(model.tokenizer.decode([int(i)])) for i in ids]


def next_token_explorer(model: Model, prompt: str, temperature: float = 1.0, top_k: int = 0,
                        top_p: float = 1.0, min_p: float = 0.0, n_show: int = 40) -> Any:
    """A prompt box and sliders for temperature, top-k, top-p and min-p over
    ``plot_next_token``. Returns an ``ipywidgets.VBox`` with CSS class
    ``llmnb-next-token-explorer``."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    def slider(kind: Any, value: float, lo: float, hi: float, step: float, name: str) -> Any:
        return kind(value=value, min=lo, max=hi, step=step, description=name,
                    continuous_update=False, style={"description_width": "initial"})

    box_prompt = widgets.Text(value=prompt, description="prompt", continuous_update=False,
                              layout=widgets.Layout(width="520px"))
    temp = slider(widgets.FloatSlider, temperature, 0.0, 2.0, 0.05, "temperature")
    k = slider(widgets.IntSlider, top_k, 0, 100, 1, "top-k")
    p = slider(widgets.FloatSlider, top_p, 0.05, 1.0, 0.05, "top-p")
    mp = slider(widgets.FloatSlider, min_p, 0.0, 0.5, 0.01, "min-p")
    image = widgets.Image(format="png", layout=widgets.Layout(width="860px"))
    status = widgets.HTML()
    state: dict[str, Any] = {"logits": last_logits(model, prompt)}

    def redraw(_change: object = None) -> None:
        st = filter_stages(state["logits"], float(temp.value), int(k.value), float(p.value),
                           float(mp.value))
        image.value = figure_png(plot_next_token(st, token_texts(model, st.order[:n_show]),
                                                 n_show))
        status.value = (f"after {box_prompt.value!r}: {int((st.q > 0).sum()):,} of "
                        f"{len(st.q):,} tokens can be drawn")

    def on_prompt(_change: object) -> None:
        try:
            state["logits"] = last_logits(model, box_prompt.value)
        except Exception as e:        # shown in the widget: a callback has nowhere else to say it
            status.value = f"failed: {e}"
            return
        redraw()

    box_prompt.observe(on_prompt, names="value")
    for s in (temp, k, p, mp):
        s.observe(redraw, names="value")
    redraw()
    box = widgets.VBox([box_prompt, widgets.HBox([temp, k]), widgets.HBox([p, mp]), image,
                        status])
    box.add_class(CSS_CLASS)
    return box
