"""The denoising rules by value on hand-made logits: each remasking rule's confidence and order
of commitment, entropy against its definition, and the commit rules of the schedulers."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

from llmnb.diffusion.remasking import propose

F32 = npt.NDArray[np.float32]


def softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


# Five masked positions, six tokens. Written so that every rule ranks them differently.
LOGITS: F32 = np.array([
    [6.0, 5.9, 0.0, 0.0, 0.0, 0.0],       # highest raw logit, but a near tie: tiny margin
    [2.0, -4.0, -4.0, -4.0, -4.0, -4.0],  # low logit, nearly certain: best probability
    [4.0, 1.0, 1.0, 1.0, 1.0, 1.0],       # middling everything
    [3.0, 0.0, 0.0, 0.0, 0.0, -30.0],     # the -30 entry has p < 1e-10
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.5],       # flat: the least certain by every measure
], dtype=np.float32)
POSITIONS = np.array([10, 11, 12, 13, 14], dtype=np.int64)


def test_confidence_at_temperature_comes_from_the_tempered_distribution() -> None:
    # diffuse-cpp (low_confidence) and Dream (maskgit_plus) take p(sampled) from
    # softmax(logits / T), the distribution the token was drawn from; LLaDA's probability
    # rule keeps the untempered softmax (as LLaDA and Fast-dLLM compute it)
    t = 0.5
    for rule, scale in (("low_confidence", t), ("maskgit_plus", t), ("probability", 1.0)):
        c = propose(LOGITS, POSITIONS, rule, t, np.random.default_rng(3))
        p = softmax(LOGITS.astype(np.float64) / scale)
        np.testing.assert_allclose(c.confidence, p[np.arange(5), c.tokens], rtol=1e-12)
    # Dream's entropy rule: minus the entropy of the tempered distribution
    c = propose(LOGITS, POSITIONS, "entropy", t, np.random.default_rng(3))
    p = softmax(LOGITS.astype(np.float64) / t)
    h = -(p * np.log(np.where(p > 1e-10, p, 1.0))).sum(axis=1)
    np.testing.assert_allclose(c.confidence, -h, rtol=1e-5, atol=1e-6)     # float32 softmax
