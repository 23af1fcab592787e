"""Which masked positions to commit: candidate tokens, their confidence, the order.

For every masked position the model proposes a token (argmax at temperature 0, else a
sample from softmax(logits / T) drawn LLaDA's way: argmax of exp(logits) / (-log u)^T in
float64) and a confidence. The step then commits the most confident positions first.

Confidence by ``remasking`` rule (larger = commit sooner):

| rule             | confidence at T = 0        | at T > 0                     | from        |
|------------------|----------------------------|------------------------------|-------------|
| `low_confidence` | raw top-1 logit            | p(sampled), softmax(l / T)   | diffuse-cpp |
| `probability`    | softmax p of the argmax    | p(sampled), softmax(l)       | LLaDA       |
| `maskgit_plus`   | softmax p of the argmax    | p(sampled), softmax(l / T)   | Dream       |
| `topk_margin`    | top-1 minus top-2 logit    | the same margin              | diffuse-cpp |
| `entropy`        | minus entropy, softmax(l)  | minus that of softmax(l / T) | Dream       |
| `random`         | uniform noise from the seeded generator                   | LLaDA       |

At T > 0 diffuse-cpp and Dream read the confidence off the distribution the token was drawn
from (softmax(l / T)); LLaDA and Fast-dLLM keep the untempered softmax, and so does the
`probability` rule that reproduces them. diffuse-cpp aliases maskgit_plus to its raw-logit
rule and turns topk_margin into p(sampled) at T > 0; llmnb follows Dream for the first and
always computes a margin for the second (dividing by T would not change the order). Ties
are broken by position, ascending (a stable sort; diffuse-cpp's std::sort leaves it open).
``Candidates.entropy`` is always taken from the raw logits (float32 softmax, natural log,
terms with p <= 1e-10 skipped), as diffuse-cpp's entropy_exit does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmnb.errors import UsageError
from llmnb.softmax import entropy, softmax

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
REMASKING = ("low_confidence", "probability", "maskgit_plus", "topk_margin", "entropy", "random")


@dataclass
class Candidates:
    """Proposals for masked positions, in ascending position order."""

    positions: I64          # (m,) canvas positions
    tokens: I64             # (m,) proposed token per position
    confidence: F64         # (m,) larger = more certain (per the remasking rule)
    probability: F64        # (m,) p(token) under softmax(raw logits), float64 (LLaDA's)
    logits: F32             # (m, V) the raw rows they were proposed from
    known_entropy: F64 | None = None    # the rows' entropy, once a rule has asked for it

    @property
    def entropy(self) -> F64:
        """(m,) nats, from the raw logits; computed when first asked for (only entropy_exit
        and the ``entropy`` rule read it, and it costs as much as the probabilities)."""
        if self.known_entropy is None:
            self.known_entropy = entropy(self.logits)
        return self.known_entropy


def propose(logits: F32, positions: I64, remasking: str, temperature: float,
            rng: np.random.Generator) -> Candidates:
    """Tokens and confidences for the masked `positions`, given their logits rows (m, V)."""
    if remasking not in REMASKING:
        raise UsageError(f"remasking: expected one of {', '.join(REMASKING)}, got {remasking!r}")
    m = logits.shape[0]
    rows = np.arange(m)
    z = logits.astype(np.float64)                                    # (m, V)
    z -= z.max(axis=1, keepdims=True)                                # per row: no overflow
    if temperature > 0.0:
        # exact categorical sampling of softmax(logits / T), in float64 (LLaDA, arXiv 2409.02908)
        u = rng.random(logits.shape)
        gumbel = (-np.log(u)) ** temperature
        tokens = np.argmax(np.exp(z) / gumbel, axis=1)
    else:
        tokens = np.argmax(logits, axis=1)                           # ties: lowest id
    top = z[rows, tokens]                                            # before exp overwrites z
    prob = np.exp(top) / np.exp(z, out=z).sum(axis=1)        # softmax(logits)[rows, tokens]
    ent: F64 | None = None
    conf: F64
    if remasking == "low_confidence" and temperature <= 0.0:
        conf = logits[rows, tokens].astype(np.float64)
    elif remasking in ("low_confidence", "maskgit_plus") and temperature > 0.0:
        conf = softmax(logits, temperature)[rows, tokens]            # tempered
    elif remasking in ("probability", "maskgit_plus"):
        conf = prob
    elif remasking == "topk_margin":
        top2 = np.partition(logits, -2, axis=1)[:, -2:].astype(np.float64)   # (m, 2) ascending
        conf = top2[:, 1] - top2[:, 0]
    elif remasking == "entropy":
        ent = entropy(logits)
        conf = -ent if temperature <= 0.0 else -entropy(logits, temperature)
    else:  # random
        conf = np.asarray(rng.random(size=(m,)), dtype=np.float64)
    return Candidates(positions, tokens.astype(np.int64), conf.astype(np.float64), prob, logits,
                      ent)


def order(c: Candidates) -> I64:
    """Indices into `c`, most confident first; ties by position ascending."""
    out: I64 = np.lexsort((c.positions, -c.confidence)).astype(np.int64)
    return out
