"""Generation on SmolLM2-135M: cached == uncached, thread determinism, stop reasons, streaming."""
from __future__ import annotations

import numpy as np
import pytest

import llmnb
from llmnb.ar import GenerationError, Generator, Greedy, Sampler, generate
from llmnb.errors import UsageError
from llmnb.model import Model, ModelError
from real_models import hub_model


@pytest.fixture(scope="module")
def smol() -> Model:
    m = llmnb.load(hub_model("smollm2-135m"))
    _ = m.transformer  # dequantize once for the module
    return m


def test_cached_greedy_equals_argmax_of_full_uncached_forward(smol: Model) -> None:
    r = generate(smol, "The three primary colours are", max_new_tokens=16)
    full = smol.forward(r.prompt_ids + r.tokens)                 # no cache, whole sequence
    n = len(r.prompt_ids)
    assert list(full.argmax(axis=1)[n - 1:n - 1 + len(r.tokens)]) == r.tokens


def test_greedy_ids_identical_at_one_and_two_threads(smol: Model) -> None:
    with llmnb.threads(1):
        a = generate(smol, "def fibonacci(n):", max_new_tokens=16).tokens
    with llmnb.threads(2):
        b = generate(smol, "def fibonacci(n):", max_new_tokens=16).tokens
    assert a == b


def test_stop_reasons(smol: Model) -> None:
    assert generate(smol, "Once upon a time", max_new_tokens=5).stop_reason == "max_tokens"
    r = generate(smol, "What is 2+2? Answer with one number.", max_new_tokens=64, chat=True)
    assert r.stop_reason == "eos" and r.tokens[-1] in smol.tokenizer.eog_ids
    r = generate(smol, "1, 2, 3, 4,", max_new_tokens=30, stop=["7"])
    assert r.stop_reason == "stop_string" and r.text.endswith("6, ") and "7" not in r.text


def test_context_full_stops_the_generator(smol: Model) -> None:
    ids = smol.tokenizer.encode("a b c")
    g = Generator(smol, Greedy(), capacity=len(ids) + 2)
    g.prefill(ids)
    g.feed(g.next_token())
    g.feed(g.next_token())
    assert g.cache.length == g.cache.capacity
    with pytest.raises(GenerationError, match="kv cache full"):
        g.feed(g.next_token())


def test_state_machine_refuses_out_of_order_calls(smol: Model) -> None:
    g = Generator(smol, Greedy(), capacity=16)
    assert g.state == "loaded"
    with pytest.raises(GenerationError, match="prefilled"):
        g.feed(1)
    g.prefill([1, 2, 3])
    assert g.state == "prefilled"
    with pytest.raises(GenerationError, match="expected state 'loaded'"):
        g.prefill([1])
    g.feed(g.next_token())
    assert g.state == "decoding"
    g.stop("max_tokens")
    assert (g.state, g.stop_reason) == ("stopped", "max_tokens")


def test_prompt_longer_than_the_context_is_refused(smol: Model) -> None:
    g = Generator(smol, Greedy(), capacity=8)
    with pytest.raises(GenerationError, match="leaves no room"):
        g.prefill(list(range(8)))
    with pytest.raises(ModelError, match="token ids must be in"):
        smol.forward([0, 49152])


class Forced(Sampler):
    """Emits a fixed sequence of ids, whatever the logits."""

    def __init__(self, ids: list[int]) -> None:
        super().__init__(temperature=0.0)
        self.queue = list(ids)

    def sample(self, logits: np.ndarray) -> int:
        return self.queue.pop(0)


def test_streaming_holds_back_a_character_split_across_tokens(smol: Model) -> None:
    tok = smol.tokenizer
    # byte-level BPE spells the bytes f0 9f 99 82 of U+1F642 as these four characters
    byte_ids = [tok.tokens.index(t) for t in "ðŁĻĤ"]
    assert tok.decode(byte_ids) == "🙂"
    pieces: list[str] = []
    sampler = Forced([tok.encode("Hi")[0]] + byte_ids + [tok.encode("!")[0], tok.eos_id or 0])
    r = generate(smol, "x", max_new_tokens=10, sampler=sampler, on_text=pieces.append)
    assert r.text == "Hi🙂!" and "".join(pieces) == r.text
    assert all("\ufffd" not in p for p in pieces)


def test_chat_and_prompt_argument_errors(smol: Model) -> None:
    with pytest.raises(UsageError, match="needs a text prompt"):
        generate(smol, [1, 2], chat=True)
    with pytest.raises(UsageError, match="only with chat"):
        generate(smol, "hi", system="terse")
    with pytest.raises(UsageError, match="max_new_tokens"):
        generate(smol, "hi", max_new_tokens=0)
