"""The byte-level BPE tokenizer of llmnb's tiny models, and its GGUF ``tokenizer.*`` fields.

Trained with ``tokenizers`` on the seeded corpus of ``tiny_corpus.py``. Ids 0-3 are the special
tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<|mask|>`` (ChatML; EOS = EOT =
``<|im_end|>``; ``<|mask|>`` is the diffusion models' mask), then the 256 byte tokens, then merges.
The tokenizer in use pre-tokenizes with GPT-2's regex (``tokenizer.ggml.pre = "gpt-2"``, which
llmnb and llama.cpp both implement); during training only, digits are split one by one as well,
so no merge ever joins digits and every number is spelled digit by digit (arithmetic stays
learnable for a tiny model).

    python tools/tiny_tokenizer.py     # train, write data/models/tiny-tokenizer.json, print stats
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tiny_corpus import chatml, training_examples

from llmnb.gguf.constants import ARRAY, INT32, STRING, UINT32, BOOL
from llmnb.gguf.reader import MetadataField

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_PATH = REPO / "data" / "models" / "tiny-tokenizer.json"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
ENDOFTEXT, IM_START, IM_END, MASK = range(4)
# A cap the corpus does not reach: every pair seen twice is merged, so how a word splits depends
# on whether the corpus has it, not on how often (tiny_corpus.py's token-exact answers rely on it).
VOCAB_SIZE = 3072
CORPUS_SIZE = 20000

# Plain ChatML, no default system prompt (llmnb's built-in "chatml" is the same text).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def corpus_texts(n: int = CORPUS_SIZE) -> list[str]:
    """The training corpus as rendered chat text (prompt + answer + end of turn)."""
    return [chatml(e.prompt, e.system) + e.answer + "<|im_end|>\n" for e in training_examples(n)]


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Any:
    """Train byte-level BPE; return the tokenizer as used (GPT-2 regex pre-tokenizer only)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),   # training only: no digit merges
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer)
    # The tokenizer as shipped: GPT-2's regex alone (what tokenizer.ggml.pre = "gpt-2" means).
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def vocab_and_merges(tok: Any) -> tuple[list[str], list[str]]:
    """Token strings by id and merges as "a b" strings, from the trained tokenizer's JSON."""
    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    return tokens, merges


def gguf_tokenizer_fields(tok: Any) -> list[MetadataField]:
    """The ``tokenizer.*`` GGUF keys for this vocabulary (llama.cpp's names and types)."""
    tokens, merges = vocab_and_merges(tok)
    types = np.ones(len(tokens), np.int32)
    types[:len(SPECIAL)] = 3                                   # CONTROL
    return [
        MetadataField("tokenizer.ggml.model", STRING, "gpt2"),
        MetadataField("tokenizer.ggml.pre", STRING, "gpt-2"),   # llama.cpp's spelling
        MetadataField("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
        MetadataField("tokenizer.ggml.token_type", ARRAY, types, INT32),
        MetadataField("tokenizer.ggml.merges", ARRAY, merges, STRING),
        MetadataField("tokenizer.ggml.bos_token_id", UINT32, ENDOFTEXT),
        MetadataField("tokenizer.ggml.eos_token_id", UINT32, IM_END),
        MetadataField("tokenizer.ggml.eot_token_id", UINT32, IM_END),
        MetadataField("tokenizer.ggml.padding_token_id", UINT32, ENDOFTEXT),
        MetadataField("tokenizer.ggml.mask_token_id", UINT32, MASK),
        MetadataField("tokenizer.ggml.add_bos_token", BOOL, False),
        MetadataField("tokenizer.chat_template", STRING, CHAT_TEMPLATE),
    ]


def load_tokenizer(path: Path = TOKENIZER_PATH) -> Any:
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=TOKENIZER_PATH)
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = ap.parse_args(argv)
    texts = corpus_texts()
    tok = train_tokenizer(texts, args.vocab_size)
    for i, s in enumerate(SPECIAL):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"special token {s!r} got id {tok.token_to_id(s)}, expected {i}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out))
    lengths = [len(tok.encode(t).ids) for t in texts]
    print(f"wrote {args.out}: vocab {tok.get_vocab_size()}, corpus {len(texts)} texts, "
          f"tokens per text mean {np.mean(lengths):.1f} max {max(lengths)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
