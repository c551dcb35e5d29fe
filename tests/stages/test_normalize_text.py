from __future__ import annotations

import unicodedata

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.frame import STRING
from gpupipe.stages import NormalizeText


def run(texts, **params):
    df = pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                       "text": pd.array(texts, dtype=STRING)})
    res = NormalizeText(**params).process(df)
    return res.frame["text"].tolist(), res.counters


@pytest.mark.parametrize("text, expected", [
    ("cafe\u0301", "café"),                          # NFC composes
    ("a\r\nb\rc\u2028d", "a\nb\nc\nd"),              # line endings
    ("a\x00b\x1bc\ufeffd\u200be", "abcde"),          # control chars, BOM, zero-width space
    ("a\u00a0b\u3000c", "a b c"),                    # Unicode spaces
    ("line   \nnext\t\n", "line\nnext"),             # trailing whitespace, final strip
    ("a\n\n\n\n\nb", "a\n\n\nb"),                    # at most 2 blank lines
    ("    indented code\n        deeper", "indented code\n        deeper"),  # doc strip only
])
def test_defaults(text, expected):
    assert run([text])[0] == [expected]


def test_nfkc_and_switches():
    assert run(["ﬁ ①"], form="NFKC")[0] == ["fi 1"]
    assert run(["ﬁ"], form=None)[0] == ["ﬁ"]
    assert run(["a  \t b"], collapse_spaces=True)[0] == ["a b"]
    assert run(["a\n\n\n\nb"], max_blank_lines=0)[0] == ["a\nb"]
    assert run(["  x  "], strip=False, strip_lines=False)[0] == ["  x  "]
    assert run(["a\r\nb"], newlines=False, strip=False)[0] == ["a\r\nb"]


def test_counts_changed_documents(sample_records):
    texts = [r["text"] for r in sample_records[:200]] + ["x\u00a0y", "plain"]
    out, counters = run(texts)
    assert counters["changed"] == sum(a != b for a, b in zip(texts, out))
    assert out[-2:] == ["x y", "plain"]


def test_empty_partition():
    assert run([]) == ([], {"changed": 0})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=10))
def test_idempotent_and_matches_python_nfc(texts):
    once, _ = run(texts)
    twice, counters = run(once)
    assert twice == once and counters["changed"] == 0
    for t in once:
        assert unicodedata.normalize("NFC", t) == t
        assert t == t.strip()
        assert "\r" not in t and "\x00" not in t


_TRICKY = st.sampled_from(["e", "\u0301", "\u0327", "A", "\u212b", "\u1100", "\u1161", "\u11a8",
                           "\uac00", "\u0b47", "\u0b3e", "\ufb01", "\u2460", "\u00e9", "\U0001d15e",
                           "\u0344", " ", "\u2126", "\u0958", "x"])


# characters assigned in Python's Unicode version (Arrow's normaliser may know a newer one)
_ASSIGNED = st.characters(exclude_categories=["Cn", "Cs"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(_TRICKY, max_size=12) | st.text(_ASSIGNED, max_size=12), min_size=1,
                max_size=8),
       st.sampled_from(["NFC", "NFKC", "NFD", "NFKD"]))
def test_unicode_forms_equal_python(texts, form):
    import pyarrow as pa

    from gpupipe.kernels.normalize import needs_normalization, normalize
    from gpupipe.kernels.utf8 import utf8_buffers

    arr = pa.array(texts, pa.large_string())
    got = normalize(arr, form).to_pylist()
    assert got == [unicodedata.normalize(form, t) for t in texts]
    for t, need in zip(texts, needs_normalization(*utf8_buffers(arr), form)):
        if not need:
            assert unicodedata.normalize(form, t) == t
