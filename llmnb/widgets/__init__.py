"""ipywidgets front ends for the notebooks (the core never imports this package).

Each widget has a plain-function form that draws the same picture without a browser:

- ``roofline_explorer`` (sliders: B, bytes per weight, threads) over ``plot_roofline``;
- ``scaling_runner`` (a button and a progress bar) over ``run_scaling`` and ``plot_scaling``;
- ``attention_explorer`` (a prompt, layer and head sliders) over ``attention_maps`` and
  ``plot_attention``;
- ``next_token_explorer`` (a prompt, temperature / top-k / top-p / min-p sliders) over
  ``filter_stages`` and ``plot_next_token``;
- ``canvas_viewer`` (a step slider over one or more diffusion runs) over ``canvas_run``,
  ``plot_canvas`` and ``canvas_html``.
"""
from llmnb.widgets.attention import attention_explorer, attention_maps, plot_attention
from llmnb.widgets.canvas import (
    canvas_html, canvas_run, canvas_viewer, commit_steps, plot_canvas, step_entropies,
)
from llmnb.widgets.roofline import figure_png, plot_roofline, roofline_explorer
from llmnb.widgets.sampling import filter_stages, next_token_explorer, plot_next_token
from llmnb.widgets.scaling import plot_scaling, run_scaling, scaling_runner

__all__ = ["attention_explorer", "attention_maps", "canvas_html", "canvas_run", "canvas_viewer",
           "commit_steps", "figure_png", "filter_stages", "next_token_explorer",
           "plot_attention", "plot_canvas", "plot_next_token", "plot_roofline", "plot_scaling",
           "roofline_explorer", "run_scaling", "scaling_runner", "step_entropies"]
