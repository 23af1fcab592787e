"""SuperSpec speculative decoding: several drafters, one batched verification per round.

After Shen et al., "SuperSpec: Enhanced Verification and Sampling for End-to-End LLM
Speculative Decoding" (IEEE HPCC 2025), as the llm-cpu README describes it, and the
speculative sampling of Leviathan et al. (2023) and Chen et al. (2023). One round:

1. **Draft.** Every drafter j proposes up to K_j tokens after the committed sequence, each
   from its own state (``llmnb.ar.drafters``: lookup, self:N, a quantized copy).
2. **Verify, in one batched forward.** The last committed token (the *root*, not yet fed to the
   target) and every branch go through the target together, as rows of one matrix:

       row 0                     root          at position L      (L = target cache length)
       rows o_j .. o_j + K_j - 1 branch j      at positions L+1 .. L+K_j

   Every row sees the cached prefix 0..L-1 and the root; a row of branch j also sees the
   earlier rows of branch j and nothing of the other branches (a (T, L+T) attention mask).
   Each layer is then one matrix-matrix product over all T = 1 + sum K_j rows (``verify``).
   Row 0's logits give the target's distribution for the first token of every branch; the
   row of branch j's token i gives it for token i+1.
3. **Accept** (``accept_greedy`` / ``accept_sampled``). Greedy: branch j keeps the prefix of
   its draft equal to the target's argmax at every step; the *global-optimal* choice commits
   the longest such prefix over all drafters, plus the target's own next token after it (so
   a round commits at least one token and the output is exactly greedy decoding of the
   target). Sampling: recursive rejection sampling level by level over the branches still
   agreeing with what was committed: accept a candidate x with probability min(1, p(x)/q(x)),
   otherwise replace p by the normalised residual max(0, p - q) and try the next candidate;
   when none is left, draw from p. The committed tokens are distributed exactly as the
   target's sampler would have drawn them. (Exactly, in the arithmetic's sense: a row of the
   batch sums its products in another order than a decode step's matrix-vector product, so
   logits agree to float32 rounding, ~1e-6 here; a top-2 tie closer than that could go either
   way, as it could between any two batch sizes.)
4. **Roll back.** The target's cache holds all T rows; the accepted branch's rows move next to
   the root (``KVCache.move``) and the rest is cut (``KVCache.truncate``). A drafter rewinds
   its own cache to the prefix it shares with the committed sequence on its next round.

**Bubble controller** (adaptive K). A *bubble* is a drafted row the target computed and threw
away. Per drafter, and per kind of draft (``Draft.tag``: a lookup's match length), the
controller keeps exponentially weighted counts (factor 0.8) of draft tokens tried and
accepted, starting from 2 * prior hits in two tries (``Draft.prior``: 0.5 unless the drafter
knows better); alpha = hits / tries is the recent per-token acceptance rate. A verified branch
with a of its n tokens accepted adds a hits and a + [a < n] tries; an unverified draft adds
its first token's outcome against the committed token.

Without costs (``gate=False``), each drafter's K follows the bubble rule after every round it
was verified in, with b = n - a its bubble:

    b == 0 and n >= K_j:  K_j <- min(k_max, K_j + ceil(K_j / 2))      (grow by half)
    b > 0:                K_j <- max(1, K_j - ceil(b / 2))            (give back half the bubble)

With costs (``gate=True``, the default). On a CPU a verify batch is not free: a product over a
few rows runs far below the speed of the matrix-vector product of a decode step (notebook 10
draws the curve). ``VerifyCosts`` predicts c(T), the seconds of a batch of T rows, as t_1 times
a prior shape in decode steps, one shape per regime of ``llmnb.model.blocks.linear``:

    T <= FEW_ROWS (one matrix-vector product per row):  1 + 0.45 (T - 1)
    T >  FEW_ROWS (a matrix-matrix product):            2.7 + 0.1 T

(priors for SmolLM2-135M at 1 thread), each regime scaled by the
measured/predicted ratio of its recent batches (exponential average, factor 0.7); t_1 is the
measured time of a plain step. Costs belong to the machine, the model and the thread count, not
to a prompt, so they are kept per (model file, threads) for the process: a second call starts
with what the first one measured. A draft of K tokens at acceptance alpha yields E(K) = 1 +
alpha + ... + alpha^K tokens (its accepted prefix and the target's own token):

- a model drafter is asked for K_j = argmax_K E(K) / (c(1 + K) + K d_j), d_j its measured
  seconds per drafted token; when no K beats plain steps (1 / t_1) it sits out (K_j = 0) and
  probes with K_j = 1 after 16 rounds, then after 32, 64, ... while it keeps failing;
- a free drafter (lookup) is asked for k_max tokens, trimmed to argmax_K E(K) / c(1 + K) at the
  alpha of its draft's tag (0 tokens if no K beats plain steps);
- the gate: the round is verified iff max_j E_j * t_1 >= c(T) over the trimmed drafts (T = 1 +
  their total), otherwise it is a plain decode step.

Until t_1 is known the rounds are plain steps (model drafters are not asked). Controller and
gate change only speed, never the tokens: any K and any gate decision give exactly greedy
decoding, and each round samples exactly from the target.
"""
from __future__ import annotations

import codecs
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import SupportsIndex

import numexpr
import numpy as np
import numpy.typing as npt

from llmnb.ar.drafters import Draft, Drafter, make_drafter
from llmnb.ar.engine import GenerationStats, _hold_back
from llmnb.ar.kv_cache import KVCache
from llmnb.ar.sampling import Greedy, Sampler
from llmnb.errors import UsageError
from llmnb.model.blocks import FEW_ROWS
from llmnb.model.config import ModelError
from llmnb.model.model import Model
from llmnb.model.transformer import Transformer

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
K_LIMIT = 64          # the largest K a drafter may be given (per round, per drafter)


# --- the batch layout and the verifier ---------------------------------------------------

def branch_layout(length: int,
                  branches: Sequence[Sequence[int]]) -> tuple[I64, npt.NDArray[np.bool_], list[int]]:
    """Positions (T,), attention mask (T, length + T) and each branch's first row, for the
    root at position `length` followed by the branches (see the module docstring)."""
    offsets: list[int] = []
    t = 1
    for b in branches:
        offsets.append(t)
        t += len(b)
    positions: I64 = np.full(t, length, dtype=np.int64)
    mask = np.zeros((t, length + t), dtype=np.bool_)
    mask[:, :length + 1] = True                          # the cached prefix and the root
    for o, b in zip(offsets, branches):
        n = len(b)
        positions[o:o + n] = np.arange(length + 1, length + 1 + n)
        rows = np.arange(n)
        # row o+i sees branch slots o..o+i: a lower triangle in the branch's own block
        mask[o:o + n, length + o:length + o + n] = rows[None, :] <= rows[:, None]
    return positions, mask, offsets


def verify(transformer: Transformer, cache: KVCache, root: int,
           branches: Sequence[Sequence[int]]) -> tuple[F32, list[int]]:
    """One batched target forward over the root and every branch: logits (T, vocab) and each
    branch's first row. The cache keeps all T rows (committed) until ``rollback``."""
    length = cache.length
    if all(len(b) == 0 for b in branches):               # a plain decode step (vector path)
        logits = transformer.forward(np.array([root], dtype=np.int64), start=length,
                                     cache=cache, last_only=True)
        cache.commit()
        return logits, [1] * len(branches)
    ids: I64 = np.array([root] + [tok for b in branches for tok in b], dtype=np.int64)
    positions, mask, offsets = branch_layout(length, branches)
    h = transformer.hidden(ids, start=length, cache=cache, causal=False, key_mask=mask,
                           positions=positions)            # (T, d), one GEMM per weight
    cache.commit()
    return transformer.logits(h), offsets


def rollback(cache: KVCache, root_slot: int, offset: int, accepted: int) -> None:
    """Keep the root and the first `accepted` rows of the branch starting at row `offset`;
    forget every other row of the verify batch."""
    if accepted > 0 and offset != 1:
        cache.move(root_slot + offset, root_slot + 1, accepted)
    cache.truncate(root_slot + 1 + accepted)


# --- acceptance ----------------------------------------------------------------------------

def accept_greedy(top: Sequence[int], branches: Sequence[Sequence[int]],
                  offsets: Sequence[int]) -> tuple[list[int], int, list[int]]:
    """Greedy verification from the argmax of every row: (accepted length per branch, the
    branch committed (-1 if none), the committed tokens = its accepted prefix + the target's
    next token). Ties between branches go to the lower index."""
    accepted: list[int] = []
    for b, o in zip(branches, offsets):
        a, row = 0, 0
        while a < len(b) and b[a] == top[row]:
            row = o + a
            a += 1
        accepted.append(a)
    best = max(accepted, default=0)
    if best == 0:
        return accepted, -1, [int(top[0])]
    j = accepted.index(best)
    return accepted, j, [int(x) for x in branches[j][:best]] + [int(top[offsets[j] + best - 1])]


def accept_sampled(logits: F32, drafts: Sequence[Draft], offsets: Sequence[int],
                   sampler: Sampler, rng: np.random.Generator) -> tuple[list[int], int, list[int]]:
    """Recursive rejection sampling over the branches (module docstring, step 3); returns
    what ``accept_greedy`` returns. Exact for independent drafts, each drawn from its q (a
    draft without q is deterministic: q is one-hot on its token)."""
    accepted = [0] * len(drafts)
    alive = [j for j in range(len(drafts)) if len(drafts[j]) > 0]
    committed: list[int] = []
    row, level, chosen = 0, 0, -1
    while True:
        p = sampler.probs(logits[row])                       # (V,) the target's distribution
        hit = -1
        for j in [j for j in alive if len(drafts[j]) > level]:
            x = drafts[j].tokens[level]
            q = drafts[j].q
            qx = 1.0 if q is None else float(q[level, x])
            if rng.random() * qx < p[x]:                     # accept with prob min(1, p/q)
                hit = j
                break
            residual = p.copy()
            if q is None:
                residual[x] = 0.0                            # max(0, p - onehot(x))
            else:
                residual = np.maximum(p - q[level], 0.0)
            total = float(residual.sum())
            if total > 0.0:                                  # 0 only if p == q up to rounding
                p = residual / total
        if hit < 0:                                          # nothing accepted: draw from p
            committed.append(int(rng.choice(p.shape[0], p=p)))
            return accepted, chosen, committed
        x = drafts[hit].tokens[level]
        committed.append(x)
        alive = [j for j in alive if len(drafts[j]) > level and drafts[j].tokens[level] == x]
        for j in alive:
            accepted[j] = level + 1
        chosen = alive[0]
        row = offsets[chosen] + level
        level += 1


def accept(logits: F32, drafts: Sequence[Draft], offsets: Sequence[int],
           sampler: Sampler) -> tuple[list[int], int, list[int]]:
    """``accept_greedy`` for a greedy sampler, else ``accept_sampled`` (with its rng)."""
    if sampler.greedy:
        top = [int(x) for x in np.argmax(logits, axis=1)]
        return accept_greedy(top, [d.tokens for d in drafts], offsets)
    return accept_sampled(logits, drafts, offsets, sampler, sampler.rng)


# --- the controller ------------------------------------------------------------------------

class VerifyCosts:
    """Seconds of a plain decode step (t_1) and of a verify batch of T rows, as measured on
    this machine for one model and thread count (module docstring: the prior shape per regime,
    scaled by measurements)."""

    def __init__(self, few_rows: int = FEW_ROWS, smooth: float = 0.7) -> None:
        self.few_rows = few_rows
        self.smooth = smooth
        self.t_step = 0.0                 # seconds of a plain decode step (average); 0 = unknown
        self.scale = [1.0, 1.0]           # measured / prior, per regime (few rows, matrix)
        self.batches = 0                  # verify batches measured

    def prior(self, rows: int) -> float:
        """c(T) / t_1 before any batch was measured."""
        if rows <= 1:
            return 1.0
        if rows <= self.few_rows:
            return 1.0 + 0.45 * (rows - 1)
        return 2.7 + 0.1 * rows

    def regime(self, rows: int) -> int:
        return 0 if rows <= self.few_rows else 1

    def time_step(self, seconds: float) -> None:
        self.t_step = seconds if self.t_step == 0.0 else 0.7 * self.t_step + 0.3 * seconds

    def time_verify(self, rows: int, seconds: float) -> None:
        if self.t_step == 0.0 or rows < 2:
            return
        r = self.regime(rows)
        ratio = seconds / (self.t_step * self.prior(rows))
        if self.batches == 0:             # the first batch sets the level of both regimes
            self.scale = [ratio, ratio]
        else:
            self.scale[r] = self.smooth * self.scale[r] + (1.0 - self.smooth) * ratio
        self.batches += 1

    def predict(self, rows: int) -> float:
        """Predicted seconds of a batch of `rows` rows, never less than a plain step
        (0 while t_1 is unknown)."""
        if rows <= 1:
            return self.t_step
        return max(self.t_step, self.t_step * self.prior(rows) * self.scale[self.regime(rows)])


_COSTS: dict[tuple[str, int], VerifyCosts] = {}


def costs_for(model: Model) -> VerifyCosts:
    """The process's verify costs for `model` at the current thread count (numexpr's setting,
    which ``llmnb.threads`` keeps equal to BLAS's)."""
    key = (str(model.path), int(numexpr.get_num_threads()))
    if key not in _COSTS:
        _COSTS[key] = VerifyCosts()
    return _COSTS[key]


class BubbleController:
    """Per-drafter K, draft trimming and the verify-or-step gate, from bubbles and measured
    costs (module docstring). ``gate=False``: the bubble rule alone, every draft verified."""

    def __init__(self, free: Sequence[bool], k: int, k_max: int, adaptive: bool = True,
                 gate: bool = True, decay: float = 0.8, probe_every: int = 16,
                 costs: VerifyCosts | None = None) -> None:
        n = len(free)
        self.free = list(free)            # drafters whose proposals cost no forward pass
        self.k = [k] * n
        self.k_max = k_max
        self.adaptive = adaptive
        self.gate = gate
        self.decay = decay
        self.probe_every = probe_every
        self.hits: dict[tuple[int, int], float] = {}    # (drafter, draft tag) -> weighted hits
        self.tries: dict[tuple[int, int], float] = {}   # ... and weighted tokens tried
        self.draft_s = [0.0] * n          # seconds per drafted token (EMA)
        self.paused = [0] * n             # rounds a costly drafter has sat out (K = 0) ...
        self.probe_gap = [probe_every] * n  # ... and how many it sits out before a probe
        self.costs = costs if costs is not None else VerifyCosts()
        self.k_used = [k] * n             # K per drafter in the last plan (a free drafter's trim)

    # -- what was measured --------------------------------------------------------------
    def alpha(self, j: int, tag: int = 0, prior: float = 0.5) -> float:
        """Drafter j's recent per-token acceptance rate for drafts tagged `tag` (the counts
        start at 2 * prior hits in two tries; the draft says its prior)."""
        key = (j, tag)
        return self.hits.get(key, 2.0 * prior) / self.tries.get(key, 2.0)

    def _score(self, j: int, d: Draft, hits: int, tries: int) -> None:
        key = (j, d.tag)
        self.hits[key] = self.decay * self.hits.get(key, 2.0 * d.prior) + hits
        self.tries[key] = self.decay * self.tries.get(key, 2.0) + tries

    def time_draft(self, j: int, tokens: int, seconds: float) -> None:
        if tokens > 0:
            s = seconds / tokens
            self.draft_s[j] = s if self.draft_s[j] == 0.0 else 0.7 * self.draft_s[j] + 0.3 * s

    def time_step(self, seconds: float) -> None:
        self.costs.time_step(seconds)

    def time_verify(self, rows: int, seconds: float) -> None:
        self.costs.time_verify(rows, seconds)

    @property
    def t_step(self) -> float:
        return self.costs.t_step

    def verify_cost(self, rows: int) -> float:
        """Predicted seconds of a verify batch of `rows` rows (``VerifyCosts.predict``)."""
        return self.costs.predict(rows)

    @property
    def costed(self) -> bool:
        """Gate on, and a plain step's time known?"""
        return self.gate and self.costs.t_step > 0.0

    # -- decisions ----------------------------------------------------------------------
    @staticmethod
    def expected_tokens(alpha: float, k: int) -> float:
        """Tokens a round commits with a draft of k at per-token acceptance alpha:
        1 + alpha + ... + alpha^k (the accepted prefix and the target's own token)."""
        al = min(alpha, 0.999)
        return (1.0 - al ** (k + 1)) / (1.0 - al)

    def best_k(self, alpha: float, k_max: int, per_draft: float) -> int:
        """argmax_K expected tokens / (c(1 + K) + K * per_draft) over 1..k_max, or 0 when
        no K beats plain decode steps."""
        al = min(alpha, 0.999)
        best, best_rate, power = 0, 1.0 / self.t_step, al
        for kk in range(1, k_max + 1):
            power *= al                                  # al^(kk+1)
            cost = self.costs.predict(1 + kk) + kk * per_draft
            rate = (1.0 - power) / (1.0 - al) / cost
            if rate > best_rate:
                best, best_rate = kk, rate
        return best

    def draft_length(self, j: int) -> int:
        """How many tokens to ask drafter j for: its K, or k_max for a free drafter once
        costs are known (its draft is trimmed by ``plan``); none from a costly drafter while
        the gate still has to time a plain step (that round is a plain step anyway)."""
        if self.free[j]:
            return self.k_max if self.costed else self.k[j]
        return 0 if self.gate and not self.costed else self.k[j]

    def plan(self, drafts: Sequence[Draft]) -> list[int]:
        """How many of each draft's tokens to verify; all zero = a plain decode step."""
        lengths = [len(d) for d in drafts]
        self.k_used = [self.k[j] if not self.free[j] or not self.costed else 0
                       for j in range(len(drafts))]
        if not self.gate or sum(lengths) == 0:
            return lengths
        if not self.costed:                       # time a plain step first
            return [0] * len(drafts)
        # trim each draft to its best length (drafting is paid for already), then the gate
        lengths = [self.best_k(self.alpha(j, d.tag, d.prior), len(d), 0.0)
                   for j, d in enumerate(drafts)]
        for j, n in enumerate(lengths):
            if self.free[j]:
                self.k_used[j] = n
        rows = 1 + sum(lengths)
        best = max(self.expected_tokens(self.alpha(j, d.tag, d.prior), n)
                   for j, (d, n) in enumerate(zip(drafts, lengths)))
        if rows > 1 and best * self.t_step >= self.verify_cost(rows):
            return lengths
        return [0] * len(drafts)

    def after_round(self, drafts: Sequence[Draft], plan: Sequence[int], accepted: Sequence[int],
                    token: int) -> None:
        """Score the drafts (a verified branch: its bubble; an unverified draft: its first
        token against the committed `token`), then set every drafter's next K."""
        for j, d in enumerate(drafts):
            n = plan[j]
            if n > 0:
                a = accepted[j]
                self._score(j, d, a, a + (1 if a < n else 0))
                if self.adaptive and not self.costed:     # the bubble rule
                    bubble = n - a
                    if bubble == 0 and n >= self.k[j]:
                        self.k[j] = min(self.k_max, self.k[j] + (self.k[j] + 1) // 2)
                    elif bubble > 0:
                        self.k[j] = max(1, self.k[j] - (bubble + 1) // 2)
            elif len(d) > 0:
                self._score(j, d, 1 if d.tokens[0] == token else 0, 1)
        if not (self.adaptive and self.costed):
            return
        for j in range(len(self.k)):
            if self.free[j]:
                continue                                  # drafts k_max, trimmed by plan
            kk = self.best_k(self.alpha(j), self.k_max, self.draft_s[j])
            if kk > 0:
                self.paused[j], self.probe_gap[j] = 0, self.probe_every
            else:                                         # cannot pay: sit out, then probe
                self.paused[j] += 1
                if self.paused[j] >= self.probe_gap[j]:   # a probe of one token, and twice
                    kk = 1                                # as long a rest if it fails again
                    self.paused[j], self.probe_gap[j] = 0, 2 * self.probe_gap[j]
            self.k[j] = kk


# --- metrics and result ----------------------------------------------------------------------

@dataclass
class SpecRound:
    """One round: what each drafter was asked for, proposed and got accepted."""
    k: list[int]                  # the controller's K per drafter (a free drafter: its trim)
    drafted: list[int]            # tokens each drafter proposed (a lookup may find none)
    proposed: list[int]           # of those, verified by the target (0: not this round)
    accepted: list[int]           # of those, accepted by the target
    chosen: int                   # the drafter whose branch was committed (-1: none)
    committed: int                # tokens committed this round (accepted + the target's own)
    rows: int                     # rows of the target's batch (1 = a plain decode step)
    draft_s: float
    verify_s: float


@dataclass
class SpeculativeResult:
    prompt_ids: list[int]
    tokens: list[int]             # new tokens only (an end-of-generation token included)
    text: str
    stop_reason: str
    stats: GenerationStats
    drafters: list[str]
    rounds: list[SpecRound] = field(default_factory=list)

    @property
    def target_forwards(self) -> int:
        """Target forward passes after the prompt (one per round)."""
        return len(self.rounds)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.tokens) / len(self.rounds) if self.rounds else 0.0

    def acceptance(self) -> dict[str, float]:
        """Per drafter: accepted / proposed tokens over the verified rounds."""
        out: dict[str, float] = {}
        for j, name in enumerate(self.drafters):
            prop = sum(r.proposed[j] for r in self.rounds if r.rows > 1)
            acc = sum(r.accepted[j] for r in self.rounds if r.rows > 1)
            out[name] = acc / prop if prop else 0.0
        return out

    def spec_json(self) -> dict[str, object]:
        return {"drafters": self.drafters, "rounds": len(self.rounds),
                "verified_rounds": sum(1 for r in self.rounds if r.rows > 1),
                "tokens_per_forward": self.tokens_per_forward, "acceptance": self.acceptance(),
                "k": [r.k for r in self.rounds], "committed": [r.committed for r in self.rounds],
                "draft_s": sum(r.draft_s for r in self.rounds),
                "verify_s": sum(r.verify_s for r in self.rounds)}


class _TextOut:
    """Committed tokens -> text, stop checks and streaming, token by token exactly as
    ``llmnb.generate`` does them (so both stop at the same token with the same text)."""

    def __init__(self, model: Model, prompt_len: int, max_new_tokens: int, capacity: int,
                 stop: Sequence[str], on_text: Callable[[str], None] | None) -> None:
        self.tok = model.tokenizer
        self.eog = set(self.tok.eog_ids)
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.prompt_len = prompt_len
        self.max_new_tokens = max_new_tokens
        self.capacity = capacity
        self.stop = stop
        self.on_text = on_text
        self.tokens: list[int] = []
        self.text = ""
        self.emitted = 0
        self.stop_reason = ""

    def push(self, token: int) -> bool:
        """Take one committed token; True when generation stops with it."""
        self.tokens.append(token)
        if token in self.eog:
            self.stop_reason = "eos"
            return True
        self.text += self.utf8.decode(self.tok.token_bytes(token))
        hit = min((i for i in (self.text.find(s, max(0, self.emitted - len(s))) for s in self.stop)
                   if i >= 0), default=-1)
        if hit >= 0:
            self.text = self.text[:hit]
            self.stop_reason = "stop_string"
        elif len(self.tokens) >= self.max_new_tokens:
            self.stop_reason = "max_tokens"
        elif self.prompt_len + len(self.tokens) - 1 >= self.capacity:   # the plain cache is full
            self.stop_reason = "context_full"
        stopped = self.stop_reason != ""
        if stopped and hit < 0:
            self.text += self.utf8.decode(b"", final=True)
        safe = len(self.text) if stopped else len(self.text) - _hold_back(self.text, self.stop)
        if self.on_text is not None and safe > self.emitted:
            self.on_text(self.text[self.emitted:safe])
        self.emitted = max(self.emitted, safe)
        return stopped

    def push_all(self, tokens: Sequence[int], seq: list[int]) -> bool:
        """Push a round's tokens in order, appending each to `seq`, until one stops."""
        for tok in tokens:
            seq.append(tok)
            if self.push(tok):
                return True
        return False

    def finish(self) -> None:
        if self.stop_reason == "eos":
            self.text += self.utf8.decode(b"", final=True)
        if self.on_text is not None and len(self.text) > self.emitted:
            self.on_text(self.text[self.emitted:])


# --- the generation loop ---------------------------------------------------------------------

def generate_speculative(model: Model, prompt: str | Sequence[int],
                         drafters: Sequence[Drafter | str] = ("lookup",),
                         max_new_tokens: int = 128, sampler: Sampler | None = None,
                         k: SupportsIndex = 4, k_max: SupportsIndex = 32, adaptive: bool = True,
                         gate: bool = True, chat: bool = False, system: str | None = None,
                         stop: Sequence[str] = (),
                         on_text: Callable[[str], None] | None = None,
                         costs: VerifyCosts | None = None) -> SpeculativeResult:
    """``llmnb.generate`` with speculative decoding: same arguments and the same tokens
    (greedy) or the same distribution (sampling), in fewer target forward passes.

    `drafters`: ``Drafter`` objects or names (``"lookup"``, ``"self:N"``, a model path or hub
    name). `k`: the initial draft length per drafter; `k_max`: the bubble controller's ceiling;
    `adaptive=False` keeps K fixed; `gate=False` verifies every round that has drafts.
    `costs`: the verify-cost model to use and update (default: the process's one for this
    model and thread count, ``costs_for``).
    """
    k0, kmax = operator_index(k, "k"), operator_index(k_max, "k_max")
    if not 1 <= k0 <= K_LIMIT:
        raise UsageError(f"k: expected a draft length in 1..{K_LIMIT}, got {k0}")
    if not k0 <= kmax <= K_LIMIT:
        raise UsageError(f"k_max: expected {k0}..{K_LIMIT} (at least k), got {kmax}")
    if max_new_tokens < 1:
        raise UsageError(f"max_new_tokens: expected at least 1, got {max_new_tokens}")
    c = model.config
    if not c.causal or c.shift_logits:
        raise ModelError(f"{model.path.name}: speculative decoding needs an autoregressive "
                         f"(causal) target, got arch {c.arch!r}")
    sampler = sampler if sampler is not None else Greedy()
    ds = [d if isinstance(d, Drafter) else make_drafter(d, model) for d in drafters]
    names = [d.name for d in ds]
    ids = model.check_ids(model.prompt_ids(prompt, chat, system)).tolist()
    capacity = min(len(ids) + max_new_tokens, c.n_ctx)      # as llmnb.generate's cache
    if len(ids) >= capacity:
        raise ModelError(f"prompt of {len(ids)} tokens leaves no room to generate in a "
                         f"context of {capacity} (the model's is {c.n_ctx})")
    transformer = model.transformer
    cache = KVCache(c, min(c.n_ctx, capacity + 1 + len(ds) * kmax))
    for d in ds:
        d.reset(capacity + kmax)
    rngs = [np.random.default_rng(None if sampler.seed is None else [sampler.seed, 1, j])
            for j in range(len(ds))]
    ctrl = BubbleController([d.free for d in ds], k0, kmax, adaptive, gate,
                            costs=costs if costs is not None else costs_for(model))
    out = _TextOut(model, len(ids), max_new_tokens, capacity, stop, on_text)
    stats = GenerationStats(prompt_tokens=len(ids))
    rounds: list[SpecRound] = []

    t0 = time.perf_counter()
    if len(ids) > 1:                                         # the last prompt token is the root
        transformer.forward(np.array(ids[:-1], dtype=np.int64), cache=cache, last_only=True)
        cache.commit()
    stats.prefill_s = time.perf_counter() - t0
    seq = list(ids)
    t_start = time.perf_counter()
    stopped = False
    while not stopped:
        length = cache.length                                # == len(seq) - 1
        longest = min(max_new_tokens - len(out.tokens) - 1,  # the round adds one token itself
                      c.n_ctx - 1 - length)                  # draft positions stay in context
        room = cache.capacity - length - 1                   # rows the cache can take
        t_draft = time.perf_counter()
        drafts: list[Draft] = []
        for j, d in enumerate(ds):
            kj = min(ctrl.draft_length(j), longest, room)
            t_j = time.perf_counter()
            dr = d.propose(seq, kj, sampler, rngs[j]) if kj > 0 else Draft([])
            ctrl.time_draft(j, len(dr), time.perf_counter() - t_j)
            if len(dr) > kj:
                dr = dr.cut(kj)
            room -= len(dr)
            drafts.append(dr)
        t_verify = time.perf_counter()
        plan = ctrl.plan(drafts)                          # tokens of each draft to verify
        branches = [dr.cut(n) for dr, n in zip(drafts, plan)]
        logits, offsets = verify(transformer, cache, seq[-1], [b.tokens for b in branches])
        accepted, chosen, committed = accept(logits, branches, offsets, sampler)
        t_end = time.perf_counter()
        rollback(cache, length, offsets[chosen] if chosen >= 0 else 1, len(committed) - 1)
        if len(logits) > 1:
            ctrl.time_verify(len(logits), t_end - t_verify)
        else:
            ctrl.time_step(t_end - t_verify)
        ctrl.after_round(drafts, plan, accepted, committed[0])
        rounds.append(SpecRound(list(ctrl.k_used), [len(dr) for dr in drafts], plan, accepted,
                                chosen, len(committed), len(logits), t_verify - t_draft,
                                t_end - t_verify))
        stopped = out.push_all(committed, seq)
    stats.decode_s = time.perf_counter() - t_start
    out.finish()
    stats.new_tokens = len(out.tokens)
    return SpeculativeResult(ids, out.tokens, out.text, out.stop_reason, stats, names, rounds)


def operator_index(value: SupportsIndex, name: str) -> int:
    """`value` as an int, or a UsageError naming the argument."""
    try:
        return operator.index(value)
    except TypeError:
        raise UsageError(f"{name}: expected a whole number, got {value!r}") from None
