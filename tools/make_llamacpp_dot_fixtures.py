"""Record llama.cpp's own activation quantization and block dot products, for llmnb's integer path.

For each weight format with an integer kernel, seeded random weights (quantized by llmnb, which
is bit-exact with gguf-py) and seeded random activations are handed to the ggml CPU backend
through its type traits (``ggml_get_type_traits_cpu``): ``from_float`` of the format's
``vec_dot_type`` quantizes the activations (Q8_0, Q8_1 or Q8_K, the x86 code paths of the
local build) and ``vec_dot`` takes one output's dot product with them. The quantized
activation bytes (as a sha256) and the dot products are written to
``tests/fixtures/llamacpp/dot_products.json``; ``tests/test_integer_kernels.py`` checks llmnb's
quantizer and kernels against them without llama.cpp.

    python tools/make_llamacpp_dot_fixtures.py --lib /work/llama.cpp/build/bin/libggml-cpu.so
"""
from __future__ import annotations

import argparse
import ctypes as C
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmnb.gguf.constants import GGMLType as T  # noqa: E402
from llmnb.gguf.constants import type_name  # noqa: E402
from llmnb.quant import quantize  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "llamacpp" / "dot_products.json"
CASES = [(T.Q4_0, 576), (T.Q4_1, 576), (T.Q5_0, 896), (T.Q5_1, 576), (T.Q8_0, 576),
         (T.Q4_K, 768), (T.Q5_K, 768), (T.Q6_K, 768)]
N_OUT = 16
SCALES = (1.0, 40.0)          # activations of ordinary size, and with outliers of this size
VEC_BYTES = {8: 34, 9: 36, 15: 292}     # Q8_0, Q8_1, Q8_K block bytes per 32 / 32 / 256


class Traits(C.Structure):
    _fields_ = [("from_float", C.c_void_p), ("vec_dot", C.c_void_p), ("vec_dot_type", C.c_int),
                ("nrows", C.c_int64)]


def case_inputs(ggml_type: int, n_in: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The seeded weights (raw blocks) and activations (2 rows) of one case."""
    rng = np.random.default_rng(1000 * int(ggml_type) + n_in + int(scale))
    w = rng.standard_normal((N_OUT, n_in)).astype(np.float32)
    x = rng.standard_normal((2, n_in)).astype(np.float32)
    x[:, ::97] *= np.float32(scale)
    return quantize(w, ggml_type), x


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lib", required=True, help="libggml-cpu.so of a llama.cpp build")
    a = p.parse_args()
    lib = C.CDLL(a.lib)
    lib.ggml_cpu_init()
    lib.ggml_get_type_traits_cpu.restype = C.POINTER(Traits)
    from_float_t = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p, C.c_int64)
    dot_t = C.CFUNCTYPE(None, C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t,
                        C.c_void_p, C.c_size_t, C.c_int)
    cases = []
    for ggml_type, n_in in CASES:
        traits = lib.ggml_get_type_traits_cpu(int(ggml_type)).contents
        vt = traits.vec_dot_type
        from_float = from_float_t(lib.ggml_get_type_traits_cpu(vt).contents.from_float)
        dot = dot_t(traits.vec_dot)
        per = 256 if vt == 15 else 32
        for scale in SCALES:
            raw, x = case_inputs(ggml_type, n_in, scale)
            rows = raw.reshape(N_OUT, -1)
            digests, outs = [], []
            for row_x in x:
                yq = np.zeros(n_in // per * VEC_BYTES[vt], np.uint8)
                from_float(np.ascontiguousarray(row_x).ctypes.data, yq.ctypes.data, n_in)
                digests.append(hashlib.sha256(yq.tobytes()).hexdigest())
                out = C.c_float()
                vals = []
                for o in range(N_OUT):
                    w_row = np.ascontiguousarray(rows[o])
                    dot(n_in, C.byref(out), 0, w_row.ctypes.data, 0, yq.ctypes.data, 0, 1)
                    vals.append(float(out.value))
                outs.append(vals)
            cases.append({"type": type_name(ggml_type), "n_in": n_in, "scale": scale,
                          "vec_dot_type": vt, "activations_sha256": digests, "dot": outs})
            print(type_name(ggml_type), n_in, scale, "done", file=sys.stderr)
    OUT.write_text(json.dumps({"what": "llama.cpp's from_float (activations) and vec_dot (one "
                                       "output) on seeded inputs (tools/make_llamacpp_dot_fixtures.py)",
                               "n_out": N_OUT, "cases": cases}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
