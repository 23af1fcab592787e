"""llmnb.perf: the roofline formulas against hand counts, the machine probe, the thread sweep,
and the widgets' plain functions (figures) and objects (built without a browser)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import llmnb
from llmnb.errors import UsageError
from llmnb.model.config import ModelConfig
from llmnb.perf import machine, peaks, timing
from llmnb.perf import roofline as rl
from llmnb.perf.scaling import (AR, DIFFUSION, ScalingPoint, decode_timing, decode_timings,
                                 diffusion_step_timings, scaling_rows, step_timing, thread_sweep)

ROOT = Path(__file__).resolve().parents[1]
TINY = machine.ProbeSizes(sgemm_n=64, stream_bytes=1 << 20, gemv_bytes=1 << 20, repeats=1,
                          curve_bytes=1 << 20)

# SmolLM2-135M's hyper-parameters (the hub file's metadata), written out so the hand counts
# below need no download.
SMOLLM2 = ModelConfig(arch="llama", n_layer=30, n_embd=576, n_head=9, n_head_kv=3, head_dim=64,
                      n_ff=1536, n_ctx=8192, vocab_size=49152, rope_base=100000.0, rope_dim=64,
                      rms_eps=1e-5, causal=True, shift_logits=False, tied_output=True,
                      qkv_bias=False, rope_scaling="none", mask_token_id=None)
# one layer: q 576x576 + k, v 192x576 each + o 576x576 + gate, up 1536x576 + down 576x1536
LAYER = 576 * 576 + 2 * 192 * 576 + 576 * 576 + 3 * 1536 * 576          # 3,538,944
HEAD = 49152 * 576                                                     # 28,311,552


def tiny(name: str) -> llmnb.Model:
    return llmnb.load(ROOT / "data" / "models" / f"{name}.gguf")


# --- roofline --------------------------------------------------------------------------

def test_paper_intensity_reproduces_equations_1_and_2() -> None:
    # eq. 2 with N = K = 4096: 2NKB / ((NK + KB) b); the paper's approximations 2/b and 2B/b
    n = k = 4096
    assert rl.paper_intensity(n, k, 1, 0.5) == pytest.approx(2 * n * k / ((n * k + k) * 0.5))
    assert rl.paper_intensity(n, k, 1, 0.5) == pytest.approx(4.0, rel=1e-3)       # "AI_AR ~ 4"
    assert rl.paper_intensity(n, k, 64, 0.5) == pytest.approx(256.0, rel=0.02)    # "~ 256"
    assert rl.paper_intensity(n, k, 256, 0.5) == pytest.approx(1024.0, rel=0.06)  # "~ 1024"


def test_layer_and_head_weights_of_smollm2_by_hand() -> None:
    assert sum(n * k for _, n, k in rl.layer_matrices(SMOLLM2)) == LAYER == 3_538_944
    assert rl.streamed_weights(SMOLLM2) == 30 * LAYER + HEAD == 134_479_872


def test_ar_decode_cost_of_smollm2_by_hand() -> None:
    w = rl.ar_decode(SMOLLM2, 4.0, context=0)
    # one token: 2 FLOPs per weight, plus scores and values over 1 key: 4 * 9 heads * 64 * 30
    assert w.flops == 2 * (30 * LAYER + HEAD) + 4 * 9 * 64 * 30
    assert w.weight_bytes == 4.0 * (30 * LAYER + HEAD)
    # activations in + out of each matrix, per layer: (576+576) + 2(192+576) + (576+576)
    # + 2(1536+576) + (576+1536) = 10176 floats; head 576 in, 49152 out; K and V of 1 token
    assert w.other_bytes == 4 * (30 * 10176 + 576 + 49152) + 4 * 2 * 3 * 64 * 30
    assert w.intensity == pytest.approx(0.5, rel=0.01)                  # ~ 2 / b with b = 4
    assert rl.ar_decode(SMOLLM2, rl.bytes_per_weight("Q4_K")).intensity == pytest.approx(
        2 / 0.5625, rel=0.05)


def test_diffusion_step_prefill_and_verify_counts() -> None:
    n = 32 + 64
    step = rl.diffusion_step(SMOLLM2, 4.0, 64, prompt_tokens=32)
    # all 96 canvas tokens through every layer; all 96 x 96 pairs attend; the head on 64 rows
    assert step.flops == 2 * n * 30 * LAYER + 4 * n * n * 9 * 64 * 30 + 2 * 64 * HEAD
    assert step.tokens == n
    pre = rl.prefill(SMOLLM2, 4.0, 96)
    assert pre.flops == 2 * n * 30 * LAYER + 4 * (n * (n + 1) // 2) * 9 * 64 * 30 + 2 * HEAD
    assert rl.verify_batch(SMOLLM2, 4.0, 1, context=10) == rl.forward_cost(
        SMOLLM2, "verify K=1", 4.0, 1, 10, True, 1)
    one_row = rl.verify_batch(SMOLLM2, 4.0, 1, context=10)
    assert one_row.flops == rl.ar_decode(SMOLLM2, 4.0, 10).flops
    # more tokens per forward, more FLOPs per byte: the regime inversion in one line
    ais = [rl.diffusion_step(SMOLLM2, 0.5625, b, 32).intensity for b in (1, 16, 64, 256)]
    assert ais == sorted(ais) and ais[-1] > 40 * rl.ar_decode(SMOLLM2, 0.5625).intensity


def test_roof_limits_and_placement() -> None:
    roof = rl.Roof(peak_flops=200e9, bandwidth=40e9)
    assert roof.ridge == 5.0
    assert roof.attainable(1.0) == 40e9 and roof.attainable(100.0) == 200e9
    assert roof.seconds(200e9, 1.0) == 1.0 and roof.seconds(1.0, 80e9) == 2.0
    decode = rl.ar_decode(SMOLLM2, 4.0)
    assert decode.bound(roof) == "memory"
    assert rl.diffusion_step(SMOLLM2, 4.0, 64, 32).bound(roof) == "compute"
    p = rl.place(decode, 2 * decode.seconds(roof), roof)
    assert p.fraction == pytest.approx(0.5) and p.bound == "memory"
    assert p.achieved_flops == pytest.approx(decode.flops / p.measured_s)
    with pytest.raises(UsageError, match="positive time"):
        rl.place(decode, 0.0, roof)


def test_bytes_per_weight_from_quant_formats() -> None:
    assert rl.bytes_per_weight("F32") == 4.0 and rl.bytes_per_weight("F16") == 2.0
    assert rl.bytes_per_weight("Q8_0") == 34 / 32 and rl.bytes_per_weight("Q4_K") == 144 / 256
    assert rl.bytes_per_weight(0.5) == 0.5
    with pytest.raises(UsageError):
        rl.bytes_per_weight(-1.0)
    with pytest.raises(llmnb.LLMNBError, match="unknown tensor type"):
        rl.bytes_per_weight("Q9_X")


# --- machine ---------------------------------------------------------------------------

class FakeClock:
    """A ``time.perf_counter`` that moves `step` seconds per call: whatever the work between
    two calls costs, it took `step`. `step` may be changed between measurements."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.calls = 0.0, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.calls += 1
        return self.now


def test_median_time_takes_the_median_after_untimed_warmups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    ticks = iter([0.0, 1.0, 10.0, 10.5, 20.0, 24.0])           # durations 1, 0.5 and 4
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    ran: list[int] = []
    assert timing.median_time(lambda: ran.append(1), repeats=3, warmup=2) == 1.0
    assert len(ran) == 5


def test_machine_probe_turns_timings_into_figures_by_the_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "perf_counter", FakeClock(0.5))  # every timed kernel takes 0.5 s
    f = machine.probe(threads=[1], sizes=TINY, cache=False)
    assert isinstance(f.cpu, str) and f.cpu
    assert isinstance(f.physical_cores, int) and 1 <= f.physical_cores <= f.logical_cpus
    assert all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in f.caches.items())
    assert f.threads == [1]
    mib = 1 << 20                    # TINY: sgemm n = 64, 1 MiB arrays and GEMV matrix
    assert f.sgemm_gflops[1] == pytest.approx(2 * 64 ** 3 / 0.5 / 1e9)     # 2 n^3 FLOPs
    assert f.gemv_gbs[1] == pytest.approx(mib / 0.5 / 1e9)                 # the matrix, once
    assert f.copy_gbs[1] == pytest.approx(2 * mib / 0.5 / 1e9)             # read b, write a
    assert f.triad_gbs[1] == pytest.approx(3 * mib / 0.5 / 1e9)            # read b, c, write a
    # the curve: 16 KiB to 1 MiB, each sample as many passes as read 128 MiB, each 0.5 s
    sizes = [p.nbytes for p in f.curve[1]]
    assert sizes[0] == 16 << 10 and sizes[-1] == mib and sizes == sorted(set(sizes))
    for p in f.curve[1]:
        assert p.passes == -(-(128 * mib) // p.nbytes)
        assert p.gbs == pytest.approx(p.nbytes * p.passes / 0.5 / 1e9) == p.low == p.high
    # every sample reads about 128 MiB in 0.5 s: a flat curve, whose plateau is the read roof
    assert f.read_gbs[1] == pytest.approx(128 * mib / 0.5 / 1e9, rel=0.05)
    assert f.read_gbs[1] == f.plateau(1).gbs and f.plateau(1).edge is None
    assert f.where(mib, 1) == "memory" and f.measured.endswith("+00:00")
    roof = f.roof(1)
    assert roof.peak_flops == f.sgemm_gflops[1] * 1e9 and roof.bandwidth == f.read_gbs[1] * 1e9
    assert f.roof(1, "triad").bandwidth == f.triad_gbs[1] * 1e9
    assert f.roof(1, "gemv").bandwidth == f.gemv_gbs[1] * 1e9
    with pytest.raises(UsageError, match="no measurement at 3 threads"):
        f.roof(3)
    assert machine.facts_from_json(json.loads(json.dumps(f.to_json()))) == f
    assert f.cpu in "\n".join(f.lines())


def test_read_bandwidth_is_the_best_read_kernel_by_bytes_over_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "perf_counter", FakeClock(0.25))
    best, figures = peaks.read_bandwidth(8 << 20, repeats=1)
    assert figures == pytest.approx({"numpy_sum": (8 << 20) / 0.25, "numba_sum": (8 << 20) / 0.25})
    assert best == max(figures.values())


def test_machine_probe_is_cached_per_cpu_and_blas(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    first = machine.probe(threads=[1], sizes=TINY)
    path = machine.cache_path(first)
    assert path.parent == tmp_path / "machine" and path.is_file()
    assert first.blas_kernel.split()[0].lower() in path.name or not first.blas
    again = machine.probe(threads=[1], sizes=TINY)
    assert again.sgemm_gflops == first.sgemm_gflops and again.triad_gbs == first.triad_gbs
    assert again.curve == first.curve and again.measured == first.measured
    # one measurement whatever the sizes asked for: QUICK reads what TINY stored ...
    assert machine.probe(threads=[1], sizes=machine.ProbeSizes(64, 1 << 20, 1 << 20, 1, 1 << 20,
                                                               32 << 10)).measured == first.measured
    fresh = machine.probe(threads=[1], sizes=TINY, refresh=True)
    assert fresh.measured >= first.measured and fresh.curve != first.curve


def _stored(path: Path, change: dict[str, object]) -> None:
    data = json.loads(path.read_text())
    data["facts"] |= change
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("change, why", [
    ({}, ""),
    ({"measured": "2026-01-01T00:00:00+00:00"}, "older than 7 days"),
    ({"memory_bytes": 1}, "fingerprint changed"),
    ({"kernel_isa": "another"}, "fingerprint changed"),
    ({"curve_target": 1 << 19}, "stops short"),
    ({"sgemm_gflops": {"2": 1.0}}, "no measurement at 1 threads"),
])
def test_a_stored_measurement_serves_until_stale_or_another_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, object],
        why: str) -> None:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    first = machine.probe(threads=[1], sizes=TINY)
    _stored(machine.cache_path(first), change)
    stored = machine.facts_from_json(json.loads(machine.cache_path(first).read_text())["facts"])
    assert why in machine.stale(stored, machine.describe(TINY), [1]) and \
        bool(why) == bool(machine.stale(stored, machine.describe(TINY), [1]))
    monkeypatch.setattr(machine, "measure", lambda f, t, p=None: setattr(f, "measured", "new")
                        or f)
    assert (machine.probe(threads=[1], sizes=TINY).measured == "new") == bool(why)


# --- the read curve's plateau, on made-up curves ---------------------------------------

def curve(gbs: dict[int, float], spread: float = 0.02) -> list[peaks.CurvePoint]:
    """Points at each size (MiB) with the given GB/s and a quartile spread of +-`spread`."""
    return [peaks.CurvePoint(m << 20, g, g * (1 - spread), g * (1 + spread), 1, 5)
            for m, g in gbs.items()]


SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def test_a_flat_curve_is_all_plateau_and_has_no_cache_edge() -> None:
    p = peaks.plateau(curve({m: 10.0 for m in SIZES}))
    assert p.gbs == 10.0 and p.start == 1 << 20 and p.points == len(SIZES) and p.flat
    assert p.edge is None and p.holds(1 << 20) == "memory"


def test_an_l3_step_ends_the_plateau_and_is_the_cache_edge() -> None:
    # 30 GB/s up to 256 MiB (an L3), 10 GB/s from 512 MiB on
    p = peaks.plateau(curve({m: 30.0 if m <= 256 else 10.0 for m in SIZES}))
    assert p.gbs == 10.0 and p.start == 512 << 20 and p.points == 3 and p.flat
    assert p.edge == 256 << 20
    assert p.holds(256 << 20) == "cache" and p.holds((256 << 20) + 1) == "memory"
    # a step of less than the tolerance is no cache: all plateau
    small = peaks.plateau(curve({m: 11.5 if m <= 256 else 10.0 for m in SIZES}))
    assert small.edge is None and small.start == 1 << 20
    # the curve still falling at its largest sizes: too few points to call it flat
    falling = peaks.plateau(curve({m: 30.0 if m <= 1024 else 10.0 for m in SIZES}))
    assert falling.points == 1 and not falling.flat and falling.edge == 1024 << 20


def test_a_noisy_tail_keeps_its_plateau_and_a_clear_step_still_ends_it() -> None:
    gbs = {m: 30.0 if m <= 64 else 10.0 for m in SIZES}
    gbs[512] = 7.0                              # a neighbour's burst: clearly slow, skipped
    gbs[1024] = 11.5                            # within the tolerance
    p = peaks.plateau(curve(gbs))
    assert p.start == 128 << 20 and p.points == 4 and p.edge == 64 << 20 and p.gbs == 10.0
    # a high median with a wide spread is not clearly above: still plateau
    wide = curve(gbs)
    wide[SIZES.index(256)] = peaks.CurvePoint(256 << 20, 13.5, 11.0, 16.0, 1, 5)
    assert peaks.plateau(wide).start == 128 << 20
    # the same median with a narrow spread is clearly above: it ends the plateau there
    narrow = curve(gbs)
    narrow[SIZES.index(256)] = peaks.CurvePoint(256 << 20, 14.5, 14.3, 14.7, 1, 5)
    q = peaks.plateau(narrow)                   # (512 MiB is the slow point: skipped)
    assert q.start == 1024 << 20 and q.edge == 256 << 20 and q.points == 2 and not q.flat
    with pytest.raises(UsageError, match="no points"):
        peaks.plateau([])


def test_where_and_residency_read_the_curve_not_the_reported_caches() -> None:
    f = facts_for_widgets()
    f.caches = {"L1d": 48 << 10, "L3": 32 << 20}           # the OS says 32 MiB of L3 ...
    f.curve = {1: curve({m: 30.0 if m <= 256 else 10.0 for m in SIZES}),   # ... the curve 256
               2: curve({m: 20.0 for m in SIZES})}
    assert f.where(97e6, 1) == "cache" and f.where(600e6, 1) == "memory"
    assert f.where(97e6, 2) == "memory"
    assert "97 MB fits in what the read curve shows as cache" in f.residency(97e6, 1)
    assert "reads from cache, not memory" in f.residency(97e6, 1)
    assert "reads from memory" in f.residency(600e6, 1) and "10.0 GB/s" in f.residency(600e6, 1)
    assert "no size above its plateau" in f.residency(97e6, 2)
    with pytest.raises(UsageError, match="no measurement at 4 threads"):
        f.where(1e6, 4)


def test_curve_sizes_are_log_spaced_pages_from_smallest_to_largest() -> None:
    sizes = peaks.curve_sizes(1 << 20)
    assert sizes[0] == 16 << 10 and sizes[-1] == 1 << 20 and len(sizes) == 13
    assert all(s % 4096 == 0 for s in sizes) and sizes == sorted(set(sizes))
    assert peaks.curve_sizes(3 << 20)[-1] == 3 << 20
    assert machine.curve_target({"L3": 480 << 20}) == 3840 << 20
    assert machine.curve_target({"L3": 8 << 20}) == 1 << 30
    with pytest.raises(UsageError, match="curve_sizes"):
        peaks.curve_sizes(1024)


def test_cache_sizes_and_default_thread_counts() -> None:
    assert machine._size_bytes("48K") == 48 << 10 and machine._size_bytes("32768K") == 32 << 20
    assert machine._size_bytes("junk") == 0
    assert machine.default_thread_counts(1) == [1]
    assert machine.default_thread_counts(2) == [1, 2]
    assert machine.default_thread_counts(12) == [1, 2, 4, 8, 12]
    with pytest.raises(UsageError, match="kind"):
        peaks.stream_bandwidth("scale", 1 << 16)


# --- scaling ---------------------------------------------------------------------------

def test_thread_sweep_streams_points_and_scales_each_kind_by_its_first_thread_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    # One decode round and one denoising step each lie between two clock calls, so each
    # measurement takes the clock's step: 1 s at 1 thread; then AR 0.5 s and a step 0.25 s at
    # 2 threads (the callback sets the step for the measurement after the point it sees).
    clock = FakeClock(1.0)
    monkeypatch.setattr(time, "perf_counter", clock)
    after = {(AR, 1): 1.0, (DIFFUSION, 1): 0.5, (AR, 2): 0.25}
    seen: list[tuple[ScalingPoint, int, int]] = []

    def on_point(p: ScalingPoint, i: int, n: int) -> None:
        seen.append((p, i, n))
        clock.step = after.get((p.kind, p.threads), clock.step)

    points = thread_sweep(tiny("tiny-ar"), tiny("tiny-llada"), [1, 2], gen_length=8,
                          prompt_tokens=8, decode_tokens=4, steps=2, repeats=1, on_point=on_point)
    assert [(p.kind, p.threads, i, n) for p, i, n in seen] == [
        (AR, 1, 1, 4), (DIFFUSION, 1, 2, 4), (AR, 2, 3, 4), (DIFFUSION, 2, 4, 4)]
    assert [p for p, _, _ in seen] == points
    ar1, diff1, ar2, diff2 = points
    assert [p.seconds for p in points] == pytest.approx([1.0 / 4, 1.0, 0.5 / 4, 0.25])
    assert ar1.tok_s == pytest.approx(4.0) and ar2.tok_s == pytest.approx(8.0)     # 1 / seconds
    assert diff1.tok_s == pytest.approx(8 / (2 * 1.0))
    assert diff2.tok_s == pytest.approx(8 / (2 * 0.25))
    assert ar1.tokens == 1 and diff1.tokens == 16                                  # prompt + B
    assert [p.scaling for p in points] == pytest.approx([1.0, 1.0, 2.0, 4.0])
    one, two = scaling_rows(points)
    assert (one["threads"], two["threads"]) == (1, 2)
    assert two["ar_decode_tok_s"] == pytest.approx(8.0) and two["ar_scaling"] == pytest.approx(2.0)
    assert two["diffusion_step_ms"] == pytest.approx(250.0)
    assert two["diffusion_scaling"] == pytest.approx(4.0)


def test_thread_sweep_refuses_bad_input() -> None:
    with pytest.raises(UsageError, match="positive thread counts"):
        thread_sweep(tiny("tiny-ar"), None, [0])
    with pytest.raises(UsageError, match="an AR model, a diffusion model or both"):
        thread_sweep(None, None, [1])


def test_timers_refuse_sizes_below_one() -> None:
    ar, llada = tiny("tiny-ar"), tiny("tiny-llada")
    with pytest.raises(UsageError, match="decode_timings: .* got prompt 4, decode 0, repeats 2"):
        decode_timings(ar, 4, 0, 2)
    with pytest.raises(UsageError, match="diffusion_step_timings: .* got B 8, prompt 4, "
                                         "repeats 0"):
        diffusion_step_timings(llada, 8, 4, 0)


def test_decode_and_step_timing_keep_every_run_per_token_and_per_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    ar, llada = tiny("tiny-ar"), tiny("tiny-llada")
    with pytest.raises(UsageError, match="decode_timing: repeats=4; expected at least 5"):
        decode_timing(ar, 4, 2, repeats=4)
    with pytest.raises(UsageError, match="step_timing: repeats=3"):
        step_timing(llada, 8, 4, repeats=3)
    monkeypatch.setattr(time, "perf_counter", FakeClock(1.0))
    t = decode_timing(ar, 4, 2)                   # each phase between two clock calls: 1 s
    assert t.seconds == pytest.approx((0.5,) * 5)  # the decode's 1 s over 2 tokens, 5 runs
    s = step_timing(llada, 8, 4, repeats=6)
    assert len(s.seconds) == 6 and s.median > 0


# --- widgets ---------------------------------------------------------------------------

def facts_for_widgets() -> machine.MachineFacts:
    """Facts with made-up roofs (the widgets only draw them; nothing is measured here)."""
    f = machine.describe(TINY)
    f.sgemm_gflops, f.gemv_gbs = {1: 100.0, 2: 190.0}, {1: 30.0, 2: 45.0}
    f.copy_gbs, f.triad_gbs = {1: 20.0, 2: 25.0}, {1: 18.0, 2: 24.0}
    f.read_gbs = {1: 32.0, 2: 50.0}
    f.curve = {n: [peaks.CurvePoint(m << 20, g, g, g, 1, 5) for m in (1, 2, 4)]
               for n, g in f.read_gbs.items()}
    return f


def test_plot_roofline_draws_roof_workloads_and_points() -> None:
    from llmnb.widgets import figure_png, plot_roofline

    roof = rl.Roof(100e9, 30e9, "test")
    decode = rl.ar_decode(SMOLLM2, 4.0)
    fig = plot_roofline(roof, [decode, rl.diffusion_step(SMOLLM2, 4.0, 64, 32)],
                        [rl.place(decode, 3 * decode.seconds(roof), roof)])
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.get_legend().get_texts()) == 2
    assert any("33% of roof" in t.get_text() for t in ax.texts)
    assert figure_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.figure import Figure
    mine = Figure()
    ax = mine.add_subplot()
    assert plot_roofline(roof, ax=ax) is mine and ax.get_xscale() == "log"


def test_plot_scaling_draws_both_curves_and_the_ideal() -> None:
    from llmnb.widgets import plot_scaling

    pts = [ScalingPoint(AR, 1, 0.03, 33.0, 1), ScalingPoint(DIFFUSION, 1, 0.3, 13.0, 96),
           ScalingPoint(AR, 2, 0.02, 50.0, 1, 1.5), ScalingPoint(DIFFUSION, 2, 0.16, 25.0, 96, 1.9)]
    fig = plot_scaling(pts, [1, 2])
    speed, factor = fig.axes
    assert len(speed.lines) == 2 and len(factor.lines) == 3
    assert list(factor.lines[2].get_ydata()) == [1.0, 2.0]
    from matplotlib.figure import Figure
    mine = Figure()
    left, right = mine.subplots(1, 2)
    assert plot_scaling(pts, [1, 2], axes=(left, right)) is mine and len(right.lines) == 3


def test_roofline_explorer_builds_and_redraws_on_b() -> None:
    from llmnb.widgets import roofline_explorer

    box = roofline_explorer(facts_for_widgets(), SMOLLM2)
    assert "llmnb-roofline-explorer" in box._dom_classes
    sliders = {w.description: w for w in box.children[0].children}
    assert set(sliders) == {"B", "bytes/weight", "threads"}
    image, text = box.children[1], box.children[2]
    before, before_text = image.value, text.value
    sliders["B"].value = 256
    assert image.value != before and "B=256" in text.value and text.value != before_text


def test_scaling_runner_builds_and_its_button_runs_a_sweep() -> None:
    from llmnb.widgets import scaling_runner

    box = scaling_runner(tiny("tiny-ar"), tiny("tiny-llada"), [1], gen_length=8, repeats=1)
    assert "llmnb-scaling-runner" in box._dom_classes
    button, progress, status = box.children[0].children
    image = box.children[1]
    before = image.value
    button.click()
    assert progress.value == progress.max == 2
    assert status.value.startswith("2 of 2") and image.value != before
    assert not button.disabled


# --- llmnb bench -----------------------------------------------------------------------

def test_bench_command_offers_every_registered_bench_and_all() -> None:
    from llmnb.cli import build_parser
    from llmnb.perf.bench import BENCHES

    assert {"gguf", "quant", "ar", "diffusion", "scaling"} <= set(BENCHES)
    parser = build_parser()
    a = parser.parse_args(["bench", "scaling", "--json", "--threads", "1", "2"])
    assert (a.what, a.json, a.threads) == ("scaling", True, [1, 2])
    assert parser.parse_args(["bench"]).what == "all"
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["bench", "roofs"])
    assert e.value.code == 2


def test_a_bench_worker_imports_the_installed_llmnb_not_a_folder_in_the_current_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmnb.perf.inputs import data_dir
    from llmnb.perf.worker import run_worker

    shadow = tmp_path / "llmnb"                      # like the source tree beside a compiled build
    shadow.mkdir()
    (shadow / "__init__.py").write_text(
        "raise ImportError('the folder in the current directory')\n")
    monkeypatch.chdir(tmp_path)
    where = run_worker("llmnb.perf.machine", "__import__('llmnb').__file__", "test")
    assert Path(where).resolve() == Path(llmnb.__file__).resolve()
    assert data_dir() is None                        # no data/ here, and no LLMNB_DATA


def test_the_readme_benchmark_section_is_what_bench_readme_writes_from_docs_bench_json() -> None:
    import importlib.util

    root = Path(__file__).parent.parent
    spec = importlib.util.spec_from_file_location("bench_readme",
                                                  root / "tools" / "bench_readme.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    data = json.loads((root / "docs" / "bench.json").read_text())
    readme = (root / "README.md").read_text()
    lines = [ln for ln in mod.markdown(data, Path("docs/benchmarks.png")).splitlines()
             if ln and not ln.startswith("Produced by")]
    assert len(lines) > 40
    missing = [ln for ln in lines if ln not in readme]
    assert not missing, ("README.md differs from tools/bench_readme.py docs/bench.json: "
                         f"{missing[:3]}")


def test_verify_costs_are_measured_against_a_plain_step_on_tiny_ar_for_each_path() -> None:
    from llmnb.perf.bench_spec import PATHS, verify_costs

    rows = verify_costs(str(Path(__file__).parent.parent / "data" / "models" / "tiny-ar.gguf"),
                        rows=(1, 3, 9), repeats=1, context=20, paths=PATHS)
    assert [(r["path"], r["rows"]) for r in rows] == [(p, t) for p in PATHS for t in (1, 3, 9)]
    assert all(r["ms"] > 0 for r in rows)


def test_verify_costs_divide_each_batch_by_the_plain_step_of_its_own_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from llmnb.perf.bench_spec import IN_A_ROW, verify_costs

    # the clock is read twice around each timed call group (IN_A_ROW - 1 calls, after one
    # untimed): per path a plain step, then a batch of 1, 3 and 9 rows. X@W's step and its
    # batches of 3 and 9 take 2, 3, 6 ms a call (its one-row batch 5); W@X.T's 4, 4, 10 (9)
    durations = [(IN_A_ROW - 1) * d for d in (0.002, 0.005, 0.003, 0.006,
                                              0.004, 0.009, 0.004, 0.010)]
    ticks = iter([t for k, d in enumerate(durations) for t in (10.0 * k, 10.0 * k + d)])
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    rows = verify_costs(str(ROOT / "data" / "models" / "tiny-ar.gguf"), rows=(1, 3, 9),
                        repeats=1, context=20, paths=("X@W", "W@X.T"))
    assert [(r["path"], r["rows"]) for r in rows] == [(p, t) for p in ("X@W", "W@X.T")
                                                      for t in (1, 3, 9)]
    assert [r["ms"] for r in rows] == pytest.approx([2.0, 3.0, 6.0, 4.0, 4.0, 10.0])
    assert [r["decode_steps"] for r in rows] == pytest.approx([1.0, 1.5, 3.0, 1.0, 1.0, 2.5])


def test_plot_read_curve_marks_the_reported_caches_the_plateau_and_the_edge() -> None:
    from llmnb.widgets.roofline import plot_read_curve

    f = facts_for_widgets()
    f.caches = {"L1d": 48 << 10, "L1i": 32 << 10, "L2": 2 << 20, "L3": 480 << 20}
    f.curve = {1: curve({m: 30.0 if m <= 256 else 10.0 for m in SIZES}),
               2: curve({m: 20.0 for m in SIZES})}
    fig = plot_read_curve(f)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 2
    labels = [t.get_text() for t in ax.texts]
    assert "L3 480 MiB (reported)" in labels and not any(t.startswith("L1i") for t in labels)
    assert "plateau 10.0 GB/s" in labels and "plateau 20.0 GB/s" in labels
    edge_marks = [ln for ln in ax.lines if list(ln.get_xdata()) == [256 << 20]]
    assert len(edge_marks) == 1                  # the 1-thread curve's cache edge; none at 2
