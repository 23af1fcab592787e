"""What speculative decoding's work costs on this machine: a verify batch, a model drafter's step.

The draft-length controller (``llmnb.ar.speculative_control``) weighs what a round would commit
against what it would cost; both costs are measured here, and belong to the machine, the model
and the thread count, not to a prompt, so the process keeps one record of each per (model file,
threads) and a second generation starts with what the first one measured.

**Verify batches** (``VerifyCosts``). A round that verifies T rows costs c(T) seconds; a plain
decode step costs t_1. c(T) = t_1 * s(T), with s(T) in decode steps given at knots
T = 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64 and interpolated linearly between them (a straight
line through the last two beyond). s starts from a measured prior (``PRIOR_STEPS``); the first
verify batch rescales the whole curve to this machine. A later batch of T rows is read as two
things: the machine's state now (the other work on its cores and its memory bus slows a batch of
any size alike), so the whole curve moves by a share LEVEL_RATE of its error, as a ratio; and
the shape of the curve at T, so the two knots around T then move towards what it measured (a
least-mean-squares step of rate 0.1). A knot the controller stopped using thus follows the
level of the ones it uses, instead of keeping what it measured in a busier or a quieter minute:
a stale knot would make its length look cheaper or dearer than the ones measured since, and the
controller, never verifying that length again, would never learn otherwise. t_1 is an average
of measured plain steps. On a CPU c(T) is well above t_1 even for two rows (``python -m
llmnb.perf.bench_spec --paths`` measures the curve, notebook 10 draws it). The process's records
(``costs_for``) pass over their first plain step and their first batch: the first pass of its
kind in a process loads numba's compiled code, or compiles it on a cold cache (seconds), and a
curve scaled by that would make every batch look dear, so that a generation would never verify
again to learn otherwise.

**A model drafter** (``DrafterCosts``) pays d seconds per drafted token and, for its catch-up
(the tokens committed since it last ran, fed through its model in one batch), b seconds per
token after the first; both are averages of its timed calls. The record also keeps what the
controller decided about it -- its last K, whether it sits out and when it is probed next -- so
a drafter that cannot pay stays out across generations instead of being timed and probed
again by each one. The records live in the target's ``VerifyCosts`` (the decisions in them depend on
its curve), one per drafter model.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numexpr

from llmnb.errors import UsageError
from llmnb.model.model import Model

KNOTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
LEVEL_RATE = 0.3      # the share of a batch's error, as a ratio, that moves the whole curve
# c(T) / t_1 at the knots before a batch is measured (the first one rescales the curve to this
# machine), one per layout of the weights: `python -m llmnb.perf.bench_spec --threads 1
# --paths P` on SmolLM2-135M (150 cached tokens, median of 5) with P as named on each
PRIOR_STEPS = (1.0, 1.45, 1.79, 2.10, 2.74, 3.50, 3.85, 4.19, 5.2, 6.2, 8.0, 9.8)  # X@W
PRIOR_STEPS_WIDE = (1.0, 1.11, 1.64, 1.57, 2.15, 1.87, 2.36, 3.00, 4.11, 5.24, 7.00,
                    10.3)                                                          # tiles
PRIOR_STEPS_QUANTIZED = (1.0, 2.32, 2.98, 3.56, 5.06, 6.15, 8.47, 12.0, 15.9, 20.5, 15.5,
                         18.3)                                               # quantized-float
PRIOR_STEPS_QUANTIZED_WIDE = (1.0, 2.32, 2.98, 3.56, 5.06, 4.69, 5.51, 5.45, 7.22, 7.91, 9.89,
                              11.4)                                # quantized-float+W@X.T
# the integer products (`--paths quantized`, as above, median of 9)
PRIOR_STEPS_INTEGER = (1.0, 1.12, 1.37, 1.31, 1.86, 2.10, 3.04, 3.81, 5.42, 6.99, 10.17,
                       13.87)                                                     # quantized


class VerifyCosts:
    """Seconds of a plain decode step (t_1) and of a verify batch of T rows on this machine,
    for one model and thread count (module docstring)."""

    def __init__(self, steps: Sequence[float] = PRIOR_STEPS, rate: float = 0.1,
                 level_rate: float = LEVEL_RATE, skip_first: bool = False) -> None:
        if len(steps) != len(KNOTS):
            raise UsageError(f"VerifyCosts: expected {len(KNOTS)} steps, one per knot {KNOTS}, "
                             f"got {len(steps)}")
        self.steps = [float(s) for s in steps]     # c(T) / t_1 at each knot
        self.rate = rate                  # the shape's: the two knots around T
        self.level_rate = level_rate      # the level's: every knot, as a ratio
        self.t_step = 0.0                 # seconds of a plain decode step (average); 0 = unknown
        self.batches = 0                  # verify batches measured
        self.drafters: dict[str, DrafterCosts] = {}   # model drafters used with this target
        # the first plain step and the first batch not yet passed over (``skip_first``)
        self.unseen: set[str] = {"step", "batch"} if skip_first else set()

    def _weights(self, rows: int) -> tuple[int, float]:
        """The knot interval [i, i + 1] of `rows` and its weight on knot i + 1 (> 1 beyond
        the last knot: the line through the last two)."""
        i = 0
        while i < len(KNOTS) - 2 and KNOTS[i + 1] < rows:
            i += 1
        return i, (rows - KNOTS[i]) / (KNOTS[i + 1] - KNOTS[i])

    def steps_at(self, rows: int) -> float:
        """c(rows) / t_1, never below one step."""
        return 1.0 if rows <= 1 else max(1.0, self._curve(rows))

    def _curve(self, rows: int) -> float:
        """The curve at `rows` as learnt, below one step too (where a batch beats the plain
        step's path: learning from the clipped value would push the knots down forever)."""
        i, w = self._weights(rows)
        return (1.0 - w) * self.steps[i] + w * self.steps[i + 1]

    def predict(self, rows: int) -> float:
        """Predicted seconds of a batch of `rows` rows (0 while t_1 is unknown)."""
        return self.t_step * self.steps_at(rows)

    def time_step(self, seconds: float) -> None:
        if "step" in self.unseen:
            self.unseen.discard("step")
            return
        self.t_step = seconds if self.t_step == 0.0 else 0.7 * self.t_step + 0.3 * seconds

    def time_verify(self, rows: int, seconds: float) -> None:
        if self.t_step == 0.0 or rows < 2:
            return
        if "batch" in self.unseen:
            self.unseen.discard("batch")
            return
        measured = seconds / self.t_step
        # the level: the first batch sets it, every later one moves it by a share of its error
        share = 1.0 if self.batches == 0 else self.level_rate
        scale = (measured / max(self._curve(rows), 1e-6)) ** share
        self.steps = [1.0] + [s * scale for s in self.steps[1:]]
        if self.batches > 0:              # the shape: least mean squares on the knots around T
            i, w = self._weights(rows)
            w = min(w, 1.0)
            err = measured - self._curve(rows)
            if i > 0:                     # knot 0 (one row) is a plain step by definition
                self.steps[i] += self.rate * (1.0 - w) * err
            self.steps[i + 1] += self.rate * w * err
        self.batches += 1

    def drafter(self, key: str) -> DrafterCosts:
        """The record of the drafter model `key` (``Drafter.cost_key``) against this target
        and thread count, kept for later generations; a fresh one, not kept, for an empty key."""
        if not key:
            return DrafterCosts()
        if key not in self.drafters:
            self.drafters[key] = DrafterCosts()
        return self.drafters[key]

    def calibrate(self, seconds_for: Callable[[int], float]) -> None:
        """Measure the curve directly: `seconds_for(T)` times a batch of T rows (T = 1 is a
        plain step), at every knot."""
        t1 = seconds_for(1)
        self.t_step = t1
        self.steps = [1.0] + [max(1.0, seconds_for(t) / t1) for t in KNOTS[1:]]
        self.batches = max(self.batches, 1)


_COSTS: dict[tuple[str, int, bool], VerifyCosts] = {}


def costs_for(model: Model) -> VerifyCosts:
    """The process's verify costs for `model` at the current thread count (numexpr's setting,
    which ``llmnb.threads`` keeps equal to BLAS's), for its weights (float32 with or without the
    batch copies, ``Transformer.use_batch_copies``, quantized with or without: four curves)."""
    w = model.transformer.weights
    # "f32", "quantized-float", or "quantized": the integer products (on a CPU without them,
    # quantized weights run the float kernels)
    weights = "quantized-float" if w.kind == "quantized" and w.integer_isa is None else w.kind
    copies = bool(model.transformer.copies_held)
    key = (f"{model.path} {weights}", int(numexpr.get_num_threads()), copies)
    if key not in _COSTS:
        priors = {("f32", False): PRIOR_STEPS, ("f32", True): PRIOR_STEPS_WIDE,
                  ("quantized-float", False): PRIOR_STEPS_QUANTIZED,
                  ("quantized-float", True): PRIOR_STEPS_QUANTIZED_WIDE,
                  ("quantized", False): PRIOR_STEPS_INTEGER,
                  ("quantized", True): PRIOR_STEPS_INTEGER}
        _COSTS[key] = VerifyCosts(priors[weights, copies], skip_first=True)
    return _COSTS[key]


class DrafterCosts:
    """A model drafter's measured costs on this machine and the controller's standing decision
    about it (module docstring), kept by the target's ``VerifyCosts.drafter``."""

    def __init__(self, probe_every: int = 16) -> None:
        self.draft_s = 0.0                # seconds per drafted token, d (EMA); 0 = unknown
        self.feed_s = 0.0                 # seconds per catch-up token after the first, b (EMA)
        self.timed = False                # a step of it was timed
        self.ran = False                  # it has drafted (in this process)
        self.k = -1                       # its K at the end of its last generation (-1: none)
        # rounds since it was last probed, or last found unable to pay (a first look is due at
        # once) ... and how many it sits out before the next look
        self.paused = probe_every
        self.probe_gap = probe_every
        # its acceptance counts per depth bucket at the end of its last generation (the
        # controller's ``hits`` and ``tries`` of its drafts), the next one's starting point
        self.hits: list[float] = []
        self.tries: list[float] = []

    def time_draft(self, tokens: int, seconds: float) -> None:
        """`tokens` draft steps (forward passes of one token) took `seconds`."""
        if tokens > 0:
            s = seconds / tokens
            self.draft_s = s if self.draft_s == 0.0 else 0.7 * self.draft_s + 0.3 * s

    def time_feed(self, tokens: int, seconds: float) -> None:
        """A catch-up fed `tokens` in one batch in `seconds`: one token is a draft step (d);
        more are d and the rest at b each."""
        self.timed = True
        if tokens == 1:
            self.time_draft(1, seconds)
        elif tokens > 1 and self.draft_s > 0.0:
            b = max(0.0, seconds - self.draft_s) / (tokens - 1)
            self.feed_s = b if self.feed_s == 0.0 else 0.7 * self.feed_s + 0.3 * b

