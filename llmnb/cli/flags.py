"""Flag values and flag groups that several ``llmnb`` commands share."""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable

AUTO_WEIGHTS = "quantized for block-quantized files (Q4_0 ... Q6_K), f32 for float ones"
AUTO_BATCHED = ("f32 when the float32 weights fit in memory (these passes cover many tokens "
                "at once and are compute-bound), else quantized")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= `low`."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {s!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(
                f"expected a positive number, got {v}" if low == 1
                else f"expected {low} or more, got {v}")
        return v
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def utf8_text(s: str) -> str:
    """An argparse type: text given as UTF-8. Python decodes a command line's bytes with
    surrogateescape, so a byte that is not UTF-8 arrives as a lone surrogate; it is refused here,
    named by its value and offset, rather than deep inside the tokenizer."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(s)                          # the bytes as the shell passed them
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise argparse.ArgumentTypeError(
                f"expected UTF-8 text; byte {raw[e.start]:#04x} at offset {e.start} "
                f"is not UTF-8 ({e.reason})") from None
        raise argparse.ArgumentTypeError("expected UTF-8 text") from None
    return s


def non_negative_float(s: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not v >= 0.0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {s}")
    return v


def probability(s: str) -> float:
    """An argparse type: a number in 0..1."""
    v = non_negative_float(s)
    if v > 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in 0..1, got {s}")
    return v


def add_weights_flag(s: argparse.ArgumentParser, help_default: str) -> None:
    s.add_argument("--weights", choices=["auto", "quantized", "quantized-float", "f32"],
                   default="auto",
                   help="quantized: multiply the file's blocks directly, activations quantized "
                        "to 8 bits and integer products where the CPU has them (llmnb.kernels; "
                        "LLMNB_KERNELS=float|avx2|vnni256|vnni picks the kernels); "
                        "quantized-float: the blocks with float activations; f32: dequantize "
                        "to float32 (the reference path); auto (default): " + help_default)
