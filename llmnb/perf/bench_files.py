"""Not a bench: the file the diffusion benches run, SmolLM2-135M relabelled as a ``llada``
model (``bench diffusion``, ``bench scaling`` and notebooks 08, 15 and 17 make it).

It writes through gguf-py (``llmnb.gguf.writer``), which the build does not compile against,
so it lives under this name: setup.py leaves ``llmnb/perf/bench*`` interpreted.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from llmnb.gguf.constants import BOOL, UINT32
from llmnb.gguf.reader import MetadataField, open_gguf
from llmnb.gguf.writer import TensorToWrite, write_gguf

MASK_ID = 4  # a control token of SmolLM2's vocabulary (unused in its chat format) as the mask


def llada_copy(src: Path, dst: Path) -> None:
    """SmolLM2's GGUF rewritten as arch `llada`: the same tensors (quantized bytes copied),
    keys under `llada.`, attention marked bidirectional, a mask token id."""
    f = open_gguf(src)
    fields = [MetadataField("llada." + k[len("llama."):] if k.startswith("llama.") else k,
                            v.value_type, v.value, v.item_type) for k, v in f.fields.items()]
    fields += [MetadataField("llada.attention.causal", BOOL, False),
               MetadataField("tokenizer.ggml.mask_token_id", UINT32, MASK_ID)]
    tensors = [TensorToWrite(n, np.asarray(f.raw(n)), t.ggml_type, t.shape)
               for n, t in f.tensors.items()]
    write_gguf(dst, "llada", fields, tensors)
