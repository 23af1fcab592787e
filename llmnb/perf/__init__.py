"""Performance: this machine's measured limits (``machine``), the roofline model
(``roofline``), thread sweeps of AR decode and diffusion steps (``scaling``), and the
benchmark runner behind ``llmnb bench`` (``bench`` and its ``bench_*`` modules)."""
