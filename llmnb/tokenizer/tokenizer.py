"""The llmnb ``Tokenizer``: text <-> token ids, backed by a Hugging Face ``tokenizers.Tokenizer``.

The builders (``build.py``) turn GGUF metadata or a ``tokenizer.json`` into the Rust tokenizer;
this class adds what an engine needs on top: the special ids (BOS/EOS/EOT/PAD/UNK/mask), whether
the model wants a BOS, the chat template, and llama.cpp's two tokenize modes:

- ``special=False``: control tokens written as text (``<|im_start|>``) are ordinary text, as
  ``llama-tokenize --no-parse-special`` does. User-defined tokens are still matched.
- ``special=True``: control tokens written as text become their ids (llama-tokenize's default
  in current llama.cpp; older versions spelled it ``--parse-special``).
"""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import SupportsIndex

import tokenizers

from llmnb.errors import UsageError
from llmnb.tokenizer.byte_bpe import byte_bpe_token_bytes
from llmnb.tokenizer.chat import builtin_template, render_chat
from llmnb.tokenizer.errors import TokenizerError
from llmnb.tokenizer.sentencepiece import sentencepiece_token_bytes
from llmnb.tokenizer.vocab import SpecialIds
from llmnb.tokenizer.wordpiece import wordpiece_token_bytes


class Tokenizer:
    """Encode and decode text for one model; see the module docstring for the two modes."""

    def __init__(self, hf: tokenizers.Tokenizer, tokens: Sequence[str], special: SpecialIds, *,
                 kind: str, pre: str, add_bos: bool = False, add_eos: bool = False,
                 add_sep: bool = False, add_space_prefix: bool = False,
                 dropped_id: int | None = None, chat_template: str | None = None,
                 source: str = "<memory>") -> None:
        self.hf = hf                    # the Rust tokenizer (exposed for inspection)
        self.tokens = list(tokens)      # id -> token text as stored in the file
        self.kind = kind                # tokenizer.ggml.model: "gpt2" (byte-level BPE), "llama"
                                        # (SentencePiece BPE), "gemma4", "bert" (WordPiece)
        self.pre = pre                  # pre-tokenizer name ("smollm", "qwen2", ...)
        self.bos_id = special.bos
        self.eos_id = special.eos
        self.eot_id = special.eot
        self.pad_id = special.pad
        self.unk_id = special.unk
        self.mask_id = special.mask
        self.sep_id = special.sep
        self.add_bos = add_bos          # the model expects BOS at the start of a prompt
        self.add_eos = add_eos
        self.add_sep = add_sep          # WordPiece: [SEP] closes the text
        self.add_space_prefix = add_space_prefix   # SentencePiece: '▁' before the text
        self.chat_template = chat_template
        self.source = source
        self._added_ids: set[int] | None = None
        self._dropped_id = dropped_id    # an id the Rust side emits that llama.cpp drops

    # -- sizes and ids ------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def eog_ids(self) -> list[int]:
        """End-of-generation ids: EOS and EOT (generation stops on any of them)."""
        out: list[int] = []
        for i in (self.eos_id, self.eot_id):
            if i is not None and i not in out:
                out.append(i)
        return out

    def token_text(self, token_id: SupportsIndex) -> str:
        """The token's text as stored in the vocabulary (byte-level BPE shows 'Ġ' for a space)."""
        tid = operator.index(token_id)
        if not 0 <= tid < len(self.tokens):
            raise TokenizerError(self.source, "token id",
                                 f"0 <= id < {len(self.tokens)}, got {tid}")
        return self.tokens[tid]

    def token_bytes(self, token_id: SupportsIndex) -> bytes:
        """The bytes token ``token_id`` stands for in text (b' hi' for 'Ġhi' or '▁hi').
        A token may be part of a UTF-8 character: stream output by feeding these bytes
        to an incremental UTF-8 decoder."""
        tid = operator.index(token_id)
        text = self.token_text(tid)
        if self._added_ids is None:
            self._added_ids = {int(i) for i in self.hf.get_added_tokens_decoder()}
        if tid in self._added_ids:
            return text.encode("utf-8")
        if self.kind == "gpt2":
            return byte_bpe_token_bytes(text)
        if self.kind in ("llama", "gemma4"):
            return sentencepiece_token_bytes(text)
        if self.kind == "bert":
            return wordpiece_token_bytes(text)
        return self.decode([tid]).encode("utf-8")

    # -- text <-> ids -------------------------------------------------------------------
    def encode(self, text: str, special: bool = False, add_special: bool = False) -> list[int]:
        """Token ids of ``text``. ``special``: parse control-token text into ids
        (``--parse-special``). ``add_special``: add BOS/EOS as the model's ``add_bos``/``add_eos``
        ask (llama.cpp's ``add_special``); the default adds nothing."""
        if not text.isascii():
            _refuse_lone_surrogates(text)
        # encode_special_tokens=True makes the Rust side treat special added tokens as text.
        self.hf.encode_special_tokens = not special
        ids: list[int] = self.hf.encode(text, add_special_tokens=False).ids
        if self._dropped_id is not None:
            ids = [i for i in ids if i != self._dropped_id]
        if add_special:
            if self.add_bos and self.bos_id is not None:
                ids.insert(0, self.bos_id)
            if self.add_eos and self.eos_id is not None:
                ids.append(self.eos_id)
            if self.add_sep and self.sep_id is not None:
                ids.append(self.sep_id)
        return ids

    def decode(self, ids: Iterable[SupportsIndex]) -> str:
        """The text of ``ids`` (special tokens rendered as their text; invalid UTF-8 as U+FFFD).
        Any integers do, numpy's included."""
        plain = [operator.index(i) for i in ids]
        for i in plain:
            if not 0 <= i < len(self.tokens):
                raise TokenizerError(self.source, "token id",
                                     f"0 <= id < {len(self.tokens)}, got {i}")
        if self.kind in ("gpt2", "bert"):
            # the pieces' bytes joined, as llama.cpp detokenizes: byte-level BPE's decoder would
            # read a user-defined token's text ('ö') as byte-alphabet characters, and
            # WordPiece's Hugging Face keys are not the file's pieces
            joined = b"".join(self.token_bytes(i) for i in plain).decode("utf-8", "replace")
            if self.kind == "bert" and joined.startswith(" "):
                joined = joined[1:]     # the space that opens the first word (as BERT does)
            return joined
        text: str = self.hf.decode(plain, skip_special_tokens=False)
        return text

    # -- chat ---------------------------------------------------------------------------
    def render_chat(self, messages: Sequence[Mapping[str, object]],
                    add_generation_prompt: bool = True, template: str | None = None) -> str:
        """Render ``messages`` with the file's chat template (or ``template``: Jinja text or a
        built-in name such as ``"chatml"``); encode the result with ``special=True``."""
        if template is None:
            template = self.chat_template
        if template is None:
            raise TokenizerError(self.source, "tokenizer.chat_template",
                                 "a chat template in the file, or pass template=NAME "
                                 "(chatml, llama3, llada, dream)")
        if "{" not in template:
            template = builtin_template(template)
        bos = self.tokens[self.bos_id] if self.bos_id is not None else ""
        eos = self.tokens[self.eos_id] if self.eos_id is not None else ""
        return render_chat(template, messages, add_generation_prompt,
                           bos_token=bos, eos_token=eos, source=self.source)

    def __repr__(self) -> str:
        return (f"Tokenizer(kind={self.kind!r}, pre={self.pre!r}, vocab_size={self.vocab_size}, "
                f"bos={self.bos_id}, eos={self.eos_id}, eot={self.eot_id}, add_bos={self.add_bos})")


def _refuse_lone_surrogates(text: str) -> None:
    """Text to encode must be Unicode text: a lone surrogate (U+D800..U+DFFF) is what bytes
    that were not UTF-8 become when decoded with ``surrogateescape`` (as Python decodes command
    lines and file names) or what a JSON ``\\udcff`` escape gives; the tokenizer cannot
    encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UsageError(
            f"text to encode: expected Unicode text; character {e.start} is a lone surrogate "
            f"U+{ord(text[e.start]):04X} (bytes that were not UTF-8, decoded with "
            f"surrogateescape?)") from None
