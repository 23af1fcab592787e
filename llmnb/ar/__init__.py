"""Autoregressive generation: KV cache, samplers, the prefill/decode engine, perplexity."""
from llmnb.ar.engine import GenerationResult, GenerationStats, Generator, generate
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.perplexity import PerplexityResult, perplexity
from llmnb.ar.sampling import Greedy, Sampler, softmax

__all__ = ["GenerationResult", "GenerationStats", "Generator", "Greedy", "KVCache", "PerplexityResult", "Sampler",
           "generate", "perplexity", "softmax"]
