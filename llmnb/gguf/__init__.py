"""GGUF files: a hardened memory-mapped reader (``open``), constants, and writing helpers."""
from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGMLType, type_name
from llmnb.gguf.reader import GGUFError, GGUFFile, MetadataField, TensorInfo, open_gguf

open = open_gguf  # the public name: llmnb.gguf.open(path)

__all__ = ["GGML_BLOCK_SIZES", "GGMLType", "GGUFError", "GGUFFile", "MetadataField",
           "TensorInfo", "open", "open_gguf", "type_name"]
