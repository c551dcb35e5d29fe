"""Layer 2 of the GPU checks: the CUDA kernels run in numba's CUDA simulator and equal the CPU
kernels bit for bit. Collected only by `test_simulator.py`, in its own pytest process started
with NUMBA_ENABLE_CUDASIM=1 (the variable must be set before numba is imported)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupipe.kernels.target import SIMULATOR

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="run by test_simulator.py under "
                                                      "NUMBA_ENABLE_CUDASIM=1")

REPO = Path(__file__).resolve().parents[2]


def _assert_all_equal(sample):
    from gpupipe.kernels.checks import CHECKS

    for check in CHECKS:
        bad = check.mismatches(sample)
        assert not bad.any(), (f"{check.name}: documents {np.flatnonzero(bad)[:5].tolist()} "
                               f"differ, e.g. {sample.texts[int(np.argmax(bad))]!r}")


def test_real_documents_equal_the_cpu_kernels():
    from gpupipe.gpu_check import load_texts
    from gpupipe.kernels.checks import Sample

    texts = load_texts(str(REPO / "data" / "sample"), 24, max_doc_bytes=700)
    assert len(texts) == 24
    assert any(not t.isascii() for t in texts.to_pylist())  # several languages
    _assert_all_equal(Sample.of(texts))


ALPHABET = st.one_of(
    st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S", "Z"]),
    st.sampled_from(list("東京は日本の首都です。😀👍🏽e\u0301a\u0308 \n\n\r\n\t.!?…-'\"#•[]{}")),
    # what normalize_text's clean-up maps or removes
    st.sampled_from(list("\r\x0b\x0c\x85\u2028\u2029\x01\x1f\x7f\x9f\ufeff\u200b\xa0\u1680"
                         "\u2000\u200a\u3000\u202f\u205f\x1c \t\n")),
)
TEXTS = st.lists(st.one_of(st.text(ALPHABET, max_size=120), st.just(""),
                           st.just("x" * 1500), st.just("lorem ipsum {curly}.\n" * 3)),
                 min_size=1, max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(TEXTS, st.integers(0, 2))
def test_generated_text_equals_the_cpu_kernels(texts, cut):
    from gpupipe.kernels.checks import Sample

    arr = pa.array(["pad"] * cut + texts + ["tail"] * cut, pa.large_string())
    # a sliced array: its offsets do not start at 0 and its data runs past its last string
    _assert_all_equal(Sample.of(arr.slice(cut, len(texts))))


def test_cudf_published_minhash_vectors():
    from gpupipe.kernels import gpu
    from gpupipe.kernels.hashing import list_buffers
    from gpupipe.kernels.utf8 import utf8_buffers

    cases = json.loads((REPO / "tests" / "golden" / "minhash_vectors.json").read_text())["cases"]
    for case in cases:
        if case["kind"] == "chars":
            offsets, data = utf8_buffers(pa.array(case["strings"], pa.large_string()))
            got = gpu.minhash(offsets, data, seed=case["seed"], a=case["a"], b=case["b"],
                              width=case["width"], bits=case["bits"])
        else:
            got = gpu.minhash_ngrams(*list_buffers(case["lists"]), ngrams=case["ngrams"],
                                     seed=case["seed"], a=case["a"], b=case["b"],
                                     bits=case["bits"])
        assert got.tolist() == case["expected"], case["kind"]


def test_tokenize_on_the_device_gives_the_ids_of_tokenizers():
    """The tokenize stage's path on cuDF (`gpupipe.io.bpe.encode_buffers` with the GPU
    launchers, the texts to normalise fetched by row) on an NFC tokenizer: the ids of the CPU
    path and of ``tokenizers``, with the same documents handed to ``tokenizers``."""
    from gpupipe.io.bpe import encode_buffers
    from gpupipe.kernels import bpe_tables, cpu, gpu
    from gpupipe.kernels.utf8 import utf8_buffers

    texts = ["Le cafe\u0301 au lait, déjà vu.", "x<|im_start|>e\u0301 special", "plain text\n",
             "", "東京は日本の首都です 😀", "A\u030a\u0301 12345 don't", "ｆｕｌｌ width"]
    tok = bpe_tables.train_bpe(texts * 3, vocab_size=400, min_frequency=1,
                               special_tokens=["<|endoftext|>", "<|im_start|>"], style="qwen2")
    tables = bpe_tables.build_tables(json.loads(tok.to_str()))
    assert tables.normal_form == "NFC"
    arr = pa.array(["pad", *texts, "tail"], pa.large_string()).slice(1, len(texts))
    off, data = utf8_buffers(arr)
    host = encode_buffers(tables, off, data, tok, eod=0, kernels=cpu)
    dev = encode_buffers(tables, off, data, tok, eod=0, kernels=gpu,
                         texts_of=lambda rows: arr.take(pa.array(rows)).to_pylist())
    assert dev[0].tolist() == host[0].tolist() and dev[1].tolist() == host[1].tolist()
    assert dev[2] == host[2] == 1   # the NFC text with an added token
    want = [e.ids + [0] for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert [p.tolist() for p in np.split(dev[0], np.cumsum(dev[1])[:-1])] == want


def test_the_simulated_side_runs_the_python_source(monkeypatch):
    """The comparison can fail: a change to a routine's source shows up on the GPU side only."""
    from gpupipe.kernels import words
    from gpupipe.kernels.checks import CHECKS, Sample

    original = words.tokenize.py_func
    # one token fewer: +1 would have the callers read a token slot tokenize never wrote
    # (uninitialised scratch, which made this test fail now and then)
    monkeypatch.setattr(words.tokenize, "py_func", lambda *a: original(*a) - 1)
    check = next(c for c in CHECKS if c.name == "word_tokens")
    bad = check.mismatches(Sample.of(["one two", "three"]))
    assert bad.tolist() == [True, True]
