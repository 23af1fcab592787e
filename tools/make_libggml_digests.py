"""sha256 digests of ggml's reference quantizers, the fixture tests/test_quant.py checks llmnb
against when no libggml is built.

ggml's ``quantize_row_<type>_ref`` (``ggml-quants.c``) is the reference llmnb's quantizers
reproduce byte for byte. For each of Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K and each input
below this tool calls it through ctypes in a local ``libggml-base.so`` and records the sha256
of the bytes it writes, with the sha256 of the input itself (so a changed input is told apart
from a changed quantizer):

    python tools/make_libggml_digests.py LIB            # (re)write tests/fixtures/libggml/
    python tools/make_libggml_digests.py LIB --check    # exit 1 if LIB disagrees with it

LIB is a llama.cpp build's ``build/bin/libggml-base.so`` (tests/fixtures/libggml/README.md
says which build made the committed file). The inputs are made here and imported by the test.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "libggml" / "quantize_ref.json"
F32 = npt.NDArray[np.float32]
# ggml type name -> (values per block, bytes per block); the names of its _ref functions
TYPES = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
         "Q8_0": (32, 34), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


def hashed_input() -> F32:
    """(64, 256) heavy-tailed values made from integer hashing only (no RNG, no libm): the
    same bits on every machine and numpy version."""
    i = np.arange(256 * 64, dtype=np.int64)
    h = (i * 2654435761 + 12345) % (1 << 32)
    u = (h.astype(np.float64) / 2**32 - 0.5).astype(np.float32)
    x = u * u * u * np.float32(8) * (1 + (i // 256 % 7)).astype(np.float32)
    return x.astype(np.float32).reshape(64, 256)


def edge_rows() -> F32:
    """Rows that exercise the corner cases of the reference rules (one 256-element row each)."""
    rows = np.zeros((8, 256), dtype=np.float32)                     # row 0: all zero
    rows[1] = 1.0                                                   # constant
    rows[1, 5] = -1.0                                               # +a and -a: first one wins
    rows[2] = -3.0
    rows[3] = (np.arange(256) % 32 - 16).astype(np.float32)         # exact rounding ties
    rows[4] = (np.arange(256) % 32).astype(np.float32) * 0.5 - 8
    rows[5, ::7] = 1e-30                                            # tiny values
    rows[6] = np.linspace(-1e4, 1e4, 256, dtype=np.float32)
    rows[7] = np.where(np.arange(256) % 2 == 0, 2.5, -2.5)
    return rows


def mixed_input() -> F32:
    """(308, 256): weight-like Gaussian rows, heavy-tailed Student-t rows, then edge_rows()."""
    rng = np.random.default_rng(7)
    return np.concatenate([rng.standard_normal((200, 256)).astype(np.float32) * 0.02,
                           (rng.standard_t(2, (100, 256)) * 0.05).astype(np.float32),
                           edge_rows()])


INPUTS: dict[str, Callable[[], F32]] = {"hashed": hashed_input, "mixed": mixed_input}


def sha256(a: npt.NDArray[np.generic]) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def load_libggml(path: str | os.PathLike[str]) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))


def ggml_quantize_ref(lib: ctypes.CDLL, x: F32, type_name: str) -> npt.NDArray[np.uint8]:
    """ggml's ``quantize_row_<type>_ref`` over every value of `x` (rows of whole blocks)."""
    block, size = TYPES[type_name]
    fn = getattr(lib, f"quantize_row_{type_name.lower().replace('_k', '_K')}_ref")
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    src = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros(src.size // block * size, dtype=np.uint8)
    fn(src.ctypes.data, out.ctypes.data, src.size)
    return out


def library_version(lib: ctypes.CDLL) -> str | None:
    """ggml's own version string, where the library exports ``ggml_version``."""
    try:
        fn = lib.ggml_version
    except AttributeError:
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    v = fn()
    return v.decode() if v else None


def digests(lib: ctypes.CDLL) -> dict[str, object]:
    inputs = {name: make() for name, make in INPUTS.items()}
    return {
        "what": "sha256 of ggml's quantize_row_<type>_ref output on each input (all rows, "
                "row-major), and the sha256 of each input's float32 bytes",
        "made_by": "python tools/make_libggml_digests.py LIB",
        "ggml_version": library_version(lib),
        "inputs": {name: sha256(x) for name, x in inputs.items()},
        "digests": {name: {t: sha256(ggml_quantize_ref(lib, x, t)) for t in TYPES}
                    for name, x in inputs.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lib", type=Path, help="a llama.cpp build's libggml-base.so")
    p.add_argument("--check", action="store_true",
                   help="compare with the committed fixture instead of writing it")
    a = p.parse_args(argv)
    if not a.lib.is_file():
        print(f"make_libggml_digests: {a.lib}: expected a libggml-base.so", file=sys.stderr)
        return 2
    made = digests(load_libggml(a.lib))
    if a.check:
        old = json.loads(FIXTURE.read_text())
        same = old["inputs"] == made["inputs"] and old["digests"] == made["digests"]
        print(f"{FIXTURE.relative_to(ROOT)}: {'the same' if same else 'DIFFERENT'} with {a.lib}")
        return 0 if same else 1
    from llmnb.output import atomic_path

    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(FIXTURE) as tmp:
        tmp.write_text(json.dumps(made, indent=1) + "\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
