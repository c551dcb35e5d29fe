from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.frame import STRING
from gpupipe.kernels.utf8 import count_chars, count_words, utf8_buffers
from gpupipe.stages import LengthFilter


def frame(texts):
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                         "text": pd.array(texts, dtype=STRING)})


@pytest.mark.parametrize("params, dropped, kept, reason", [
    ({"min_chars": 10}, "short", "long enough", "too_few_chars"),
    ({"max_chars": 3}, "four", "two", "too_many_chars"),
    ({"min_words": 3}, "two words", "three words here", "too_few_words"),
    ({"max_words": 2}, "one two three", "one two", "too_many_words"),
])
def test_each_reason(params, dropped, kept, reason):
    res = LengthFilter(**params).process(frame([dropped, kept]))
    assert res.drops == {reason: 1}
    assert res.frame["text"].tolist() == [kept]
    assert reason in LengthFilter.reasons


def test_first_failing_check_is_the_reason():
    # fails both min_chars and min_words: the chars check runs first
    res = LengthFilter(min_chars=100, min_words=50).process(frame(["tiny text"]))
    assert res.drops == {"too_few_chars": 1}


def test_bounds_are_inclusive_and_rows_keep_order(sample_records):
    texts = [r["text"] for r in sample_records[:300]]
    words = np.array([len(t.split()) for t in texts])
    lo, hi = 40, 400
    res = LengthFilter(min_words=lo, max_words=hi).process(frame(texts))
    expected = [t for t, w in zip(texts, words) if lo <= w <= hi]
    assert res.frame["text"].tolist() == expected
    assert res.drops.get("too_few_words", 0) == int((words < lo).sum())
    assert res.drops.get("too_many_words", 0) == int((words > hi).sum())


def test_no_bounds_keeps_everything_and_empty_partition():
    df = frame(["", "a"])
    assert LengthFilter().process(df).frame is df
    assert len(LengthFilter(min_words=1).process(frame([])).frame) == 0


def test_input_frame_is_not_mutated():
    df = frame(["a", "b c d"])
    before = df.copy()
    LengthFilter(min_words=2).process(df)
    pd.testing.assert_frame_equal(df, before)


def test_non_latin_scripts_count_code_points():
    res = LengthFilter(min_chars=5).process(frame(["日本語です", "日本"]))
    assert res.frame["text"].tolist() == ["日本語です"] and res.drops == {"too_few_chars": 1}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=40), max_size=20))
def test_word_and_char_counts_equal_python(texts):
    import pyarrow as pa

    buffers = utf8_buffers(pa.array(texts, pa.large_string()))
    assert count_words(*buffers).tolist() == [len(t.split()) for t in texts]
    assert count_chars(*buffers).tolist() == [len(t) for t in texts]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=15), st.integers(0, 6), st.integers(0, 6))
def test_filter_never_adds_rows_and_keeps_schema(texts, lo, extra):
    df = frame(texts)
    res = LengthFilter(min_words=lo, max_words=lo + extra).process(df)
    assert len(res.frame) + sum(res.drops.values()) == len(df)
    assert list(res.frame.dtypes) == list(df.dtypes)
    assert set(res.frame["id"]) <= set(df["id"])
