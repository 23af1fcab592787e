"""The model hub: pinned packages installed offline from a local wheel, sha256 enforced."""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from llmnb import hub
from llmnb.output import OutputPathError


def make_wheel(folder: Path, dist: str, version: str, member: str, payload: bytes) -> str:
    """A minimal valid wheel carrying `payload` at `member`; returns its sha256."""
    mod = dist.replace("-", "_")
    info = f"{mod}-{version}.dist-info"
    files = {
        member: payload,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                          b"Tag: py3-none-any\n"),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    path = folder / f"{mod}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def local_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[bytes]]:
    """Two part packages in a local wheel folder; pip told to use only that folder."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    payloads = [b"GGUF" + bytes(range(256)) * 40, bytes(reversed(range(256))) * 33]
    for i, data in enumerate(payloads, 1):
        make_wheel(wheels, f"llmnb-test-part{i}", "1.0", f"llmnb_test_part{i}/data/p{i}.bin", data)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path / "home"))
    return wheels, payloads


def wheel_sha256(wheels: Path, i: int) -> str:
    return hashlib.sha256((wheels / f"llmnb_test_part{i}-1.0-py3-none-any.whl").read_bytes()
                          ).hexdigest()


def register(wheels: Path, payloads: list[bytes], sha256: str) -> hub.HubModel:
    parts = tuple(hub.Package(f"llmnb-test-part{i}", "1.0", wheel_sha256(wheels, i),
                              f"llmnb_test_part{i}/data/p{i}.bin") for i in (1, 2))
    m = hub.HubModel("test-model", "test.gguf", sha256, sum(map(len, payloads)), "llama", "test",
                     "a test model", parts)
    hub.MODELS[m.name] = m
    return m


def test_unknown_and_unpulled_models_say_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMNB_HOME", str(tmp_path))
    with pytest.raises(hub.HubError, match="unknown model 'nope'"):
        hub.path("nope")
    with pytest.raises(hub.HubError, match="llmnb pull smollm2-135m"):
        hub.path("smollm2-135m")


def test_pull_assembles_parts_and_checks_sha256(local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    whole = b"".join(payloads)
    m = register(wheels, payloads, hashlib.sha256(whole).hexdigest())
    try:
        seen: list[int] = []
        p = hub.pull(m.name, progress=lambda done, total: seen.append(done))
        assert p.read_bytes() == whole and seen[-1] == len(whole)
        assert hub.path(m.name) == p and hub.pull(m.name) == p  # second pull: already there
        assert sorted(x.name for x in p.parent.iterdir()) == [".test-model.lock", "test.gguf"]
    finally:
        del hub.MODELS[m.name]


def test_sha256_mismatch_is_refused_and_leaves_nothing(local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    m = register(wheels, payloads, "0" * 64)
    try:
        with pytest.raises(hub.HubError, match="sha256"):
            hub.pull(m.name)
        assert not hub.is_pulled(m.name)
        left = [x.name for x in (hub.cache_dir() / "models").iterdir()]
        assert left == [".test-model.lock"]
    finally:
        del hub.MODELS[m.name]


def test_a_tampered_wheel_is_refused_by_its_pinned_hash(
        local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    m = register(wheels, payloads, hashlib.sha256(b"".join(payloads)).hexdigest())
    try:
        make_wheel(wheels, "llmnb-test-part2", "1.0", "llmnb_test_part2/data/p2.bin", b"evil")
        with pytest.raises(hub.HubError, match="pip could not install"):
            hub.pull(m.name)
        assert not hub.is_pulled(m.name)
    finally:
        del hub.MODELS[m.name]


def test_two_pulls_at_once_give_one_good_file(local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    whole = b"".join(payloads)
    m = register(wheels, payloads, hashlib.sha256(whole).hexdigest())
    try:
        results: list[Path] = []
        threads = [threading.Thread(target=lambda: results.append(hub.pull(m.name)))
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 2 and results[0] == results[1]
        assert results[0].read_bytes() == whole
    finally:
        del hub.MODELS[m.name]


def test_a_cached_file_shorter_than_recorded_is_incomplete_and_pulled_again(
        local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    whole = b"".join(payloads)
    m = register(wheels, payloads, hashlib.sha256(whole).hexdigest())
    try:
        p = hub.pull(m.name)
        p.write_bytes(whole[:1000])                  # e.g. a copy cut short
        with pytest.raises(hub.HubError) as e:
            hub.path(m.name)
        assert str(e.value) == (f"model 'test-model': the cached file {p} is incomplete "
                                f"(1,000 bytes, expected {len(whole):,}): `llmnb pull "
                                "test-model` fetches it again")
        assert not hub.is_pulled(m.name)
        assert hub.pull(m.name) == p and p.read_bytes() == whole
    finally:
        del hub.MODELS[m.name]


def test_a_directory_where_the_model_goes_is_named_and_never_replaced(
        local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    m = register(wheels, payloads, hashlib.sha256(b"".join(payloads)).hexdigest())
    try:
        folder = hub.cache_dir() / "models" / m.filename
        folder.mkdir(parents=True)
        with pytest.raises(hub.HubError, match=f"{folder} is not a file: remove it, then run "
                                               "`llmnb pull test-model`"):
            hub.path(m.name)
        with pytest.raises(OutputPathError, match="is a directory"):
            hub.pull(m.name)
        assert folder.is_dir() and not (hub.cache_dir() / "models" / "pkgs").exists()
    finally:
        del hub.MODELS[m.name]


def test_resolve_takes_a_path_or_a_pulled_name(tmp_path: Path) -> None:
    f = tmp_path / "x.gguf"
    f.write_bytes(b"GGUF")
    assert hub.resolve(str(f)) == f
    from llmnb.gguf import GGUFError
    with pytest.raises(GGUFError, match="hub name"):
        hub.resolve(str(tmp_path / "missing.gguf"))


# --- interrupted and concurrent pulls, across processes -------------------------------------

PULL_SCRIPT = """
import hashlib, os, signal, sys
from pathlib import Path
from llmnb import hub
wheels, sha, kill = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "kill"
def wheel_sha(i):
    whl = wheels / f"llmnb_test_part{i}-1.0-py3-none-any.whl"
    return hashlib.sha256(whl.read_bytes()).hexdigest()
parts = tuple(hub.Package(f"llmnb-test-part{i}", "1.0", wheel_sha(i),
                          f"llmnb_test_part{i}/data/p{i}.bin") for i in (1, 2))
hub.MODELS["test-model"] = hub.HubModel("test-model", "test.gguf", sha, int(sys.argv[4]), "llama",
                                        "test", "a test model", parts)
def progress(done, total):
    if kill:   # killed outright after the first part: no cleanup code runs
        os.kill(os.getpid(), signal.SIGKILL)
print(hub.pull("test-model", progress=progress))
"""


def pull_in_subprocess(
        wheels: Path, payloads: list[bytes], kill: bool = False) -> subprocess.Popen[str]:
    whole = b"".join(payloads)   # -P: the installed llmnb, not the source tree in the cwd
    return subprocess.Popen([sys.executable, "-P", "-c", PULL_SCRIPT, str(wheels),
                             hashlib.sha256(whole).hexdigest(), "kill" if kill else "pull",
                             str(len(whole))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_interrupted_pull_leaves_nothing(local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    m = register(wheels, payloads, hashlib.sha256(b"".join(payloads)).hexdigest())
    models = hub.cache_dir() / "models"
    try:
        def ctrl_c(done: int, total: int) -> None:
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            hub.pull(m.name, progress=ctrl_c)
        assert not hub.is_pulled(m.name)
        assert [x.name for x in models.iterdir()] == [".test-model.lock"]
    finally:
        del hub.MODELS[m.name]


def test_a_killed_pull_leaves_no_model_and_the_next_pull_cleans_up(
        local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    p = pull_in_subprocess(wheels, payloads, kill=True)
    p.communicate(timeout=120)
    assert p.returncode == -9
    models = hub.cache_dir() / "models"
    left = sorted(x.name for x in models.iterdir())
    assert "test.gguf" not in left and any(x.startswith(".test-model.pull-") for x in left)
    p = pull_in_subprocess(wheels, payloads)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert Path(out.strip()).read_bytes() == b"".join(payloads)
    assert sorted(x.name for x in models.iterdir()) == [".test-model.lock", "test.gguf"]


def test_two_pulls_in_two_processes_give_one_good_file(local_hub: tuple[Path, list[bytes]]) -> None:
    wheels, payloads = local_hub
    procs = [pull_in_subprocess(wheels, payloads) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    paths = {o.strip() for o, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).read_bytes() == b"".join(payloads)
    models = hub.cache_dir() / "models"
    assert sorted(x.name for x in models.iterdir()) == [".test-model.lock", "test.gguf"]
