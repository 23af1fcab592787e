"""Tokenizers from GGUF metadata (byte-level BPE and SentencePiece) and sandboxed chat templates.

    tok = tokenizer_from_metadata(llmnb.gguf.open(path).metadata, source=str(path))
    ids = tok.encode("Hello", special=False);  text = tok.decode(ids)
    prompt = tok.render_chat([{"role": "user", "content": "Hi"}])   # then encode(special=True)
"""
from llmnb.tokenizer.build import tokenizer_from_json, tokenizer_from_metadata
from llmnb.tokenizer.chat import BUILTIN_TEMPLATES, builtin_template, render_chat
from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.pretokenizers import supported_pre_tokenizers
from llmnb.tokenizer.tokenizer import Tokenizer
from llmnb.tokenizer.vocab import SpecialIds

__all__ = ["BUILTIN_TEMPLATES", "SpecialIds", "Tokenizer", "TokenizerError", "builtin_template",
           "render_chat", "supported_pre_tokenizers", "tokenizer_from_json",
           "tokenizer_from_metadata"]
