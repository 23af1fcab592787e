"""Attention maps, drawn: what each head of each layer looks at, with the tokens as labels.

``attention_maps`` runs one forward pass through ``Transformer.hidden`` with a store that
keeps nothing and watches (``AttentionObserver``: the transformer hands it each layer's
softmax weights as it computes them), so the maps are the package's own numbers, not a
second attention. ``plot_attention`` draws one (layer, head) map; ``attention_explorer``
wraps it in layer and head sliders and a prompt box. The notebook calls the plain
functions, so what nbval runs is what the sliders run.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from llmnb.model.model import Model
from llmnb.widgets.roofline import figure_png

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
CSS_CLASS = "llmnb-attention-explorer"


class AttentionRecorder:
    """A KV store for one pass without a cache: each layer sees only the pass's own keys,
    and its attention weights (n_kv, group, T, S) are kept per layer."""

    def __init__(self) -> None:
        self.probs: dict[int, F32] = {}

    def update(self, layer: int, k: F32, v: F32) -> tuple[F32, F32]:
        return k, v

    def observe_attention(self, layer: int, probs: F32) -> None:
        self.probs[layer] = probs


def attention_maps(model: Model, ids: I64 | list[int], causal: bool | None = None) -> F32:
    """Every head's attention weights over `ids`, (n_layer, n_head, T, T): entry [l, h, t, s]
    is how much query t of head h in layer l attends to key s (rows sum to 1). Causal per the
    model's config unless `causal` says otherwise."""
    tokens = np.asarray(ids, dtype=np.int64)                        # (T,)
    rec = AttentionRecorder()
    model.transformer.hidden(tokens, cache=rec, causal=causal)
    c = model.config
    t = len(tokens)
    # (n_kv, group, T, S) -> (n_head, T, S): query head h uses K/V head h // group
    return np.stack([rec.probs[i].reshape(c.n_head, t, t) for i in range(c.n_layer)])


def token_labels(model: Model, ids: I64 | list[int]) -> list[str]:
    """One printable label per token (its decoded text, whitespace shown)."""
    out = []
    for i in np.asarray(ids, dtype=np.int64):
        text = model.tokenizer.decode([int(i)])
        out.append(text.replace("\n", "\\n").replace(" ", "·") or f"<{int(i)}>")
    return out


def head_summary(maps: F32, layer: int, head: int) -> tuple[float, float, float]:
    """Mean weight on the first token, the previous token and itself, over queries 2..: there
    the three are different keys, so the shares add up to at most 1 (for query 1 the previous
    token is the first). A sequence of fewer than 3 tokens uses the queries it has."""
    p = maps[layer, head]                                           # (T, T)
    t = p.shape[0]
    q = np.arange(min(2, t - 1), t)
    return (float(p[q, 0].mean()), float(p[q, np.maximum(q - 1, 0)].mean()),
            float(p[q, q].mean()))


def plot_attention(maps: F32, layer: int, head: int, labels: list[str],
                   ax: Axes | None = None, causal: bool = True) -> Figure:
    """One head's map: rows = queries, columns = keys, the masked future left blank."""
    if ax is None:
        side = 2.2 + 0.32 * len(labels)
        fig = Figure(figsize=(side + 1.0, side), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.get_figure()                                     # type: ignore[assignment]
    p = maps[layer, head]                                           # (T, T)
    t = p.shape[0]
    shown = np.where(np.tril(np.ones((t, t), dtype=bool)), p, np.nan) if causal else p
    im = ax.imshow(shown, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(t), labels, rotation=90, fontsize=8)
    ax.set_yticks(range(t), labels, fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    first, prev, own = head_summary(maps, layer, head)
    ax.set_title(f"layer {layer}, head {head}: first token {first:.0%}, previous {prev:.0%}, "
                 f"itself {own:.0%}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02, label="attention weight")
    return fig


def attention_explorer(model: Model, text: str, layer: int = 0, head: int = 0,
                       add_special: bool = True) -> Any:
    """Layer and head sliders (and a prompt box) over ``plot_attention`` for `model` on
    `text`. Returns an ``ipywidgets.VBox`` with CSS class ``llmnb-attention-explorer``."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    c = model.config
    causal = c.causal
    prompt = widgets.Text(value=text, description="prompt", continuous_update=False,
                          layout=widgets.Layout(width="520px"))
    l_slider = widgets.IntSlider(value=layer, min=0, max=c.n_layer - 1, description="layer",
                                 continuous_update=False)
    h_slider = widgets.IntSlider(value=head, min=0, max=c.n_head - 1, description="head",
                                 continuous_update=False)
    image = widgets.Image(format="png", layout=widgets.Layout(width="560px"))
    status = widgets.HTML()
    state: dict[str, Any] = {}

    def recompute() -> None:
        ids = model.tokenizer.encode(prompt.value, add_special=add_special)
        state["maps"] = attention_maps(model, ids)
        state["labels"] = token_labels(model, ids)

    def redraw(_change: object = None) -> None:
        maps, labels = state["maps"], state["labels"]
        layer_i, head_i = int(l_slider.value), int(h_slider.value)
        image.value = figure_png(plot_attention(maps, layer_i, head_i, labels, causal=causal))
        top = int(np.argmax(maps[layer_i, head_i, -1]))
        status.value = (f"{len(labels)} tokens; the last query attends most to "
                        f"<b>{labels[top]}</b> (position {top}, "
                        f"{maps[layer_i, head_i, -1, top]:.0%})")

    def on_prompt(_change: object) -> None:
        try:
            recompute()
        except Exception as e:        # shown in the widget: a callback has nowhere else to say it
            status.value = f"failed: {e}"
            return
        redraw()

    prompt.observe(on_prompt, names="value")
    for s in (l_slider, h_slider):
        s.observe(redraw, names="value")
    recompute()
    redraw()
    box = widgets.VBox([prompt, widgets.HBox([l_slider, h_slider]), image, status])
    box.add_class(CSS_CLASS)
    return box
