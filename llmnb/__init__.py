"""llmnb: CPU LLM inference, taught in notebooks and run for real on GGUF models.

The public names (see README.md): ``llmnb.gguf.open``, ``llmnb.quant.dequantize`` /
``quantize``, ``llmnb.hub.pull`` / ``path``, ``llmnb.load``, ``llmnb.generate`` with
``llmnb.Greedy`` / ``llmnb.Sampler``, ``llmnb.diffuse``, ``llmnb.perplexity``, ``llmnb.threads``,
``llmnb.source``.

Using llmnb changes the process (README.md says what and why), each setting only
where the environment has none: importing it sets ``OPENBLAS_THREAD_TIMEOUT`` (below), and
the first quantized product sets numba's cache directory, threading layer and, on AVX-512
CPUs, its target CPU (``llmnb.kernels.jit``). Set the variables first to keep your own.
``LLMNB_THREADS=n`` starts BLAS, numexpr and numba on n threads (``llmnb.perf.threads``).
"""
import os

# OpenBLAS's idle threads spin for 2^28 cycles (about 0.1 s) after each call before they
# sleep; on a machine with as many cores as threads they then starve the numba kernels that
# run between BLAS calls (a quantized prefill at 2 threads, and the first decode steps after
# it, then run slower than at 1 thread). 2^4 cycles: they sleep at once. Set before numpy
# loads OpenBLAS (a value already in the environment wins).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from llmnb import gguf, hub, quant
from llmnb.ar import Greedy, Sampler, generate, perplexity
from llmnb.diffusion import diffuse
from llmnb.errors import LLMNBError
from llmnb.model import Model, load
from llmnb.perf.threads import start_from_environment, threads
from llmnb.source import source

start_from_environment()          # $LLMNB_THREADS, if set: every pool's count (README.md)

__version__ = "0.1.0"
__all__ = ["Greedy", "LLMNBError", "Model", "Sampler", "diffuse", "generate", "gguf", "hub", "load",
           "perplexity", "quant", "source", "threads"]
