"""llmnb: CPU LLM inference, taught in notebooks and run for real on GGUF models.

The public names (see README.md): ``llmnb.gguf.open``, ``llmnb.quant.dequantize`` /
``quantize``, ``llmnb.hub.pull`` / ``path``, ``llmnb.load``, ``llmnb.generate`` with ``llmnb.Greedy`` /
``llmnb.Sampler``, ``llmnb.diffuse``, ``llmnb.perplexity``, ``llmnb.threads``, ``llmnb.source``.
"""
from llmnb import gguf, hub, quant
from llmnb.ar import Greedy, Sampler, generate, perplexity
from llmnb.diffusion import diffuse
from llmnb.errors import LLMNBError
from llmnb.model import Model, load
from llmnb.perf.threads import threads
from llmnb.source import source

__version__ = "0.1.0"
__all__ = ["Greedy", "LLMNBError", "Model", "Sampler", "diffuse", "generate", "gguf", "hub", "load",
           "perplexity", "quant", "source", "threads"]
