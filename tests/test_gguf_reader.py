"""The GGUF reader: agreement with gguf-py, and one clear GGUFError for every malformed file."""
from __future__ import annotations

import random
import struct
from pathlib import Path

import gguf as gguf_py
import numpy as np
import pytest

import llmnb
from llmnb.gguf import GGUFError
from llmnb.gguf.constants import GGML_BLOCK_SIZES, GGML_TYPE_NAMES, VALUE_TYPE_NAMES
from real_models import hub_model
from gguf_bytes import gguf, kv_str, kv_u32, s, tensor_info, valid


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def assert_same_as_gguf_py(path: Path) -> None:
    ours = llmnb.gguf.open(path)
    ref = gguf_py.GGUFReader(path)
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert list(ours.fields) == keys
    for k in keys:
        a, b = ours.fields[k].value, ref.fields[k].contents()
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, np.asarray(b))
        elif isinstance(a, list) and a and not isinstance(a[0], str):
            # gguf-py flattens arrays of arrays; ours keeps the nesting
            assert [x for sub in a for x in np.asarray(sub).tolist()] == b, k
        elif isinstance(a, float):
            assert a == pytest.approx(b, rel=0, abs=0)
        else:
            assert a == b, k
    assert len(ours.tensors) == len(ref.tensors)
    for t in ref.tensors:
        info = ours.tensors[t.name]
        assert info.shape == tuple(int(x) for x in reversed(t.shape))
        assert (info.ggml_type, info.offset, info.nbytes) == (int(t.tensor_type), t.data_offset,
                                                              t.n_bytes)
        np.testing.assert_array_equal(ours.raw(t.name), t.data.reshape(-1).view(np.uint8))


# --- well-formed files ---------------------------------------------------------------------

def test_constants_agree_with_gguf_py() -> None:
    for t in gguf_py.GGMLQuantizationType:
        if t.value in GGML_TYPE_NAMES:
            assert GGML_TYPE_NAMES[t.value] == t.name
            assert GGML_BLOCK_SIZES[t.value] == gguf_py.GGML_QUANT_SIZES[t]
    for v in gguf_py.GGUFValueType:
        assert VALUE_TYPE_NAMES[v.value] == v.name.lower()


def test_every_value_type_matches_gguf_py(tmp_path: Path) -> None:
    p = tmp_path / "all.gguf"
    w = gguf_py.GGUFWriter(p, "llama")
    w.add_custom_alignment(64)
    for add, key, value in ((w.add_uint8, "t.u8", 200), (w.add_int8, "t.i8", -100),
                            (w.add_uint16, "t.u16", 60000), (w.add_int16, "t.i16", -30000),
                            (w.add_uint32, "t.u32", 4_000_000_000),
                            (w.add_int32, "t.i32", -2_000_000_000), (w.add_float32, "t.f32", 0.1),
                            (w.add_bool, "t.bool", True), (w.add_string, "t.str", "héllo ✓"),
                            (w.add_uint64, "t.u64", 2**63 + 5), (w.add_int64, "t.i64", -(2**62)),
                            (w.add_float64, "t.f64", 1e-300)):
        add(key, value)
    w.add_array("t.strs", ["a", "", "ß", "日本"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, -2.0])
    w.add_array("t.bools", [True, False, True])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_tensor("x", np.arange(96, dtype=np.float32).reshape(3, 32))
    w.add_tensor("y", np.arange(32, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    f = llmnb.gguf.open(p)
    assert f.version == 3 and f.alignment == 64
    m = f.metadata
    assert m["t.u64"] == 2**63 + 5 and m["t.str"] == "héllo ✓"
    assert m["t.strs"] == ["a", "", "ß", "日本"]
    assert m["t.bool"] is True and list(m["t.bools"]) == [True, False, True]  # type: ignore[call-overload]
    assert [list(x) for x in m["t.nested"]] == [[1, 2], [3]]  # type: ignore[attr-defined]
    assert f.tensors["x"].shape == (3, 32) and f.tensors["x"].offset % 64 == 0
    np.testing.assert_array_equal(f.raw("x").view(np.float32).reshape(3, 32),
                                  np.arange(96, dtype=np.float32).reshape(3, 32))
    assert_same_as_gguf_py(p)


def test_version_2_is_read(tmp_path: Path) -> None:
    f = llmnb.gguf.open(write(tmp_path, valid()[:4] + struct.pack("<I", 2) + valid()[8:]))
    assert f.version == 2 and list(f.tensors) == ["a.weight", "b.weight"]


def test_raw_is_a_read_only_view_of_the_map_not_a_copy(tmp_path: Path) -> None:
    f = llmnb.gguf.open(write(tmp_path, valid()))
    r = f.raw("a.weight")
    assert not r.flags.owndata and not r.flags.writeable
    assert r.nbytes == 256
    np.testing.assert_array_equal(r.view(np.float32), np.arange(64, dtype=np.float32))


def test_smollm2_header_matches_gguf_py() -> None:
    assert_same_as_gguf_py(hub_model("smollm2-135m"))


def test_qwen_header_has_the_published_vocabulary_and_tensor_mix() -> None:
    """Qwen2.5-Coder-0.5B against the facts in reference/models.md (gguf-py takes ~9 s here)."""
    f = llmnb.gguf.open(hub_model("qwen2.5-coder-0.5b"))
    m = f.metadata
    assert f.architecture == "qwen2" and m["qwen2.block_count"] == 24
    assert len(m["tokenizer.ggml.tokens"]) == 151936  # type: ignore[arg-type]
    assert len(m["tokenizer.ggml.merges"]) == 151387  # type: ignore[arg-type]
    counts: dict[str, int] = {}
    for t in f.tensors.values():
        counts[t.type_name] = counts.get(t.type_name, 0) + 1
    assert counts == {"Q5_0": 133, "Q4_K": 12, "Q6_K": 12, "Q8_0": 13, "F32": 121}
    assert sum(t.n_elements for t in f.tensors.values()) == 630_167_424


# --- malformed files: always GGUFError naming file, offset and field -------------------------

def expect_error(tmp_path: Path, data: bytes, field_part: str) -> GGUFError:
    p = write(tmp_path, data)
    with pytest.raises(GGUFError) as e:
        llmnb.gguf.open(p)
    assert str(p) in str(e.value) and "at byte" in str(e.value)
    assert field_part in e.value.field, (field_part, str(e.value))
    return e.value


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="readable file"):
        llmnb.gguf.open(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="readable file"):
        llmnb.gguf.open(tmp_path)
    expect_error(tmp_path, b"", "header")


def test_bad_magic_and_versions(tmp_path: Path) -> None:
    good = valid()
    expect_error(tmp_path, b"GGML" + good[4:], "magic")
    for v in (1, 4):
        expect_error(tmp_path, good[:4] + struct.pack("<I", v) + good[8:], "version")
    e = expect_error(tmp_path, good[:4] + struct.pack(">I", 3) + good[8:], "version")
    assert "big-endian" in str(e)


def test_counts_larger_than_the_file_are_refused(tmp_path: Path) -> None:
    expect_error(tmp_path, gguf([], [], n_kv=2**40), "n_kv")
    expect_error(tmp_path, gguf([], [], n_tensors=2**63), "n_tensors")
    huge_str = (s("k")[:0] + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 8)
                + struct.pack("<Q", 2**62))
    expect_error(tmp_path, gguf([huge_str], []), "k")
    huge_arr = s("arr") + struct.pack("<IIQ", 9, 8, 2**60)
    expect_error(tmp_path, gguf([huge_arr], []), "arr (array length)")
    huge_num = s("nums") + struct.pack("<IIQ", 9, 12, 2**61)
    expect_error(tmp_path, gguf([huge_num], []), "nums (array length)")


def test_bad_value_types(tmp_path: Path) -> None:
    expect_error(tmp_path, gguf([s("k") + struct.pack("<I", 13)], []), "k")
    expect_error(tmp_path, gguf([s("k") + struct.pack("<IIQ", 9, 99, 1)], []), "k")
    expect_error(tmp_path, gguf([kv_u32("k", 1), kv_u32("k", 2)], []), "'k'")
    expect_error(tmp_path, gguf([s(b"\xff\xfe") + struct.pack("<I", 4) + b"\0" * 4], []),
                 "metadata key 0")
    expect_error(tmp_path, gguf([s("") + struct.pack("<I", 4) + b"\0" * 4], []), "metadata key 0")


def test_arrays_nested_too_deep_are_refused(tmp_path: Path) -> None:
    deep = (s("deep") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 9
            + struct.pack("<IQ", 4, 0))
    expect_error(tmp_path, gguf([deep], []), "deep")
    ok = (s("ok") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 3
          + struct.pack("<IQI", 4, 1, 7))
    f = llmnb.gguf.open(write(tmp_path, gguf([ok], []), "ok.gguf"))
    assert [[[list(f.metadata["ok"][0][0][0])]]] == [[[[7]]]]  # type: ignore[index]


@pytest.mark.parametrize("value", [0, 3, 48])
def test_alignment_must_be_a_power_of_two(tmp_path: Path, value: int) -> None:
    expect_error(tmp_path, gguf([kv_u32("general.alignment", value)], []), "general.alignment")


def test_alignment_must_be_uint32(tmp_path: Path) -> None:
    expect_error(tmp_path, gguf([kv_str("general.alignment", "32")], []), "general.alignment")


@pytest.mark.parametrize("ne,ggml_type,field", [
    ([], 0, "n_dims"), ([1, 1, 1, 1, 1], 0, "n_dims"),
    ([2**63, 1], 0, "ne[0]"), ([2**40, 2**40], 0, "ne[1]"),
    ([33], 8, "ne[0]"),          # Q8_0 rows come in blocks of 32
    ([32], 99, "type"), ([32], 4, "type"),
])
def test_bad_tensor_shapes_and_types(
        tmp_path: Path, ne: list[int], ggml_type: int, field: str) -> None:
    expect_error(tmp_path, gguf([], [tensor_info("t", ne, ggml_type, 0)], b"\0" * 4096), field)


def test_bad_tensor_names(tmp_path: Path) -> None:
    expect_error(tmp_path, gguf([], [tensor_info("", [32], 0, 0)], b"\0" * 128), "name")
    expect_error(tmp_path, gguf([], [tensor_info("x" * 64, [32], 0, 0)], b"\0" * 128), "name")
    two = [tensor_info("t", [32], 0, 0), tensor_info("t", [32], 0, 128)]
    expect_error(tmp_path, gguf([], two, b"\0" * 256), "'t'")


def test_tensor_data_outside_the_file_overlapping_or_misaligned(tmp_path: Path) -> None:
    expect_error(tmp_path, gguf([], [tensor_info("t", [32], 0, 0)], b"\0" * 100), "data")
    expect_error(tmp_path, gguf([], [tensor_info("t", [32], 0, 2**63)], b"\0" * 128), "data")
    expect_error(tmp_path, gguf([], [tensor_info("t", [32], 0, 8)], b"\0" * 256), "offset")
    overlap = [tensor_info("a", [64], 0, 0), tensor_info("b", [32], 0, 128)]
    expect_error(tmp_path, gguf([], overlap, b"\0" * 512), "data")


def test_every_truncation_raises_gguf_error(tmp_path: Path) -> None:
    good = valid()
    header_end = len(good) - 384  # the two tensors' data: 256 + 128 bytes
    for n in range(header_end + 8):
        p = write(tmp_path, good[:n], f"t{n}.gguf")
        with pytest.raises(GGUFError):
            llmnb.gguf.open(p)


def test_random_mutations_raise_only_gguf_error(tmp_path: Path) -> None:
    """A quick mutation fuzz: single-byte, multi-byte and length-field damage."""
    rng = random.Random(1234)
    good = bytearray(valid())
    p = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.choice((1, 2, 4, 8))):
            i = rng.randrange(len(data) - 384)  # damage the header, where parsing happens
            data[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        p.write_bytes(bytes(data))
        try:
            f = llmnb.gguf.open(p)
            for name in f.tensors:
                assert f.raw(name).nbytes == f.tensors[name].nbytes
            outcomes["ok"] += 1
        except GGUFError:
            outcomes["error"] += 1
    assert outcomes["error"] > 1000  # most damage is detected, none escapes as another exception


def test_a_file_shows_itself_as_its_summary_counted_from_its_header() -> None:
    from llmnb.gguf.summary import summarize, summary_html, summary_text

    f = llmnb.gguf.open(Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-ar.gguf")
    s = summarize(f)
    assert (s.architecture, s.n_tensors, s.file_bytes) == (f.architecture, len(f.tensors), f.size)
    assert s.n_parameters == sum(t.n_elements for t in f.tensors.values())
    assert sum(r.n_tensors for r in s.by_type) == len(f.tensors)
    assert f._repr_html_() == summary_html(f)                  # what a notebook shows for `f`
    assert f"<b>{f.architecture}</b>" in f._repr_html_()
    assert f"{s.n_parameters:,} in {s.n_tensors} tensors" in summary_text(f)
