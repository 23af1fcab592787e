"""ipywidgets front ends for the notebooks (the core never imports this package).

Each widget has a plain-function form that draws the same picture without a browser:

- ``roofline_explorer`` (sliders: B, bytes per weight, threads) over ``plot_roofline``;
- ``scaling_runner`` (a button and a progress bar) over ``run_scaling`` and ``plot_scaling``.
"""
from llmnb.widgets.roofline import figure_png, plot_roofline, roofline_explorer
from llmnb.widgets.scaling import plot_scaling, run_scaling, scaling_runner

__all__ = ["figure_png", "plot_roofline", "plot_scaling", "roofline_explorer", "run_scaling",
           "scaling_runner"]
