"""The roofline model (Williams, Waterman and Patterson 2009) for transformer inference.

A workload that does F floating-point operations while moving Q bytes has arithmetic
intensity AI = F / Q (FLOP/byte). A machine that computes at most P FLOP/s and streams at
most W bytes/s cannot run it faster than

    t = max(F / P, Q / W),          i.e. attainable FLOP/s = min(P, AI * W).

Below the ridge AI = P / W a workload is memory-bound, above it compute-bound.

The diffuse-cpp paper (seeds/diffuse-cpp-paper.tex, §2) applies this to one weight matrix
W (N x K, b bytes per weight) multiplied by B token vectors:

    eq. 2   AI = 2 N K B / ((N K + K B) b)  ~  2 B / b        (a diffusion step, B tokens)
    eq. 1   B = 1                           ~  2 / b          (AR decode, matrix @ vector)

Eq. 1 as printed has (N + K) b in the denominator, which counts only the vectors; its own
approximation 2 / b needs the N K b weight bytes, which eq. 2 at B = 1 has, so
``paper_intensity`` is eq. 2 for every B. The whole-model functions below count more
precisely: every weight matrix of every layer and the output head, activations read and
written at `act_bytes` each (llmnb computes in float32: 4), attention's score and value
products and the KV cache it reads. The embedding lookup (one row per token) is left out.
Counting every activation as memory traffic makes the byte count an upper bound: on a small
model a canvas's activations fit in cache, and its true intensity is higher (``act_bytes=0``
counts weights and KV cache only).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import SupportsIndex

from llmnb.errors import UsageError
from llmnb.model.config import ModelConfig
from llmnb.quant.formats import bits_per_weight

F32_BYTES = 4.0


@dataclass(frozen=True)
class Roof:
    """A machine's two limits: `peak_flops` (FLOP/s) and `bandwidth` (bytes/s)."""

    peak_flops: float
    bandwidth: float
    label: str = ""

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) where the two roofs meet."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        """The best FLOP/s a workload of this intensity can reach: min(P, AI * W)."""
        return min(self.peak_flops, intensity * self.bandwidth)

    def seconds(self, flops: float, nbytes: float) -> float:
        """The least time for `flops` FLOPs and `nbytes` bytes: max(F / P, Q / W)."""
        return max(flops / self.peak_flops, nbytes / self.bandwidth)


def bytes_per_weight(fmt: int | str | float) -> float:
    """Bytes per weight: a ggml type id or name (scales included: Q4_K 0.5625, Q8_0 1.0625,
    F16 2, F32 4), or a number of bytes given as a float."""
    if isinstance(fmt, float):
        if fmt <= 0:
            raise UsageError(f"bytes per weight must be positive, got {fmt}")
        return fmt
    return bits_per_weight(fmt) / 8.0


# --- one weight matrix: the paper's equations --------------------------------------------

def paper_intensity(n: int, k: int, tokens: int, b: float) -> float:
    """The paper's eq. 2 (eq. 1 at tokens = 1): 2 N K B / ((N K + K B) b) FLOP/byte."""
    return 2.0 * n * k * tokens / ((n * k + k * tokens) * b)


def matmul_flops(n: int, k: int, tokens: int) -> float:
    """(N x K) weights times K x B activations: 2 N K B FLOPs (a multiply and an add each)."""
    return 2.0 * n * k * tokens


def matmul_bytes(n: int, k: int, tokens: int, b: float, act_bytes: float = F32_BYTES) -> float:
    """Weights once (N K b) plus the activations read (K B) and written (N B)."""
    return n * k * b + (k + n) * tokens * act_bytes


def matmul_intensity(n: int, k: int, tokens: int, b: float, act_bytes: float = F32_BYTES) -> float:
    return matmul_flops(n, k, tokens) / matmul_bytes(n, k, tokens, b, act_bytes)


# --- a whole forward pass ----------------------------------------------------------------

def layer_matrices(config: ModelConfig) -> list[tuple[str, int, int]]:
    """(name, N outputs, K inputs) of each weight matrix of one layer."""
    c = config
    q, kv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    return [("attn_q", q, c.n_embd), ("attn_k", kv, c.n_embd), ("attn_v", kv, c.n_embd),
            ("attn_output", c.n_embd, q), ("ffn_gate", c.n_ff, c.n_embd),
            ("ffn_up", c.n_ff, c.n_embd), ("ffn_down", c.n_embd, c.n_ff)]


def streamed_weights(config: ModelConfig) -> int:
    """Weights one forward pass reads: every layer's matrices and the output head."""
    per_layer = sum(n * k for _, n, k in layer_matrices(config))
    return config.n_layer * per_layer + config.vocab_size * config.n_embd


@dataclass(frozen=True)
class Workload:
    """One forward pass's cost: FLOPs and bytes, and how many tokens it handles."""

    name: str
    tokens: int              # tokens through each weight matrix (B)
    flops: float
    weight_bytes: float
    other_bytes: float       # activations in and out, KV cache read and written

    @property
    def nbytes(self) -> float:
        return self.weight_bytes + self.other_bytes

    @property
    def intensity(self) -> float:
        return self.flops / self.nbytes

    def seconds(self, roof: Roof) -> float:
        """The roofline's predicted (least) time on `roof`."""
        return roof.seconds(self.flops, self.nbytes)

    def bound(self, roof: Roof) -> str:
        return "memory" if self.intensity < roof.ridge else "compute"


def forward_cost(config: ModelConfig, name: str, b: float, tokens: SupportsIndex,
                 context: SupportsIndex = 0, causal: bool = True, head_rows: SupportsIndex = 1,
                 act_bytes: float = F32_BYTES, kv_bytes: float = F32_BYTES) -> Workload:
    """A forward pass of `tokens` new tokens after `context` cached ones.

    Attention pairs: a causal pass lets new token i (1-based) see context + i keys, a
    bidirectional one lets each see context + tokens; scores (Q K^T) and the weighted sum
    (P V) cost 2 head_dim FLOPs per pair and head each. The head projects `head_rows` rows."""
    c = config
    n, ctx, rows = operator.index(tokens), operator.index(context), operator.index(head_rows)
    if n < 1 or ctx < 0 or rows < 0:
        raise UsageError(f"{name}: expected tokens >= 1, context >= 0, head_rows >= 0; "
                         f"got {n}, {ctx}, {rows}")
    mats = layer_matrices(c)
    flops = sum((matmul_flops(o, i, n) for _, o, i in mats), 0.0) * c.n_layer
    acts = sum(((o + i) * n * act_bytes for _, o, i in mats), 0.0) * c.n_layer
    pairs = n * ctx + (n * (n + 1) // 2 if causal else n * n)
    flops += 4.0 * pairs * c.n_head * c.head_dim * c.n_layer
    kv_width = 2 * c.n_head_kv * c.head_dim * c.n_layer          # K and V, all layers
    kv = (ctx + n) * kv_width * kv_bytes                         # read the cache, write the new
    head_weights = float(c.vocab_size * c.n_embd) if rows > 0 else 0.0
    flops += matmul_flops(c.vocab_size, c.n_embd, rows)
    acts += (c.n_embd + c.vocab_size) * rows * act_bytes
    layer_weights = float(c.n_layer * sum(o * i for _, o, i in mats))
    return Workload(name, n, flops, (layer_weights + head_weights) * b, acts + kv)


def ar_decode(config: ModelConfig, b: float, context: SupportsIndex = 0,
              act_bytes: float = F32_BYTES, kv_bytes: float = F32_BYTES) -> Workload:
    """One decode step: one token through every matrix (matrix @ vector), `context` cached."""
    return forward_cost(config, "AR decode", b, 1, context, True, 1, act_bytes, kv_bytes)


def prefill(config: ModelConfig, b: float, tokens: SupportsIndex,
            act_bytes: float = F32_BYTES, kv_bytes: float = F32_BYTES) -> Workload:
    """The prompt in one causal pass; only the last row goes through the head."""
    return forward_cost(config, f"prefill {operator.index(tokens)}", b, tokens, 0, True, 1,
                        act_bytes, kv_bytes)


def diffusion_step(config: ModelConfig, b: float, gen_length: SupportsIndex,
                   prompt_tokens: SupportsIndex = 0, act_bytes: float = F32_BYTES,
                   kv_bytes: float = F32_BYTES) -> Workload:
    """One uncached denoising step: prompt + B canvas tokens, bidirectional attention, the
    head on the B masked rows (the first step; later steps project fewer)."""
    g = operator.index(gen_length)
    n = operator.index(prompt_tokens) + g
    return forward_cost(config, f"diffusion step B={g}", b, n, 0, False, g, act_bytes, kv_bytes)


def verify_batch(config: ModelConfig, b: float, k: SupportsIndex, context: SupportsIndex = 0,
                 act_bytes: float = F32_BYTES, kv_bytes: float = F32_BYTES) -> Workload:
    """What a speculative verify batch costs (the pass ``speculative_verify.verify`` runs):
    K drafted tokens checked in one causal pass after `context` cached tokens; every drafted
    row needs its logits."""
    kk = operator.index(k)
    return forward_cost(config, f"verify K={kk}", b, kk, context, True, kk, act_bytes, kv_bytes)


# --- measured points against the roof ---------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """A measured run placed on the roofline."""

    name: str
    intensity: float          # FLOP/byte (from the workload's counts)
    achieved_flops: float     # FLOP/s measured: flops / seconds
    attainable_flops: float   # the roof above this intensity
    predicted_s: float        # the roofline's least time
    measured_s: float
    bound: str                # "memory" or "compute"

    @property
    def fraction(self) -> float:
        """Measured speed as a share of the roof: predicted / measured time (<= 1 ideally)."""
        return self.predicted_s / self.measured_s


@dataclass(frozen=True)
class Measurement:
    """A workload timed at a thread count (placed later against that thread count's roof)."""

    workload: Workload
    seconds: float
    threads: int


def place(workload: Workload, seconds: float, roof: Roof) -> Placement:
    """Where a workload measured at `seconds` sits under `roof`."""
    if seconds <= 0:
        raise UsageError(f"place: {workload.name}: expected a positive time, got {seconds}")
    return Placement(workload.name, workload.intensity, workload.flops / seconds,
                     roof.attainable(workload.intensity), workload.seconds(roof), seconds,
                     workload.bound(roof))
