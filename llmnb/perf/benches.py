"""The benches of ``llmnb bench``, by name, with the title each prints: data only, so that the
command's parser lists them without importing one (``bench.py`` runs them, in this order)."""

BENCH_TITLES: dict[str, str] = {
    "gguf": "gguf: open a model file, llmnb vs gguf-py GGUFReader (ratio = speed-up)",
    "quant": "quant: llmnb vs gguf.quants (ratio = speed-up), 1 thread; then the kernels: "
             "matrix-vector product per type, GB/s of the bytes read, ratio to numpy's float32 "
             "GEMV (same shape, same run)",
    "ar": "ar: SmolLM2-135M (and Qwen2.5-Coder-0.5B if pulled), prompt 128 + decode 32 tokens, "
          "quantized and f32 weights; roofline = read bandwidth / weight bytes read per token",
    "diffusion": "diffusion: one uncached step of SmolLM2-135M as a llada file, prompt 32 + B "
                 "masked; mfu = achieved GFLOP/s / sgemm GFLOP/s measured in the same run "
                 "(a fraction of measured sgemm, not of a theoretical peak)",
    "cache": "cache: inter-step K/V cache on the tiny diffusion models, up to 40 held-out "
             "prompts of each kind (single-, multi-answer), 48 positions, 16 steps, 1 thread; "
             "speed-up, fidelity (tokens equal) and validity against the uncached run with "
             "the same blocks; entropy_exit's mean steps; canvas and useful tok/s",
    "ladder": "ladder: training-free parallel decoding on the tiny diffusion models, up to 32 "
              "held-out prompts of each kind, 48 positions, 1 thread; per method forwards per "
              "answer (NFE), tokens per forward, wall time, validity and fidelity against "
              "16 steps of low_confidence",
    "scaling": "scaling: AR decode vs diffusion step (B=64, prompt 32) per thread count; "
               "scaling = tok/s over tok/s at the first thread count",
    "kv": "kv: streaming perplexity vs KV budget (Initial-Key Cache, StreamingLLM, H2O), "
          "SmolLM2-135M, 4 windows of 512 tokens spread over persuasion.txt: per policy the mean "
          "perplexity and change against full attention with their min and max over the "
          "windows, half rule, 1 thread",
    "spec": "spec: speculative vs plain greedy decoding, same tokens asserted; speed-up = plain / "
            "speculative wall time of the whole generate call (median of at most 3 runs after a "
            "warm-up), geometric mean over a set's prompts",
    "numexpr": "numexpr: llmnb's own elementwise work over large arrays (whole-tensor dequantize, "
               "perplexity's NLL, diffusion's entropy, the k-quant search's error), numpy as "
               "llmnb runs it against one numexpr expression, same result; ratio = numpy / "
               "numexpr time",
    "compiled": "compiled: what mypyc buys, the installed compiled llmnb against the same source "
                "interpreted, in the same run, 1 thread; speedup = pure / compiled ms, each "
                "workload's output equal in both builds (checked)",
}
