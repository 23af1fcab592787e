"""Do the notebooks' checks bite? Make a package function wrong, run the cell that checks it,
and see its assert fail.

``BITES`` is the table: one row per (notebook, check cell, package function, how it is made
wrong). A notebook's rows run in one interpreter: its code cells execute in order in one
namespace, from the notebook's folder, up to its last checked cell (cells named in ``SKIP``,
which only time or draw, are left out). At a checked cell, each row replaces its function,
runs the cell, and records how it failed; then the function is put back and the cell runs
as written, which must pass (so a failure is the replacement's doing, and what the wrong run
left behind is overwritten). A check that reads results an earlier cell computed names that
cell too (``first``): the function is wrong from there to the checked cell, and the cells in
between run again as written afterwards.

A replacement takes the place of every binding of the function: the attribute of its module,
every ``from ... import`` copy in llmnb's other modules, and the notebook's own names. A
method is replaced on its class. This reaches every caller only in the interpreted package: a
mypyc-compiled caller calls its callee directly. ``tests/test_notebook_bite.py`` therefore
runs each notebook's rows in a fresh interpreter whose ``import llmnb`` reads the source
tree's ``.py`` files. The one exception is ``llmnb.kernels``, plain Python everywhere: where
the installed package's copy is identical (``LLMNB_BITE_KERNELS`` names its folder), it is
imported from there, so that numba's cache, keyed by file path, is shared with the test run.

To add a notebook: add its rows to ``BITES`` (and its slow cells that no check needs to
``SKIP``). A cell is named by a line of its source, unique in the notebook.

    python tests/notebook_bite.py 04_transformer      # one notebook's rows, results as JSON
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

Wrong = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True)
class Bite:
    notebook: str        # path under notebooks/ without .ipynb: "04_transformer"
    cell: str            # a line of the checked cell's source, unique in the notebook
    target: str          # "module:function" or "module:Class.method"
    wrong: Wrong         # the right function -> a wrong one
    what: str            # how it is wrong, in a few words
    first: str = ""      # where a check reads results computed earlier: the cell that computes
                         # them (the function is wrong from there to the checked cell)


# ---- ways to make a function wrong -------------------------------------------------------

def scaled(factor: float) -> Wrong:
    """Its array result times `factor`."""
    def make(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrong(*a: Any, **k: Any) -> Any:
            return f(*a, **k) * factor
        return wrong
    return make


def with_args(**changed: Any) -> Wrong:
    """Called with some keyword arguments replaced (or added)."""
    def make(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrong(*a: Any, **k: Any) -> Any:
            return f(*a, **{**k, **changed})
        return wrong
    return make


def then(change: Callable[..., Any]) -> Wrong:
    """Its result passed through `change(result, *args, **kwargs)`."""
    def make(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrong(*a: Any, **k: Any) -> Any:
            return change(f(*a, **k), *a, **k)
        return wrong
    return make


def instead(replacement: Callable[..., Any]) -> Wrong:
    """A different function altogether (it may call the right one: `replacement(f, ...)`)."""
    def make(f: Callable[..., Any]) -> Callable[..., Any]:
        def wrong(*a: Any, **k: Any) -> Any:
            return replacement(f, *a, **k)
        return wrong
    return make


# ---- the wrong versions the rows use ----------------------------------------------------

def _rope_backwards(f: Callable[..., Any], x: Any, cos: Any, sin: Any, *rest: Any) -> Any:
    return f(x, cos, -sin, *rest)                    # rotates by -angle: position t becomes -t


def _rope_neighbours(f: Callable[..., Any], x: Any, cos: Any, sin: Any) -> Any:
    """llama.cpp's interleaved pairing (2i, 2i+1) where llmnb pairs i with i + d/2."""
    half = x.shape[-1] // 2
    order = np.arange(x.shape[-1]).reshape(2, half).T.reshape(-1)   # 0, h, 1, h+1, ...
    inverse = np.argsort(order)
    return f(x[..., inverse], cos, sin)[..., order]


def _attention_unmasked(f: Callable[..., Any], q: Any, k: Any, v: Any, causal: bool,
                        *rest: Any, **kw: Any) -> Any:
    return f(q, k, v, True, *rest, **kw)              # always causal: causal=False ignored


def _attention_tiled(f: Callable[..., Any], q: Any, k: Any, v: Any, *rest: Any, **kw: Any) -> Any:
    """Query head h reads K/V head h mod n_kv (np.tile's layout) instead of h // group."""
    nh, t, hd = q.shape
    order = np.argsort(np.tile(np.arange(k.shape[0]), nh // k.shape[0]), kind="stable")
    out = np.asarray(f(q[order], k, v, *rest, **kw)).reshape(t, nh, hd)   # head j = q[order[j]]
    return np.ascontiguousarray(out[:, np.argsort(order)].reshape(t, nh * hd))


def _swiglu_swapped(f: Callable[..., Any], gate: Any, up: Any, *rest: Any) -> Any:
    return f(up, gate, *rest)                         # silu on the up half


def _rms_norm_mean_removed(f: Callable[..., Any], x: Any, w: Any, eps: float, *rest: Any) -> Any:
    return f(x - x.mean(axis=-1, keepdims=True), w, eps, *rest)     # LayerNorm's centring


def _hub_path_other(f: Callable[..., Any], name: str) -> Any:
    return f("gemma3-270m" if name != "gemma3-270m" else "smollm2-135m")


def _tensor_info_transposed(f: Callable[..., Any], c: Any, index: int) -> Any:
    name, shape, ggml_type, offset, n = f(c, index)
    # one shape transposed
    return name, (shape[::-1] if index == 0 else shape), ggml_type, offset, n


def _strings_last_altered(f: Callable[..., Any], c: Any, n: int, field: str) -> Any:
    out = f(c, n, field)
    return out[:-1] + [out[-1] + " "] if out else out     # the last string gains a space


def _unchecked_need(f: Callable[..., Any], self: Any, n: int, field: str) -> None:
    return None                                        # trusts every length the file claims


def _merges_reversed(f: Callable[..., Any], merges: Any, source: str) -> Any:
    return f(merges, source)[::-1]                     # the rarest merge ranked first


def _encode_never_special(f: Callable[..., Any], self: Any, text: str, special: bool = False,
                          add_special: bool = False) -> Any:
    return f(self, text, False, add_special)           # control tokens always read as text


def _softmax_tempered_twice(f: Callable[..., Any], logits: Any, temperature: float = 1.0,
                            axis: int = -1) -> Any:
    return f(logits, temperature * temperature, axis)  # temperature applied twice


def _keep_one_fewer(f: Callable[..., Any], self: Any, logits: Any) -> Any:
    """top-p stops one token before the mass reaches p (searchsorted without the + 1)."""
    keep = f(self, logits)
    if self.top_p < 1.0 and keep.sum() > 1:
        kept = np.flatnonzero(keep)
        keep[kept[np.argmin(logits[kept])]] = False
    return keep


def _top_p_on_everything(f: Callable[..., Any], self: Any, logits: Any) -> Any:
    """top-p measured on the whole distribution instead of on what top-k left."""
    keep = f(self, logits)
    if self.top_k > 0 and self.top_p < 1.0:
        from llmnb.ar.sampling import Sampler
        alone = f(Sampler(top_p=self.top_p), logits)
        keep = f(Sampler(top_k=self.top_k), logits) & alone
        if self.min_p > 0.0:
            p = np.exp(logits - logits[keep].max())
            keep &= p >= self.min_p
    return keep


def _temperature_first(f: Callable[..., Any], self: Any, logits: Any) -> Any:
    """min-p on the tempered distribution (temperature before the filters)."""
    if self.min_p > 0.0 and self.temperature not in (0.0, 1.0):
        from llmnb.ar.sampling import Sampler
        return f(Sampler(min_p=self.min_p, top_k=self.top_k, top_p=self.top_p),
                 logits / self.temperature)
    return f(self, logits)


def _sample_unfiltered(f: Callable[..., Any], self: Any, logits: Any) -> int:
    from llmnb.softmax import softmax
    p = softmax(logits, self.temperature or 1.0)       # the filters forgotten when drawing
    return int(self.rng.choice(p.shape[0], p=p))


def _nll_shifted(f: Callable[..., Any], logits: Any, targets: Any) -> Any:
    return f(logits, np.roll(targets, 1))              # row t scored against token t, not t + 1


def _quantize_as_q8(f: Callable[..., Any], src: Any, out: Any, ftype: str, *rest: Any) -> Any:
    return f(src, out, "Q8_0", *rest)                  # the type asked for ignored


def _speed_by_medians(f: Callable[..., Any], before: Any, after: Any) -> str:
    r = before.median / after.median
    return "faster" if r > 1 else "slower" if r < 1 else "the same"


def _against_by_median(f: Callable[..., Any], measured: Any, expected: float, what: str) -> str:
    return ("more than expected" if measured.median > expected else
            "less than expected" if measured.median < expected else "as expected")


def _bytes_keys_only(f: Callable[..., Any], *a: Any, **k: Any) -> int:
    return int(f(*a, **k)) // 2                        # values forgotten


def _keep_lowest(f: Callable[..., Any], scores: Any, *rest: Any) -> Any:
    return f(-scores, *rest)                           # the least attended middle kept


def _evict_keys_out_of_place(f: Callable[..., Any], self: Any) -> None:
    f(self)
    k = self.k                                         # (L, n_kv, slots, hd)
    k[:, :, [0, 1]] = k[:, :, [1, 0]]                  # two keys swap slots, their values do not


def _without_last(result: Any, *a: Any, **k: Any) -> Any:
    return result[:-1] if len(result) > 1 else result   # one position (token) too few


def _reversed(result: Any, *a: Any, **k: Any) -> Any:
    return result[::-1]                                 # the order turned around


def _target_towards_uniform(f: Callable[..., Any], logits: Any, *rest: Any) -> Any:
    """The target's rows mixed 10% with a uniform distribution: a bias of a few points of TV."""
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p = 0.9 * p / p.sum(axis=-1, keepdims=True) + 0.1 / p.shape[-1]
    return f(np.log(p).astype(np.float32), *rest)


def _scales_float64(result: Any, *a: Any, **k: Any) -> Any:
    import dataclasses
    return dataclasses.replace(result, d=result.d.astype(np.float64))   # 8 bytes per scale


def _read_own_row(f: Callable[..., Any], self: Any, *a: Any, **k: Any) -> None:
    f(self, *a, **k)
    self.shift = False                                  # Dream's position i reads row i, not i - 1


def _paired_swapped(f: Callable[..., Any], reference: Any, other: Any, *a: Any, **k: Any) -> Any:
    return f(other, reference, *a, **k)                # the two methods' roles exchanged


def _interval_unpaired(f: Callable[..., Any], a: int, b: int, c: int, d: int) -> Any:
    """Newcombe's interval with phi = 0: the two methods' outcomes taken as independent."""
    from llmnb.perf.intervals import proportion
    n = a + b + c + d
    (l1, u1), (l2, u2) = proportion(a + b, n), proportion(a + c, n)
    p1, p2, est = (a + b) / n, (a + c) / n, (b - c) / n
    return est - float(np.hypot(p1 - l1, u2 - p2)), est + float(np.hypot(p2 - l2, u1 - p1))


def _forget_committed(f: Callable[..., Any], self: Any, step: int, tokens: Any, masked: Any,
                      *rest: Any) -> Any:
    act = f(self, step, tokens, masked, *rest)
    fresh = np.flatnonzero(act & ~masked)               # committed last step, not masked
    if len(fresh):
        act[fresh[0]] = False                           # one of them left stale
    return act


def _roof_raised(p: Any, *a: Any, **k: Any) -> Any:
    """The plateau found, its roof 20% higher than the median of its points."""
    import dataclasses
    return dataclasses.replace(p, gbs=1.2 * p.gbs)


def _scatter_reversed_on_partial(f: Callable[..., Any], self: Any, layer: int, k: Any,
                                 v: Any) -> Any:
    """A partial step's fresh K/V written to its active positions in reverse order (a full
    forward, whose active set is every position, is left right)."""
    if len(self.active) == self.n_positions:
        return f(self, layer, k, v)
    self.k[layer][:, self.active[::-1]] = k
    self.v[layer][:, self.active[::-1]] = v
    return self.k[layer], self.v[layer]


def _positions_from_zero(f: Callable[..., Any], self: Any, ids: Any, *rest: Any,
                         **kw: Any) -> Any:
    """A pass over explicit positions rotated as if they started at 0: a diffusion step's
    active subset gets RoPE angles by its index in the subset (a full canvas is unchanged)."""
    positions = kw.get("positions")
    if positions is not None and len(positions):
        kw["positions"] = positions - positions.min()
    return f(self, ids, *rest, **kw)


def _best_is_reference(f: Callable[..., Any], rows: Any, kind: str) -> Any:
    return next(r for r in rows if r["kind"] == kind and r["method"] == "16 steps, cosine")


# ---- the table ----------------------------------------------------------------------------

BITES: list[Bite] = [
    Bite("00_tour", "digest = hashlib.sha256", "llmnb.hub:path", instead(_hub_path_other),
         "locates another model's file"),
    Bite("00_tour", "a = llmnb.generate(ar", "llmnb.kernels.rowwise:rope_rows",
         instead(_rope_backwards), "RoPE rotates backwards"),
    Bite("01_gguf", "ref = gguf.GGUFReader(path)", "llmnb.gguf.reader:_read_tensor_info",
         instead(_tensor_info_transposed), "one tensor's shape transposed"),
    Bite("01_gguf", "ref = gguf.GGUFReader(path)", "llmnb.gguf.reader:_read_strings",
         instead(_strings_last_altered), "the last string of an array altered"),
    Bite("01_gguf", "bad_cases = {", "llmnb.gguf.reader:_Cursor.need",
         instead(_unchecked_need), "lengths and counts not checked against the file"),
    Bite("03_tokenizer", 'model = llmnb.load("smollm2-135m")',
         "llmnb.tokenizer.byte_bpe:merges_for_json",
         instead(_merges_reversed), "merge ranks reversed"),
    Bite("03_tokenizer", "fixture = json.loads", "llmnb.tokenizer.tokenizer:Tokenizer.encode",
         instead(_encode_never_special), "special=True ignored"),
    Bite("04_transformer", "ms = np.mean(x ** 2", "llmnb.model.blocks:rms_norm",
         instead(_rms_norm_mean_removed), "subtracts the mean (LayerNorm)"),
    Bite("04_transformer", "hd, base, pos = 8, 10000.0, 5", "llmnb.model.blocks:apply_rope",
         instead(_rope_neighbours), "pairs neighbouring dimensions"),
    Bite("04_transformer", "k_rep, v_rep = np.repeat", "llmnb.model.blocks:attention",
         instead(_attention_tiled), "query heads read the wrong K/V heads"),
    Bite("04_transformer", "ffn = swiglu(", "llmnb.model.blocks:swiglu",
         instead(_swiglu_swapped), "gate and up swapped"),
    Bite("04_transformer", "ours = forward_by_hand(W, cfg, prompt)",
         "llmnb.kernels.rowwise:rope_rows", instead(_rope_backwards),
         "the forward's RoPE rotates backwards"),
    Bite("04_transformer", "bidir = tiny.forward(prompt, causal=False)",
         "llmnb.model.blocks:attention", instead(_attention_unmasked), "causal=False ignored"),
    Bite("06_sampling", "p = np.exp(z - z.max()); p /= p.sum()", "llmnb.softmax:softmax",
         scaled(1.01), "probabilities sum to 1.01"),
    Bite("06_sampling", "for temp in (0.5, 1.0, 1.5):", "llmnb.softmax:softmax",
         instead(_softmax_tempered_twice), "temperature applied twice"),
    Bite("06_sampling", "def keep_top_k(p, k):", "llmnb.ar.sampling:Sampler.keep_mask",
         instead(_keep_one_fewer), "top-p keeps one token too few"),
    Bite("06_sampling", "for temp in (0.5, 1.0, 1.5, 2.0, 3.0):",
         "llmnb.ar.sampling:Sampler.keep_mask", instead(_temperature_first),
         "temperature before min-p"),
    Bite("06_sampling", "st = filter_stages(", "llmnb.ar.sampling:Sampler.keep_mask",
         instead(_top_p_on_everything), "top-p on the whole distribution, not on top-k's"),
    Bite("06_sampling", "draws = np.array([s.sample(sub)", "llmnb.ar.sampling:Sampler.sample",
         instead(_sample_unfiltered), "draws ignore the filters"),
    Bite("solutions/06_sampling_solutions", 'by_hand = {"top-k 40": 40,',
         "llmnb.ar.sampling:Sampler.keep_mask", instead(_keep_one_fewer),
         "top-p keeps one token too few"),
    Bite("07_perplexity", "r = llmnb.perplexity(smol, sentence", "llmnb.ar.perplexity:token_nll",
         instead(_nll_shifted), "each row scored against the wrong token"),
    Bite("07_perplexity", 'r_half = llmnb.perplexity(smol, head', "llmnb.ar.perplexity:perplexity",
         with_args(rule="full"), 'scores every position under rule="half"'),
    Bite("07_perplexity", "base = llmnb.perplexity(smol, head, ctx=CTX",
         "llmnb.ar.perplexity:token_nll",
         scaled(1.01), "log-probabilities 1% off"),
    Bite("07_perplexity", "verdict = {}", "llmnb.quant.gguf_file:quantize_file",
         instead(_quantize_as_q8), "writes Q8_0 whatever type is asked",
         first="from llmnb.quant.gguf_file import quantize_file, describe_plan"),
    Bite("solutions/07_perplexity_solutions", "pkg = llmnb.perplexity(smol, head, ctx=ctx",
         "llmnb.ar.perplexity:perplexity", with_args(rule="full"),
         'scores every position under rule="half"'),
    Bite("02_quantization", 'pkg = dequantize(block, "Q4_0", (32,))',
         "llmnb.quant.formats:dequantize", scaled(1.001), "values 0.1% too large"),
    Bite("02_quantization", "before = runs(10.0, 10.3", "llmnb.perf.timing:speed_verdict",
         instead(_speed_by_medians), "calls any ratio of the medians above 1 faster"),
    Bite("02_quantization", "before = runs(10.0, 10.3", "llmnb.perf.timing:against",
         instead(_against_by_median), "sets the median alone against the prediction"),
    Bite("05_generation", "per_token = KVCache.bytes_for(c, 1)",
         "llmnb.ar.kv_cache:KVCache.bytes_for", instead(_bytes_keys_only), "counts the keys only"),
    Bite("08_roofline", "decode = rl.ar_decode(c, 4.0, context=40)",
         "llmnb.perf.roofline:ar_decode",
         with_args(context=80), "counts the attention of another context length"),
    Bite("08_roofline", "def plateau_by_hand(curve, tol=TOLERANCE):", "llmnb.perf.peaks:plateau",
         then(_roof_raised), "a memory roof 20% above the plateau's median"),
    Bite("09_quantized_matvec", "by_hand = d * (float(np.dot(q", "llmnb.quant.formats:dequantize",
         scaled(1.001), "values 0.1% too large"),
    Bite("solutions/09_quantized_matvec_solutions", "n_out, n_in = 576, 1536",
         "llmnb.kernels.layout:pack", then(_scales_float64), "stores its scales as float64"),
    Bite("10_superspec", "def lookup_by_hand(ctx, k, max_ngram=3):", "llmnb.ar.lookup:lookup",
         then(_without_last), "drafts one token too few"),
    Bite("10_superspec", "p2 = np.array([np.roll([0.4, 0.2, 0.1, 0.1, 0.1, 0.1], x)",
         "llmnb.ar.speculative_accept:accept_sampled", instead(_target_towards_uniform),
         "samples a target mixed 10% with uniform"),
    Bite("12_masked_diffusion", 'n_commit = transfer_count("cosine", 0, STEPS, len(pos))',
         "llmnb.diffusion.remasking:order", then(_reversed), "commits the least confident first"),
    Bite("12_masked_diffusion", "counts = {name: transfer_counts(name",
         "llmnb.diffusion.transfer_schedule:transfer_counts", then(_reversed),
         "the schedule runs backwards"),
    Bite("12_masked_diffusion", "pkg = paired(ref, other)", "llmnb.perf.intervals:paired",
         instead(_paired_swapped), "reference and other method swapped"),
    Bite("12_masked_diffusion", "pkg = paired(ref, other)", "llmnb.perf.intervals:mcnemar_exact",
         scaled(0.5), "a one-sided sign test"),
    Bite("12_masked_diffusion", "pkg = paired(ref, other)", "llmnb.perf.intervals:newcombe_paired",
         instead(_interval_unpaired), "the interval ignores the pairing"),
    Bite("13_dream", "shifted = tok.decode(", "llmnb.diffusion.remasking:order", then(_reversed),
         "commits the least probable first"),
    Bite("13_dream", "shifted = tok.decode(", "llmnb.diffusion.engine:StepForward.__init__",
         instead(_read_own_row), "forgets Dream's shift"),
    Bite("14_entropy_exit", "h = -np.sum(p[p > 1e-10]", "llmnb.diffusion.remasking:entropy",
         scaled(1.001), "entropies 0.1% too large"),
    Bite("14_entropy_exit", "n_by_hand = min(B, max(n_sched, n_easy))",
         "llmnb.diffusion.schedulers:EntropyExit.select", then(_without_last),
         "commits one position too few"),
    Bite("15_interstep_cache", "grid = np.zeros((n_steps, P + B))",
         "llmnb.diffusion.cache:InterStepCache.recompute", instead(_forget_committed),
         "one just-committed position not recomputed"),
    Bite("15_interstep_cache", "def step_by_hand(ids, positions, K, V):",
         "llmnb.diffusion.cache:InterStepCache.update", instead(_scatter_reversed_on_partial),
         "a partial step scatters its fresh K/V to the wrong positions"),
    Bite("15_interstep_cache", "def step_by_hand(ids, positions, K, V):",
         "llmnb.model.transformer:Transformer.hidden", instead(_positions_from_zero),
         "a partial step's RoPE angles counted from 0 in the subset"),
    Bite("16_fast_sampling", "first = np.flatnonzero(r.history[0] != MASK)",
         "llmnb.diffusion.schedulers:entropy_bound_pick", then(_without_last),
         "admits one position too few"),
    Bite("16_fast_sampling", 'top, ref, one = best(rows, KIND), by[REFERENCE], by["one step"]',
         "llmnb.perf.bench_ladder:best", instead(_best_is_reference),
         "picks the reference, which takes no fewer forwards"),
    Bite("17_regime_inversion", "plans[fmt] = plan_types(infos, fmt)",
         "llmnb.quant.gguf_file:quantize_file", instead(_quantize_as_q8),
         "writes Q8_0 whatever type is asked"),
    Bite("11_initial_key_cache", "def per_position(c):", "llmnb.ar.kv_cache:KVCache.bytes_for",
         instead(_bytes_keys_only), "counts the keys only"),
    Bite("11_initial_key_cache", "def by_hand(rows):", "llmnb.ar.kv_eviction:keep_mask",
         instead(_keep_lowest), "keeps the lowest Score Sums"),
    Bite("11_initial_key_cache", "oracle = KVCache(cfg, cfg.n_ctx)",
         "llmnb.ar.kv_eviction:EvictingKVCache._evict", instead(_evict_keys_out_of_place),
         "compaction moves two keys without their values"),
]

# Cells no check needs, left out of a bite run (they only time, draw or open a widget).
SKIP: dict[str, tuple[str, ...]] = {
    "00_tour": ("summaries = {m.name: summarize",),
    "01_gguf": ("HTML(summary_html(f))",),
    "04_transformer": ("ax0.imshow(causal",),
    "05_generation": ("def greedy_no_cache(ids, n_new):",
                      "naive, cached = position_passes(len(prompt)"),
    "06_sampling": ("fig, axes = plt.subplots(len(settings)", "next_token_explorer(smol"),
    "07_perplexity": ("ax.plot(pos, mean", "ax.errorbar(size / 1e6"),
    "11_initial_key_cache": ("ax.imshow(kept[:, layer]",),
    "12_masked_diffusion": ("viewer = canvas_viewer(",),
    "17_regime_inversion": ("facts = machine.probe(",),
}


# ---- running a notebook's rows ------------------------------------------------------------

def code_cells(notebook: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def find_cell(cells: list[str], marker: str, notebook: str) -> int:
    """The index of the one code cell with a line containing `marker`."""
    hits = [i for i, src in enumerate(cells) if any(marker in line for line in src.splitlines())]
    if len(hits) != 1:
        raise LookupError(f"{notebook}: {len(hits)} code cells contain {marker!r}, expected 1")
    return hits[0]


def _resolve(target: str) -> tuple[Any, str]:
    module_name, _, qual = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *path, name = qual.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


@contextmanager
def replaced(target: str, wrong: Wrong, namespace: dict[str, Any]) -> Iterator[None]:
    """`target` made wrong everywhere it is bound, for the length of the block."""
    owner, name = _resolve(target)
    if isinstance(owner, type):
        raw = owner.__dict__.get(name)
        kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
        right = raw.__func__ if kind is not None else getattr(owner, name)
        bad = wrong(right)
        setattr(owner, name, kind(bad) if kind is not None else bad)
        try:
            yield
        finally:
            if raw is None:
                delattr(owner, name)
            else:
                setattr(owner, name, raw)
        return
    right = getattr(owner, name)
    bad = wrong(right)
    homes: list[Any] = [m for n, m in list(sys.modules.items())
                        if n.startswith("llmnb") and m is not None]
    sites = [(vars(m), k) for m in homes for k, v in list(vars(m).items()) if v is right]
    sites += [(namespace, k) for k, v in list(namespace.items()) if v is right]
    for d, k in sites:
        d[k] = bad
    try:
        yield
    finally:
        for d, k in sites:
            d[k] = right


def run_cell(source: str, namespace: dict[str, Any], label: str) -> dict[str, Any]:
    """Execute one cell; how it ended: passed, assert (with the failing line) or error."""
    filename = f"<{label}>"
    try:
        exec(compile(source, filename, "exec"), namespace)
    except AssertionError as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == filename]
        line = source.splitlines()[frames[-1].lineno - 1].strip() if frames else "?"
        return {"outcome": "assert", "line": line, "message": str(e).strip()[:300]}
    except Exception as e:  # noqa: BLE001 - reported, not hidden: a crash is not a bite
        return {"outcome": "error", "line": "", "message": f"{type(e).__name__}: {e}"[:300]}
    return {"outcome": "passed", "line": "", "message": ""}


def run_notebook(notebook: str) -> list[dict[str, Any]]:
    """Run `notebook`'s rows (see the module's docstring); one result per row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = code_cells(notebook)
    rows = [b for b in BITES if b.notebook == notebook]
    end = {id(b): find_cell(cells, b.cell, notebook) for b in rows}
    start = {id(b): find_cell(cells, b.first, notebook) if b.first else end[id(b)] for b in rows}
    skip = {find_cell(cells, m, notebook) for m in SKIP.get(notebook, ())}
    os.chdir((NOTEBOOKS / notebook).parent)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    results: list[dict[str, Any]] = []
    for i, src in enumerate(cells[:max(end.values()) + 1]):
        if i in skip:
            continue
        for b in (b for b in rows if start[id(b)] == i):
            t0 = time.perf_counter()
            with replaced(b.target, b.wrong, namespace):
                for j in range(i, end[id(b)] + 1):
                    if j in skip:
                        continue
                    r = run_cell(cells[j], namespace, f"{notebook} cell {j}")
                    if r["outcome"] != "passed":
                        break
            if r["outcome"] != "passed" and j != end[id(b)]:
                r = {**r, "outcome": "error", "message": f"cell {j} failed first: {r['message']}"}
            results.append({"notebook": notebook, "cell": b.cell, "target": b.target,
                            "what": b.what, "seconds": time.perf_counter() - t0, **r})
            plt.close("all")
        label = f"{notebook} cell {i}"
        clean = run_cell(src, namespace, label)
        plt.close("all")
        if clean["outcome"] != "passed":
            raise RuntimeError(f"{label} fails as written: {clean['message']}")
    return results


def share_compiled_kernels(installed: str) -> Path | None:
    """Import ``llmnb.kernels`` from `installed` (the installed package's ``kernels`` folder)
    when its ``.py`` files are byte for byte the source tree's; that folder if so.

    The kernels are plain Python in both places (mypyc leaves them to numba), so nothing a
    replacement reaches changes. What changes is numba's cache: it is keyed by the source
    file's path, so the source tree's kernels would compile every signature again (minutes on
    a slow CPU), while the installed ones find what the test run has already compiled. (The
    comparison is ``llmnb.perf.bench_compiled._py_files``'s, written out: importing llmnb here
    would import the source tree's kernels before the finder below is in place.)"""
    import importlib.abc
    import importlib.machinery
    here, there = ROOT / "llmnb" / "kernels", Path(installed)
    if not installed or there.resolve() == here.resolve() or any(there.glob("*.so")):
        return None
    def files(folder: Path) -> dict[str, bytes]:
        return {q.name: q.read_bytes() for q in folder.glob("*.py")}
    if files(here) != files(there):
        return None

    class Kernels(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname != "llmnb.kernels":           # its submodules follow its __path__
                return None
            return importlib.machinery.PathFinder.find_spec(fullname, [str(there.parent)])

    sys.meta_path.insert(0, Kernels())
    return there


if __name__ == "__main__":
    shared = share_compiled_kernels(os.environ.get("LLMNB_BITE_KERNELS", ""))
    import llmnb
    import llmnb.kernels
    assert shared is None or Path(llmnb.kernels.__file__).parent.resolve() == shared.resolve(), \
        llmnb.kernels.__file__
    if not Path(llmnb.__file__).resolve().is_relative_to(ROOT / "llmnb"):
        sys.exit(f"notebook_bite: llmnb comes from {llmnb.__file__}, not from {ROOT / 'llmnb'}: "
                 f"run with PYTHONPATH={ROOT}")
    out = run_notebook(sys.argv[1])
    print(json.dumps(out))
