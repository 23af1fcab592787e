"""Models: configuration from GGUF metadata, loading (forward passes build on this)."""
from llmnb.model.config import ModelConfig, ModelError, config_from_gguf
from llmnb.model.model import Model, load, load_tokenizer

__all__ = ["Model", "ModelConfig", "ModelError", "config_from_gguf", "load", "load_tokenizer"]
