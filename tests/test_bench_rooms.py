"""llmnb.perf's rooms: one module per bench behind one registry, one timing helper, one table
printer, one measurement of each regime, and no import cycle among llmnb's modules."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest

import llmnb
from llmnb.perf import table, timing

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llmnb"


def module_imports() -> dict[str, set[str]]:
    """Every llmnb module's llmnb imports, those inside functions included (a lazy import
    closes a cycle as surely as one at the top)."""
    names = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                wanted = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            else:
                continue
            deps |= {w for w in wanted if w in names and w != name}
        graph[name] = deps
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path of imports from `start` back to itself, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for dep in graph[node]:
            if dep == start:
                return path + [start]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, path + [dep]))
    return None


def test_no_perf_or_gguf_module_imports_itself_through_others() -> None:
    graph = module_imports()
    ours = [m for m in graph if m.startswith(("llmnb.perf.", "llmnb.gguf."))]
    assert "llmnb.perf.bench_ar" in ours and "llmnb.gguf.summary" in ours
    cycles = {m: c for m in ours if (c := cycle_through(graph, m)) is not None}
    assert not cycles, f"import cycles: {cycles}"
    # the registry reaches its benches only when one runs; no bench imports the registry
    assert not [m for m in ours
                if m.startswith("llmnb.perf.bench_") and "llmnb.perf.bench" in graph[m]]
    assert "llmnb.gguf.reader" not in graph["llmnb.gguf.summary"]


def test_every_registered_bench_is_a_module_with_a_run_function() -> None:
    from llmnb.perf.bench import BENCHES

    for name in BENCHES:
        module = importlib.import_module(f"llmnb.perf.bench_{name}")
        assert callable(getattr(module, "run" if name != "spec" else "bench_spec")), name


def test_a_skipped_bench_returns_no_rows_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from llmnb.perf.bench import BENCHES

    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))             # an empty cache: nothing pulled
    _, run = BENCHES["diffusion"]
    assert run(1, [1], None, None, None) is None
    assert "bench diffusion: smollm2-135m not pulled" in capsys.readouterr().err


class Clock:
    """time.perf_counter that advances by the next of `steps` at each read."""

    def __init__(self, steps: list[float]) -> None:
        self.now, self.steps, self.reads = 0.0, iter(steps), 0

    def __call__(self) -> float:
        self.now += next(self.steps)
        self.reads += 1
        return self.now


def test_median_times_alternates_the_functions_and_times_neither_warmups_nor_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    # two timed rounds of (a, b): each function between two reads, a before b in each round
    clock = Clock([0.0, 1.0, 0.0, 5.0, 0.0, 3.0, 0.0, 7.0])
    monkeypatch.setattr(time, "perf_counter", clock)
    calls: list[str] = []
    times = timing.median_times([lambda: calls.append("a"), lambda: calls.append("b")],
                                repeats=2, warmup=1, before=lambda: calls.append("before"))
    assert calls == ["before", "a", "b"] * 3
    assert times == [pytest.approx(2.0), pytest.approx(6.0)]     # medians of (1, 3) and (5, 7)
    assert clock.reads == 8                                       # warm-up and `before` untimed


def test_spec_time_prompt_times_alternating_rounds_and_gives_the_ratios_range(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llmnb.ar.drafters import make_drafter
    from llmnb.perf import bench_spec

    calls: list[tuple[int, int]] = []

    def timed_rounds(fns: list[Any], repeats: int, warmup: int = 1) -> list[list[float]]:
        calls.append((len(fns), warmup))
        for _ in range(repeats):
            for fn in fns:
                fn()
        return [[0.5, 0.55, 0.6, 0.7, 0.65], [0.2, 0.25, 0.2, 0.15, 0.18]]  # plain, speculative

    monkeypatch.setattr(bench_spec, "timed_rounds", timed_rounds)
    m = llmnb.load(str(ROOT / "data" / "models" / "tiny-ar.gguf"))
    row = bench_spec.time_prompt(m, "def add(a, b):", [make_drafter("lookup", m)], 8, repeats=5)
    assert calls == [(2, 0)]                  # plain and speculative alternate, warmed up before
    assert row["speedup_geomean"] == pytest.approx(3.0)                    # 0.6 / 0.2
    assert row["speedup_low"] == pytest.approx(0.55 / 0.2)                 # plain Q1 / spec Q3
    assert row["speedup_high"] == pytest.approx(0.65 / 0.18)               # plain Q3 / spec Q1
    assert row["plain_timing"].seconds == (0.5, 0.55, 0.6, 0.7, 0.65)
    n = len(row["reference"].tokens)
    assert row["plain_tok_s"] == pytest.approx(n / 0.6)
    assert row["spec_tok_s"] == pytest.approx(n / 0.2)
    assert row["result"].tokens == row["reference"].tokens and row["identical"]


def test_the_table_printer_starts_a_header_at_each_change_of_keys() -> None:
    rows: list[dict[str, Any]] = [{"model": "a", "tok_s": 12.34567}, {"model": "bb", "tok_s": 2.0},
                                  {"rows": 3, "faster": None}]
    lines = table.table_lines(rows)
    assert lines == [f"{'model':>12}  {'tok_s':>12}", f"{'a':>12}  {'12.35':>12}",
                     f"{'bb':>12}  {'2':>12}", f"{'rows':>12}  {'faster':>12}",
                     f"{'3':>12}  {'None':>12}"]


def test_the_quant_table_is_the_bench_table(capsys: pytest.CaptureFixture[str]) -> None:
    from llmnb.perf.bench_quant import format_rows

    text = format_rows([{"type": "Q4_0", "op": "dequantize", "n_elements": 2_000_000,
                         "llmnb_s": 0.002, "gguf_s": None, "ratio": None}])
    assert text.splitlines()[0].split() == ["type", "op", "llmnb_ms", "gguf_ms", "ratio",
                                            "llmnb_Melem_s"]
    assert text.splitlines()[1].split() == ["Q4_0", "dequantize", "2", "-", "-", "1000"]


def test_bench_ar_and_diffusion_time_with_the_thread_sweeps_functions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from llmnb.perf import bench_ar, bench_diffusion, bench_quant, scaling

    seen: list[tuple[Any, ...]] = []

    def decode_timings(model: llmnb.Model, p: int, d: int, r: int) -> tuple[float, float]:
        seen.append(("ar", p, d, r))
        return 0.5, 0.25

    def diffusion_step_timings(model: llmnb.Model, b: int, p: int, r: int,
                               beside: list[Any]) -> list[float]:
        seen.append(("diffusion", b, p, r, len(beside)))
        for fn in beside:
            fn()                                     # the products alone run on the model
        return [0.02, 0.015]

    monkeypatch.setattr(scaling, "decode_timings", decode_timings)
    monkeypatch.setattr(scaling, "diffusion_step_timings", diffusion_step_timings)
    monkeypatch.setattr(bench_quant, "first_calls", lambda: 0.0)
    monkeypatch.setattr(bench_diffusion, "sgemm_gflops", lambda repeats: 100.0)
    models = ROOT / "data" / "models"
    ar = bench_ar.worker(str(models / "tiny-ar.gguf"), 1, 3, "auto")
    assert ar["prefill_tok_s"] == pytest.approx(128 / 0.5)
    assert ar["decode_tok_s"] == pytest.approx(32 / 0.25)
    step = bench_diffusion.worker(str(models / "tiny-llada.gguf"), 1, 8, 3)
    assert step["step_ms"] == pytest.approx(20.0) and step["sgemm_peak_gflops"] == 100.0
    assert step["products_ms"] == pytest.approx(15.0)
    assert step["products_share"] == pytest.approx(0.75)
    assert seen == [("ar", 128, 32, 3), ("diffusion", 8, 32, 3, 1)]


def test_diffusion_products_are_the_steps_projections() -> None:
    """``bench_diffusion.products`` runs every layer's four projections on the step's rows,
    with the widths the forward gives them, through the model's own ``blocks.Linear``s."""
    from llmnb.perf import bench_diffusion

    m = llmnb.load(ROOT / "data" / "models" / "tiny-llada.gguf")
    c = m.config
    shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    class Recorder:
        def __init__(self, lin: Any) -> None:
            self.lin = lin

        def matmul(self, x: Any, out: Any = None) -> Any:
            shapes.append((x.shape, self.lin.w_t.shape))
            return self.lin.matmul(x, out)

    t = m.transformer
    t.linears = [tuple(Recorder(lin) for lin in four) for four in t.linears]
    bench_diffusion.products(m, 40, 8)()
    nq, nkv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
    one_layer = [((40, c.n_embd), (c.n_embd, nq + 2 * nkv)), ((40, nq), (nq, c.n_embd)),
                 ((40, c.n_embd), (c.n_embd, 2 * c.n_ff)), ((40, c.n_ff), (c.n_ff, c.n_embd))]
    assert shapes == one_layer * c.n_layer


# The one edge back: a PackedMatrix multiplies itself (``.matmul``) through the kernels, which
# it imports when first asked, so loading a quantized model does not load numba.
LAZY_BACK = {("llmnb.kernels.layout", "llmnb.kernels.product")}


def test_no_llmnb_module_imports_itself_through_others() -> None:
    graph = module_imports()
    for a, b in LAZY_BACK:
        assert b in graph[a], (a, b)                   # still there, else drop it from the list
        graph[a] = graph[a] - {b}
    cycles = {m: c for m in graph if (c := cycle_through(graph, m)) is not None}
    assert not cycles, f"import cycles: {cycles}"
