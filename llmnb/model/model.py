"""``llmnb.load``: a model file opened, its hyper-parameters read and its tokenizer built.

A ``Model`` holds the memory-mapped ``GGUFFile``, the ``ModelConfig``, the ``Tokenizer`` and,
from its first forward pass on, the ``Weights``: quantized blocks repacked for
``llmnb.kernels``, or float32 copies (a memory preflight at load decides their residency
and refuses a model that cannot fit, before anything is dequantized). The tokenizer comes from
the file's own metadata, or, for files without one (diffuse-cpp's convention), from a
``tokenizer.json`` given by argument or lying beside the file.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from llmnb.errors import UsageError
from llmnb.gguf.reader import GGUFFile, open_gguf
from llmnb.hub import resolve
from llmnb.kernels.threads import from_environment
from llmnb.model.config import ModelConfig, ModelError, config_from_gguf
from llmnb.model.transformer import Transformer
from llmnb.model.weights import WEIGHTS, ResidencyPlan, Weights, default_weights, plan_residency
from llmnb.tokenizer import Tokenizer, tokenizer_from_json, tokenizer_from_metadata


class Model:
    """An opened model: ``.path``, ``.file``, ``.metadata``, ``.arch``, ``.config``,
    ``.tokenizer``."""

    def __init__(self, path: Path, file: GGUFFile, config: ModelConfig, tokenizer: Tokenizer,
                 plan: ResidencyPlan) -> None:
        self.path = path
        self.file = file
        self.config = config
        self.tokenizer = tokenizer
        self.plan = plan
        self._transformer: Transformer | None = None

    @property
    def transformer(self) -> Transformer:
        """The forward pass over this model's weights (dequantized on first use)."""
        if self._transformer is None:
            weights = Weights(self.file, self.config, self.plan.residency, self.plan.weights)
            self._transformer = Transformer(self.config, weights)
        return self._transformer

    def check_ids(self, ids: object) -> npt.NDArray[np.int64]:
        """`ids` as an int64 array, refused unless every id is in the vocabulary."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        if arr.size == 0:
            raise ModelError(f"{self.path.name}: expected at least one token id")
        if int(arr.min()) < 0 or int(arr.max()) >= self.config.vocab_size:
            raise ModelError(f"{self.path.name}: token ids must be in "
                             f"0..{self.config.vocab_size - 1}, got {int(arr.min())}.."
                             f"{int(arr.max())}")
        return arr

    def prompt_ids(self, prompt: str | Sequence[int], chat: bool = False,
                   system: str | None = None) -> list[int]:
        """Token ids for a prompt: text (through the chat template with `chat`, see
        ``chat_ids``), with BOS when the model asks for it, or ids as given."""
        tok = self.tokenizer
        if not isinstance(prompt, str):
            if chat:
                raise UsageError("chat=True needs a text prompt, not token ids")
            ids = [int(i) for i in prompt]
            if ids:
                self.check_ids(ids)   # an id outside the vocabulary: ModelError, not IndexError
            return ids
        if chat:
            messages = ([{"role": "system", "content": system}] if system is not None else [])
            messages.append({"role": "user", "content": prompt})
            return self.chat_ids(tok.render_chat(messages))
        if system is not None:
            raise UsageError("system= applies only with chat=True")
        return tok.encode(prompt, special=False, add_special=True)

    def chat_ids(self, rendered: str) -> list[int]:
        """A rendered chat as llama.cpp tokenizes it: special-token text parsed, and BOS/EOS
        added as the model asks (``add_special``), after dropping a BOS (EOS) text the template
        itself wrote at the start (end), so a template with ``{{ bos_token }}`` gets one BOS
        and one without gets the model's (``common_chat_templates_apply``)."""
        tok = self.tokenizer
        if tok.add_bos and tok.bos_id is not None:
            bos = tok.token_text(tok.bos_id)
            if rendered.startswith(bos):
                rendered = rendered[len(bos):]
        if tok.add_eos and tok.eos_id is not None:
            eos = tok.token_text(tok.eos_id)
            if rendered.endswith(eos):
                rendered = rendered[:len(rendered) - len(eos)]
        return tok.encode(rendered, special=True, add_special=True)

    def forward(self, ids: object, causal: bool | None = None,
                key_mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.float32]:
        """Logits (n, vocab) for a whole sequence of ids, no cache (causal or bidirectional
        per the config unless `causal` says otherwise)."""
        arr = self.check_ids(ids)
        if len(arr) > self.config.n_ctx:
            raise ModelError(f"{self.path.name}: {len(arr)} tokens exceed the context of "
                             f"{self.config.n_ctx}")
        return self.transformer.forward(arr, causal=causal, key_mask=key_mask)

    @property
    def arch(self) -> str:
        return self.config.arch

    @property
    def metadata(self) -> dict[str, object]:
        return self.file.metadata

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({self.path.name!r}, arch={c.arch!r}, layers={c.n_layer}, d={c.n_embd}, "
                f"heads={c.n_head}/{c.n_head_kv}, vocab={c.vocab_size})")


def load_tokenizer(f: GGUFFile, tokenizer_json: str | os.PathLike[str] | None = None) -> Tokenizer:
    """The file's embedded tokenizer, else `tokenizer_json`, else a tokenizer.json beside it."""
    if tokenizer_json is not None:
        return tokenizer_from_json(tokenizer_json)
    if "tokenizer.ggml.tokens" in f.fields:
        return tokenizer_from_metadata(f.metadata, f.path)
    beside = Path(f.path).with_name("tokenizer.json")
    if beside.is_file():
        return tokenizer_from_json(beside)
    raise ModelError(f"{f.path}: no tokenizer in the file (tokenizer.ggml.tokens) and no "
                     f"tokenizer.json beside it: pass tokenizer=PATH")


def load(model: str | os.PathLike[str], tokenizer: str | os.PathLike[str] | None = None,
         residency: str = "auto", weights: str = "auto") -> Model:
    """Open a model by path or hub name (``llmnb.load``).

    `weights`: "quantized" (keep the GGUF blocks, multiplied by ``llmnb.kernels``: integer
    products where the CPU has them), "quantized-float" (the blocks, through the
    float-activation kernels), "f32"
    (dequantize to float32: the reference path) or "auto" (quantized for block-quantized
    causal models, f32 for float files and for diffusion models that fit:
    ``weights.default_weights``). `residency`, for f32 weights:
    "resident" (in memory), "streaming" (dequantize each layer when used) or "auto"
    (resident if it fits). A model that does not fit is refused here, and so is a bad
    ``$LLMNB_THREADS`` (importing llmnb reads it as unset, ``llmnb.kernels.threads``).
    """
    from_environment()
    if weights != "auto" and weights not in WEIGHTS:
        raise UsageError(f"weights: expected one of {', '.join(WEIGHTS)} or 'auto', "
                         f"got {weights!r}")
    path = resolve(os.fspath(model))
    f = open_gguf(path)
    config = config_from_gguf(f)
    kv_bytes = config.kv_bytes(min(config.n_ctx, 2048))
    plan = plan_residency(f, config, kv_bytes, residency,
                          default_weights(f, config, kv_bytes) if weights == "auto" else weights)
    return Model(path, f, config, load_tokenizer(f, tokenizer), plan)
