"""Plots, explorer and trace export: see every schedule, simulated or real (matplotlib, ipywidgets)."""

from .explorer import animate, animation_html, explorer, metrics_html, render
from .export import to_chrome_trace
from .memory import draw_memory, live_activations, peak
from .sweeps import bubble_vs_microbatches, efficiency_vs_imbalance, interleaved_vs_not
from .timeline import KIND_COLORS, Timeline, draw_comparison, draw_timeline

__all__ = ["KIND_COLORS", "Timeline", "animate", "animation_html", "bubble_vs_microbatches", "draw_comparison",
           "draw_memory", "draw_timeline", "efficiency_vs_imbalance", "explorer", "interleaved_vs_not",
           "live_activations", "metrics_html", "peak", "render", "to_chrome_trace"]
