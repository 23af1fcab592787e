"""llmnb: CPU LLM inference, taught in notebooks and run for real on GGUF models."""
from llmnb import gguf
from llmnb.errors import LLMNBError

__version__ = "0.1.0"
__all__ = ["LLMNBError", "gguf"]
