"""Record llama.cpp's token ids for a fixed set of strings: the tokenizer parity fixtures.

For each model and each string, runs the local ``llama-tokenize`` (vocabulary only, no
weights) twice — with ``--no-parse-special`` (control-token text stays text) and without it
(this llama.cpp's default: control-token text becomes control ids) — and records the ids and
the pieces' bytes concatenated (llama.cpp's own detokenization, to tell whether it round-trips).
Writes ``tests/fixtures/tokenizer/<name>_llamacpp_ids.json``.

    python tools/make_tokenizer_fixtures.py --llama-bin /work/llama.cpp/build/bin

Models: the hub's SmolLM2-135M, Qwen2.5-Coder-0.5B and Gemma 3 270M (``llmnb pull`` them
first), a tiny SentencePiece vocabulary of llmnb's own (written here), and llama.cpp's own
vocabulary-only test files, one per pre-tokenizer or vocabulary kind (``make vocab`` unpacks
them into the cache; ``--vocab-dir`` names another ``models/`` folder). Needs no network.
CI never runs this.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "tokenizer"

# Each string exercises one thing a tokenizer can get wrong.
STRINGS: list[str] = [
    "",                                                  # empty
    " ",                                                 # one space
    "   ",                                               # a run of spaces
    "\t",                                                # a tab
    "\n",                                                # a newline
    "\n\n\n",                                            # blank lines
    "\r\n",                                              # CRLF
    " \n \t\r\n  x",                                     # mixed whitespace then a letter
    "Hello world",
    " Hello world",                                      # leading space
    "Hello world  ",                                     # trailing spaces
    "Hello, World! How are you?",
    "HELLO hello HeLLo",                                 # case
    "I'm sure you'll see they've done it, isn't it? I'D",  # contractions (and upper case)
    "3.14159 and 1,000,000 and 2024-01-31",              # digits
    "$19.99, €5, ¥1000, 12% off",                        # money
    "1234567890123",                                     # a long number
    "def add(a, b):\n\treturn a + b\n",                  # code with a tab
    "if (x != y) {\r\n    printf(\"%d\\n\", x);\r\n}",     # C with CRLF and escapes
    "for i in range(10):\n        print(i)  # comment",  # deep indentation
    "    four spaces then text",
    "<div class=\"a\">&amp;</div>",                      # markup
    "https://example.com/path?q=1&r=two#frag",           # URL
    "user@example.org",
    "Café naïve résumé coöperate",                       # Latin accents (precomposed)
    "e\u0301 a\u0300 n\u0303",                           # combining accents
    "Äpfel Öl Übermaß straße",                           # German
    "Привет, мир! Как дела?",                            # Cyrillic
    "你好，世界！今天天气很好。",                         # Chinese
    "こんにちは世界、カタカナ",                           # Japanese
    "안녕하세요 세계",                                     # Korean
    "مرحبا بالعالم",                                     # Arabic
    "नमस्ते दुनिया",                                       # Devanagari
    "Γειά σου Κόσμε",                                    # Greek
    "שלום עולם",                                         # Hebrew
    "สวัสดีชาวโลก",                                       # Thai (no spaces)
    "🦙🚀 emoji 😀!",                                     # emoji
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs",                          # ZWJ sequence, skin tone
    "🇫🇷🇯🇵 flags",                                        # regional indicators
    "<|im_start|>user\nHi<|im_end|>",                    # ChatML markers as text
    "<|endoftext|>",                                     # a control token alone
    "<s>[INST] hi [/INST]</s>",                          # Llama 2 markers as text
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>",  # Llama 3 markers
    "a<|im_end|>b",                                      # a marker inside a word
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!???...,,,;;;",                                   # punctuation runs
    "    ",                                              # four spaces
    "\u00a0non-breaking\u00a0space",                     # NBSP
    "zero\u200bwidth",                                   # zero-width space
    "tab\tseparated\tvalues\n1\t2\t3",
    "The quick brown fox jumps over the lazy dog.",
    "ĠĊ literal byte-alphabet chars",                    # GPT-2's own alphabet as input
    "▁ sentencepiece space",                             # SentencePiece's space as input
]

# A tiny SentencePiece vocabulary of llmnb's own (no third-party vocabulary is committed):
# pieces are the frequent substrings of this text, scored by frequency x length, plus the
# 256 byte tokens, so every string tokenizes (via byte fallback where no piece fits).
TINY_SPM_CORPUS = """the quick brown fox jumps over the lazy dog. hello world, hello there!
the theory of the thing: they thought that these three threads were thin.
tokenizers split text into pieces; pieces merge by score. café naïve résumé.
def add(a, b): return a + b   # code has spaces and tabs	and newlines
numbers like 1234 and 3.14 and $19.99 appear too. I'm sure you'll see."""


def tiny_spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token_types) of the tiny SentencePiece vocabulary, deterministic."""
    from collections import Counter

    text = " " + TINY_SPM_CORPUS.replace("\n", " ")
    text = text.replace(" ", "\u2581")
    counts: Counter[str] = Counter()
    for n in range(2, 7):
        for i in range(len(text) - n + 1):
            sub = text[i:i + n]
            if "\u2581" in sub[1:]:
                continue            # a piece may start with '▁' but not contain one later
            counts[sub] += 1
    multi = sorted((c * len(p), p) for p, c in counts.items() if c >= 2)
    multi = [p for _, p in sorted(multi, key=lambda cp: (-cp[0], cp[1]))][:400]
    chars = sorted(set(text))
    tokens = ["<unk>", "<s>", "</s>", "<|ctrl|>", "<tool>"]
    types = [2, 3, 3, 3, 4]                       # UNKNOWN, CONTROL x3, USER_DEFINED
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256                            # BYTE
    body = chars + [p for p in multi if p not in chars]
    tokens += body
    types += [1] * len(body)
    scores = [0.0] * (5 + 256) + [-float(i) for i in range(len(body))]
    return tokens, scores, types


def write_tiny_spm(path: Path) -> None:
    """Write the tiny SentencePiece vocabulary as a vocabulary-only GGUF (arch llama)."""
    import gguf

    tokens, scores, types = tiny_spm_vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("llmnb tiny spm vocab")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


HUB_MODELS = {"smollm2": "smollm2-135m", "qwen2": "qwen2.5-coder-0.5b", "gemma3": "gemma3-270m"}
# llama.cpp's vocabulary test files (those with .inp/.out tests): label -> file
VOCABS = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
          "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
VOCAB_FILES = {"vocab_" + v.replace("-", "_"): f"ggml-vocab-{v}.gguf" for v in VOCABS}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_tokenize(exe: Path, model: Path, text: str, parse_special: bool,
                 ids: bool, bos: bool = True) -> bytes:
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        name = f.name
    cmd = [str(exe), "-m", str(model), "-f", name, "--no-escape", "--log-disable"]
    if ids:
        cmd.append("--ids")
    if not parse_special:
        cmd.append("--no-parse-special")   # this llama.cpp parses special text by default
    if not bos:
        cmd.append("--no-bos")
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, timeout=120).stdout
    finally:
        Path(name).unlink()
    return out


def pieces_text(out: bytes, ids: list[int]) -> str | None:
    """llama.cpp's pieces, concatenated, from ``llama-tokenize``'s ``%6d -> 'piece'`` lines;
    None if they are not valid UTF-8 together."""
    pos = 0
    data = bytearray()
    for k, tid in enumerate(ids):
        head = b"%6d -> '" % tid
        assert out.startswith(head, pos), (out[pos:pos + 40], tid)
        start = pos + len(head)
        if k + 1 < len(ids):
            end = out.index(b"'\n" + b"%6d -> '" % ids[k + 1], start)
        else:
            end = len(out) - 2
            assert out.endswith(b"'\n")
        data += out[start:end]
        pos = end + 2
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


class CliTokenizer:
    """llama.cpp's ids and pieces from the ``llama-tokenize`` binary, one process per call."""

    tool = "llama-tokenize (llama.cpp, MIT license); these ids are its output"

    def __init__(self, exe: Path, model: Path) -> None:
        self.exe, self.model = exe, model

    def ids(self, text: str, parse_special: bool) -> list[int]:
        return list(json.loads(run_tokenize(self.exe, self.model, text, parse_special, ids=True)))

    def pieces(self, text: str) -> str | None:
        """Pieces concatenated, without BOS and special parsing (None: not valid UTF-8)."""
        no_bos = json.loads(run_tokenize(self.exe, self.model, text, False, ids=True, bos=False))
        plain = run_tokenize(self.exe, self.model, text, False, ids=False, bos=False)
        return pieces_text(plain, no_bos)


class LibTokenizer:
    """The same, in this process through ``libllama.so`` (the vocabulary loaded once): the
    calls llama-tokenize makes, ``llama_tokenize(add_special = the file's add_bos,
    parse_special)`` and ``llama_token_to_piece(lstrip 0, special true)``."""

    tool = ("llama.cpp (MIT license) through libllama.so, the calls llama-tokenize makes; "
            "these ids are its output")

    def __init__(self, lib_path: Path, model: Path) -> None:
        import ctypes
        from make_llamacpp_references import _quiet, load_library

        self.lib = load_library(str(lib_path))
        self.lib.llama_backend_init()
        self.lib.llama_log_set(_quiet, None)
        params = self.lib.llama_model_default_params()
        params.vocab_only = True
        self.model = self.lib.llama_model_load_from_file(str(model).encode(), params)
        if not self.model:
            raise RuntimeError(f"libllama could not load {model}")
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.add_bos = bool(self.lib.llama_vocab_get_add_bos(self.vocab))
        self.ctypes = ctypes

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        raw = text.encode("utf-8")
        buf = (self.ctypes.c_int32 * (len(raw) + 8))()
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), add_special,
                                    parse_special)
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n}) on {text!r}")
        return list(buf[:n])

    def ids(self, text: str, parse_special: bool) -> list[int]:
        return self.tokenize(text, self.add_bos, parse_special)

    def pieces(self, text: str) -> str | None:
        from make_llamacpp_references import piece

        data = b"".join(piece(self.lib, self.vocab, t) for t in self.tokenize(text, False, False))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def close(self) -> None:
        self.lib.llama_model_free(self.model)


def record(tok: CliTokenizer | LibTokenizer, model: Path, label: str,
           version: str) -> dict[str, object]:
    cases = []
    for text in STRINGS:
        row: dict[str, object] = {"text": text}
        for key, special in (("ids", False), ("ids_parse_special", True)):
            row[key] = tok.ids(text, special)
        # detokenize without the BOS llama-tokenize may add: ids and pieces, both --no-bos
        row["llamacpp_detokenized"] = tok.pieces(text)
        cases.append(row)
    return {
        "model": label,
        "file": model.name,
        "sha256": sha256(model),
        "tool": tok.tool,
        "llama_cpp_version": version,
        "command": {
            "ids": "llama-tokenize -m FILE -f INPUT.txt --no-escape --log-disable --ids "
                   "--no-parse-special",
            "ids_parse_special": "llama-tokenize -m FILE -f INPUT.txt --no-escape --log-disable "
                                 "--ids",
            "llamacpp_detokenized": "llama-tokenize -m FILE -f INPUT.txt --no-escape "
                                    "--log-disable --no-parse-special --no-bos "
                                    "(pieces concatenated)",
            "bos": "added only when the file's tokenizer.ggml.add_bos_token says so",
        },
        "cases": cases,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", type=Path, default=Path("/work/llama.cpp/build/bin"))
    ap.add_argument("--vocab-dir", type=Path, default=None,
                    help="llama.cpp's models/ folder (ggml-vocab-*.gguf); default: where "
                         "`make vocab` unpacks them, if there")
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL",
                    help="record only these labels (e.g. vocab_gemma_4 smollm2)")
    ap.add_argument("--in-process", action="store_true",
                    help="call libllama.so (beside llama-tokenize) in this process instead of "
                         "running llama-tokenize per string: the same calls, the vocabulary "
                         "loaded once (minutes instead of hours for big vocabularies)")
    args = ap.parse_args()
    exe = args.llama_bin / "llama-tokenize"
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    version_text = (version.stdout + version.stderr).strip().replace("\n", "; ")
    OUT_DIR.mkdir(parents=True, exist_ok=True)

    from llmnb import hub   # imported here: the tool also works for vocab files alone

    wanted = (lambda label: True) if args.only is None else (lambda label: label in args.only)
    models: dict[str, Path] = {}
    if wanted("tiny_spm"):
        tiny = OUT_DIR / "tiny_spm.gguf"
        write_tiny_spm(tiny)
        models["tiny_spm"] = tiny
    for label, name in HUB_MODELS.items():
        if wanted(label):
            models[label] = hub.path(name)
    vocab_dir = args.vocab_dir or hub.cache_dir() / "vocab" / "llama-cpp-python-0.3.36"
    if vocab_dir.is_dir():
        for label, fname in VOCAB_FILES.items():
            if wanted(label):
                models[label] = vocab_dir / fname
    for label, path in models.items():
        tok: CliTokenizer | LibTokenizer = (
            LibTokenizer(args.llama_bin / "libllama.so", path) if args.in_process
            else CliTokenizer(exe, path))
        data = record(tok, path, label, version_text)
        if isinstance(tok, LibTokenizer):
            tok.close()
        out = OUT_DIR / f"{label}_llamacpp_ids.json"
        out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"{out.relative_to(ROOT)}: {len(STRINGS)} strings from {path.name}")


if __name__ == "__main__":
    main()
