"""Working buffers, allocated once and reused: the forward pass's (llama2.c's ``RunState``) and
the float kernels' dense products' (``llmnb.kernels.product``).

A decode step runs the same shapes every token and a diffusion step the same canvas every
step, so the activations passed between the blocks (the normed rows, the fused q/k/v, the
attention output, the gate/up product, the SwiGLU output, each projection's result) go into
buffers a ``Transformer`` keeps rather than into fresh arrays. Each buffer is one flat float32
array per name, grown when a pass needs more than it holds, and viewed at the shape asked for:
the first n elements of a flat array are contiguous whatever the shape.

What a pass hands back (its hidden states, the logits) is never one of these buffers: a caller
may keep it while the next pass runs. A pass's buffers are reused by the next pass of the same
model, so a model runs one pass at a time.
"""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


class Scratch:
    """Named float32 buffers, reused from one forward pass to the next."""

    def __init__(self) -> None:
        self._flat: dict[str, F32] = {}

    def take(self, name: str, rows: int, cols: int, exact: bool = False) -> F32:
        """A (rows, cols) float32 buffer under `name`: the same memory as the last pass's,
        unless it held fewer elements (then a new one, at least twice the old, so a growing
        shape -- the keys of a decode step -- reallocates a logarithmic number of times; with
        `exact` just the size asked for, for a buffer whose size has a cap of its own)."""
        n = rows * cols
        flat = self._flat.get(name)
        if flat is None or flat.size < n:
            grown = n if exact or flat is None else max(n, 2 * flat.size)
            flat = np.empty(grown, dtype=np.float32)
            self._flat[name] = flat
        out: F32 = flat[:n].reshape(rows, cols)
        return out

    @property
    def nbytes(self) -> int:
        """The bytes every buffer holds."""
        return sum(int(f.nbytes) for f in self._flat.values())
