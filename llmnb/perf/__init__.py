"""Performance: this machine's measured limits (``machine``; the peaks themselves in ``peaks``),
the roofline model (``roofline``), thread sweeps of AR decode and diffusion steps
(``scaling``), and ``llmnb bench``: its registry (``bench``; the names and titles, which the
command lists without importing a bench, in ``benches``), one module per bench
(``bench_WHAT``), and what the benches share: the timing (``timing``), the table printer
(``table``), a fresh interpreter per measurement (``worker``), their inputs (``inputs``: data/
and the pulled models), llama.cpp as the peer (``peer``) and the SmolLM2-as-LLaDA file
(``bench_files``)."""
