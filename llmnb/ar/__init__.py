"""Autoregressive generation: KV cache, samplers, the prefill/decode engine, perplexity."""
from llmnb.ar.engine import GenerationResult, GenerationStats, Generator, generate
from llmnb.ar.errors import GenerationError
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.kv_eviction import EvictingKVCache
from llmnb.ar.perplexity import PerplexityResult, perplexity
from llmnb.ar.sampling import Greedy, Sampler
from llmnb.ar.speculative import SpeculativeResult, generate_speculative
from llmnb.softmax import softmax

__all__ = ["EvictingKVCache", "GenerationError", "GenerationResult", "GenerationStats", "Generator",
           "Greedy", "KVCache", "PerplexityResult", "Sampler", "SpeculativeResult", "generate",
           "generate_speculative", "perplexity", "softmax"]
