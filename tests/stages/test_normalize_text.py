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


# --------------------------------------------------------------------------- the compiled scan
# The clean-up runs as one compiled scan (gpupipe.kernels.clean, the same source on the GPU);
# it must give what the documented regular expressions give, applied one after the other.

def reference(texts, st_):
    """The steps as Arrow regular expressions, in order (what the stage did before the kernel)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpupipe.kernels.normalize import normalize
    from gpupipe.stages.transforms.normalize_text import CONTROL, NEWLINES, UNICODE_SPACES

    arr = before = pa.array(texts, pa.large_string())
    if st_.newlines:
        arr = pc.replace_substring_regex(arr, pattern=NEWLINES, replacement="\n")
    if st_.remove_control:
        arr = pc.replace_substring_regex(arr, pattern=CONTROL, replacement="")
    if st_.form is not None:
        arr = normalize(arr, st_.form)
    if st_.unicode_spaces:
        arr = pc.replace_substring_regex(arr, pattern=UNICODE_SPACES, replacement=" ")
    if st_.collapse_spaces:
        arr = pc.replace_substring_regex(arr, pattern=r"[ \t]{2,}", replacement=" ")
    if st_.strip_lines:
        arr = pc.replace_substring_regex(arr, pattern=r"[ \t]+\n", replacement="\n")
        arr = pc.replace_substring_regex(arr, pattern=r"[ \t]+$", replacement="")
    if st_.max_blank_lines is not None:
        k = st_.max_blank_lines
        arr = pc.replace_substring_regex(arr, pattern=rf"\n(?:[ \t]*\n){{{k + 1},}}",
                                         replacement="\n" * (k + 1))
    if st_.strip:
        arr = pc.utf8_trim_whitespace(arr)
    return arr.to_pylist(), int(pc.sum(pc.not_equal(before, arr)).as_py() or 0)


CONFIGS = [{}, {"collapse_spaces": True}, {"form": "NFKC", "max_blank_lines": 0},
           {"form": None}, {"newlines": False, "strip": False},
           {"remove_control": False, "strip_lines": False, "max_blank_lines": 1},
           {"unicode_spaces": False, "form": "NFD"},
           {"form": None, "max_blank_lines": 0, "collapse_spaces": True, "strip": False}]


@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in
                                                                   p.items()) or "defaults")
def test_the_scan_equals_the_regular_expressions_on_the_corpus(sample_records, params):
    texts = [r["text"] for r in sample_records] + [
        "a\r\nb\rc\x0bd\x0ce\x85f\u2028g\u2029h", "  x\x01y\u200b\ufeffz \t\n\n\n\n  \n q  ",
        "e\u0301\xa0\u3000 \t a\t\tb", "\u2000\u2001 lead", "\r\n\r\n\r\n\r\nx", "", "   ",
        "\x85\x9f\x7f", "A\u0301\r\x0b\x85", "a \xa0\n\n \u3000\n\nb", "x\t\n\t\n\t\n\t\ny"]
    got, counters = run(texts, **params)
    want, changed = reference(texts, NormalizeText(**params))
    assert got == want
    assert counters == {"changed": changed}


SPECIAL = st.sampled_from(list("\r\n\t \x0b\x0c\x85\u2028\u2029\x01\x1f\x7f\x9f\ufeff\u200b\xa0"
                               "\u1680\u2000\u200a\u3000\u202f\u205f\x1c\u0301\u0308eAé"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.one_of(SPECIAL, st.characters(codec="utf-8")), max_size=40),
                min_size=1, max_size=8), st.sampled_from(CONFIGS))
def test_the_scan_equals_the_regular_expressions_on_generated_text(texts, params):
    got, counters = run(texts, **params)
    want, changed = reference(texts, NormalizeText(**params))
    assert got == want
    assert counters == {"changed": changed}


def test_trim_whitespace_is_arrows_on_every_code_point():
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpupipe.kernels.clean import TRIM_WHITESPACE

    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    trimmed = pc.utf8_length(pc.utf8_trim_whitespace(pa.array([chr(c) for c in cps])))
    arrow = [c for c, n in zip(cps, trimmed.to_pylist()) if n == 0]
    assert arrow == list(TRIM_WHITESPACE)
