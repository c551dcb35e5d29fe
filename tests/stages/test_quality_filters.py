"""Quality filters: every reason code, agreement with a plain-Python reference of datatrove's
logic on real documents and on generated text, edge cases, annotate == drop."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupipe.frame import STRING
from gpupipe.kernels.words import tokenize_texts
from gpupipe.stages import C4Quality, FineWebQuality, GopherQuality, GopherRepetition
from tests.stages import reference_filters as ref


def frame(texts):
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                         "text": pd.array(texts, dtype=STRING)})


def reasons(stage, texts):
    out = stage.__class__(**{**stage.params(), "mode": "annotate"}).process(frame(texts))
    return [None if pd.isna(r) else r for r in out.frame[stage.reason_column]]


PROSE = ("The history of the project is the story of a group of people who wanted to build "
         "a free system and to share it with everyone that would have it. ")


def prose(words: int) -> str:
    base = PROSE.split()
    return " ".join(base[i % len(base)] for i in range(words)) + "."


def unique_prose(sentences: int) -> str:
    return " ".join(f"Sentence number {i} tells the reader that item {i} of the list is "
                    f"different from all the others." for i in range(sentences))


# ---------------------------------------------------------------------------- tokenizer

@pytest.mark.parametrize("text, tokens", [
    ("Hello, world!", ["Hello", ",", "world", "!"]),
    ("don't stop", ["do", "n't", "stop"]),
    ("It's (really) fine...", ["It", "'s", "(", "really", ")", "fine", "..."]),
    ("e.g. the U.S. and 4.1.", ["e.g.", "the", "U.S.", "and", "4.1", "."]),
    ("well-known and/or", ["well", "-", "known", "and", "/", "or"]),
    ("see https://x.org/a-b now", ["see", "https://x.org/a-b", "now"]),
    ("mail a.b@c.org.", ["mail", "a.b@c.org", "."]),
    ("f(x):", ["f(x", "):"]),
    ("", []),
    ("  \n\t ", []),
    ("Ура, мир!", ["Ура", ",", "мир", "!"]),
])
def test_word_tokens(text, tokens):
    assert tokenize_texts([text])[0] == tokens


# ---------------------------------------------------------------------------- every reason

GOOD = (
    "Debian is an operating system and a distribution of free software. It is maintained and "
    "updated through the work of many users who volunteer their time and effort. The project "
    "was founded in 1993 by Ian Murdock, who wrote a manifesto that called for a distribution "
    "to be developed openly, in the spirit of Linux and GNU.\n\nA package is a collection of "
    "files that are bundled together with information about its version, its dependencies and "
    "the scripts needed to install it. Packages are built from source by the maintainers, "
    "checked by automated tools, and uploaded to the archive, where mirrors around the world "
    "fetch them every few hours.\n\nReleases are named after characters from a famous film "
    "series. Each stable release is supported with security updates for about three years, "
    "while testing and unstable move forward as new software arrives."
)


@pytest.mark.parametrize("params, text, reason", [
    ({}, "the cat and the dog", "too_few_words"),
    ({"max_doc_words": 300}, prose(400), "too_many_words"),
    ({"min_doc_words": 5}, "a an of to is at by " * 10 + "the and", "short_mean_word_length"),
    ({"min_doc_words": 5}, "internationalization " * 60 + "the and", "long_mean_word_length"),
    ({}, prose(60) + " #tag" * 10, "too_many_hashes"),
    ({}, prose(60) + " wait..." * 10, "too_many_ellipses"),
    ({"max_symbol_word_ratio": None},
     "\n".join("- " + prose(8) for _ in range(10)), "too_many_bullet_lines"),
    ({"max_symbol_word_ratio": None},
     "\n".join(prose(8)[:-1] + "..." for _ in range(10)), "too_many_ellipsis_lines"),
    ({}, prose(60) + " 12 34 56 78 90" * 5, "too_few_alpha_words"),
    ({}, " ".join(f"cats number{i} sitting quietly upon warm mats beside green hats"
                  for i in range(8)) + ".", "too_few_stop_words"),
])
def test_gopher_quality_reasons(params, text, reason):
    st_ = GopherQuality(**params)
    assert reason in GopherQuality.reasons
    res = st_.process(frame([text, GOOD]))
    assert res.drops == {reason: 1}
    assert res.frame["text"].tolist() == [GOOD]


def _repeat_lines(n):
    return "\n".join(["the same line again"] * n + [f"line {i} is new" for i in range(3)])


@pytest.mark.parametrize("params, text, reason", [
    ({}, "", "empty"),
    ({}, "\n\n".join(["same paragraph here"] * 4 + ["other text", "more"]), "dup_para_frac"),
    ({"dup_para_frac": None},
     "\n\n".join(["a long paragraph that repeats itself " * 3] * 2 + [unique_prose(3)]),
     "dup_para_char_frac"),
    ({"dup_para_frac": None, "dup_para_char_frac": None}, _repeat_lines(4), "dup_line_frac"),
    ({"dup_para_frac": None, "dup_para_char_frac": None, "dup_line_frac": None},
     "\n".join(["one long line that comes back " * 6] * 2 + [unique_prose(3)]),
     "dup_line_char_frac"),
    ({}, unique_prose(1) + " good deal" * 40, "top_2_gram"),
    ({"top_n_grams": {2: None, 3: 0.18}}, unique_prose(1) + " a good deal" * 30, "top_3_gram"),
    ({"top_n_grams": {4: 0.16}}, unique_prose(1) + " very a good deal" * 25, "top_4_gram"),
    ({"top_n_grams": {}}, unique_prose(2) + " one two three four five" * 6,
     "duplicated_5_n_grams"),
    ({"top_n_grams": {}, "dup_n_grams": {5: None, 6: 0.14}},
     unique_prose(2) + " one two three four five six" * 5, "duplicated_6_n_grams"),
    ({"top_n_grams": {}, "dup_n_grams": {7: 0.13}},
     unique_prose(2) + " a b c d e f g" * 8, "duplicated_7_n_grams"),
    ({"top_n_grams": {}, "dup_n_grams": {8: 0.12}},
     unique_prose(2) + " a b c d e f g h" * 8, "duplicated_8_n_grams"),
    ({"top_n_grams": {}, "dup_n_grams": {9: 0.11}},
     unique_prose(2) + " a b c d e f g h i" * 8, "duplicated_9_n_grams"),
    ({"top_n_grams": {}, "dup_n_grams": {10: 0.10}},
     unique_prose(2) + " a b c d e f g h i j" * 8, "duplicated_10_n_grams"),
])
def test_gopher_repetition_reasons(params, text, reason):
    st_ = GopherRepetition(**params)
    assert reason in st_.reasons
    res = st_.process(frame([text, GOOD]))
    assert res.drops == {reason: 1}, res.drops
    assert res.frame["text"].tolist() == [GOOD]


def test_gopher_repetition_reasons_follow_parameters():
    st_ = GopherRepetition(top_n_grams={3: 0.1}, dup_n_grams={})
    assert st_.reasons[-1] == "top_3_gram" and "top_2_gram" not in st_.reasons


@pytest.mark.parametrize("params, text, reason", [
    ({}, " \n\t\n", "empty"),
    ({}, "\n".join(f"a line without an end number {i} and more words here" for i in range(10)),
     "line_punct_ratio"),
    ({}, "\n".join(f"Short line {i}." for i in range(10)), "short_line_ratio"),
    ({}, "\n".join(["This long line is here twice, which is a duplicate."] * 2
                   + [unique_prose(2)]), "char_dup_ratio"),
    ({"short_line_thr": None}, "\n".join(f"Item {i}." for i in range(20)), "list_ratio"),
])
def test_fineweb_reasons(params, text, reason):
    res = FineWebQuality(**params).process(frame([text, GOOD]))
    assert res.drops == {reason: 1}
    assert res.frame["text"].tolist() == [GOOD]


def test_fineweb_exclude_zero_and_custom_stop_chars():
    text = "\n".join(f"a line without an end number {i} and more words here" for i in range(4))
    assert FineWebQuality(line_punct_exclude_zero=True).process(frame([text])).drops == {}
    assert FineWebQuality(stop_chars="e").process(frame([text + "e"])).drops == {}


@pytest.mark.parametrize("text, reason", [
    (GOOD.replace(". ", ".\n") + "\nLorem ipsum dolor sit amet.", "lorem_ipsum"),
    (GOOD.replace(". ", ".\n") + "\nThe set {a, b} is small.", "curly_bracket"),
    ("Only one sentence is here.\nAnd a line without punctuation", "too_few_sentences"),
])
def test_c4_reasons(text, reason):
    res = C4Quality().process(frame([text, GOOD]))
    assert res.drops == {reason: 1}
    assert res.frame["id"].tolist() == ["1"]
    assert res.frame["text"][0] == GOOD.replace("\n\n", "\n")  # blank lines removed


def test_c4_rewrites_lines_and_counts_them():
    lines = [f"Sentence {i} of the page is a proper sentence[{i}]." for i in range(5)] + [
        "Menu", "Enable JavaScript to see this page.", "We use cookies on this site.",
        "x" * 1001 + " is too long.", "Two words.", "It ends with dots..."]
    res = C4Quality().process(frame(["\n".join(lines)]))
    assert res.frame["text"][0] == "\n".join(
        f"Sentence {i} of the page is a proper sentence." for i in range(5))
    assert res.counters == {"lines:javascript": 1, "lines:kept": 5, "lines:no_terminal_punct": 2,
                            "lines:policy": 1, "lines:too_few_words": 1,
                            "lines:too_long_word": 1}


# ---------------------------------------------------------------------------- reference

PAIRS = [(GopherQuality(), ref.gopher_quality), (GopherRepetition(), ref.gopher_repetition),
         (FineWebQuality(), ref.fineweb_quality), (C4Quality(), lambda t: ref.c4_quality(t)[0])]


@pytest.mark.parametrize("stage, reference", PAIRS, ids=lambda p: getattr(p, "stage_name", ""))
def test_same_decisions_as_the_reference_on_real_text(stage, reference, sample_records):
    texts = [r["text"] for r in sample_records[::3]]
    assert reasons(stage, texts) == [reference(t) for t in texts]


def test_c4_text_matches_the_reference(sample_records):
    texts = [r["text"] for r in sample_records[::4]]
    out = C4Quality().process(frame(texts))
    expected = [new for reason, new in map(ref.c4_quality, texts) if reason is None]
    assert out.frame["text"].tolist() == expected


ALPHABET = st.sampled_from(list("abcdeXYZ the of and . , ! ? # - • … ' \" { } [ ] 1 2 é ß Ж 中")
                           + ["\n", "\n\n", "  ", "...", "\u2028", "\r\n", "\xa0", "\t", "[1]",
                              "lorem ipsum", "javascript", "the", "and", "of"])
TEXTS = st.lists(ALPHABET, max_size=120).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEXTS, min_size=1, max_size=6))
def test_generated_text_matches_the_reference(texts):
    for stage, reference in PAIRS[1:]:
        assert reasons(stage, texts) == [reference(t) for t in texts], stage.stage_name
    assert reasons(GopherQuality(min_doc_words=3), texts) == [
        ref.gopher_quality(t, min_doc_words=3) for t in texts]
    out = C4Quality().process(frame(texts))
    assert out.frame["text"].tolist() == [new for reason, new in map(ref.c4_quality, texts)
                                          if reason is None]


# ---------------------------------------------------------------------------- edge cases

EDGE = ["", " ", "\n\n\n", "word", "Ж", "中文文本没有空格。" * 50, "🙂" * 10,
        "العربية نص قصير.", ("All work and no play. " * 20000)]


@pytest.mark.parametrize("stage", [s for s, _ in PAIRS], ids=lambda s: s.stage_name)
def test_edge_cases_do_not_crash_and_never_add_rows(stage):
    res = stage.process(frame(EDGE))
    assert len(res.frame) <= len(EDGE)
    assert len(stage.process(frame([])).frame) == 0


def test_reference_agrees_on_edge_cases():
    for stage, reference in PAIRS:
        if stage.stage_name == "c4_quality":
            continue
        assert reasons(stage, EDGE) == [reference(t) for t in EDGE], stage.stage_name


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTS, max_size=8), st.sampled_from([s for s, _ in PAIRS]))
def test_annotate_and_drop_agree(texts, stage):
    df = frame(texts)
    dropped = stage.process(df)
    annotated = stage.__class__(**{**stage.params(), "mode": "annotate"}).process(df)
    col = annotated.frame[stage.reason_column]
    assert len(annotated.frame) == len(texts)
    assert dropped.frame["id"].tolist() == annotated.frame["id"][col.isna()].tolist()
    assert dropped.frame["text"].tolist() == annotated.frame["text"][col.isna()].tolist()
    flagged = {k.removeprefix("flagged:"): v for k, v in annotated.counters.items()
               if k.startswith("flagged:")}
    assert flagged == dropped.drops


def test_keep_rejected_returns_the_dropped_rows_with_reasons():
    res = GopherQuality(keep_rejected=True).process(frame(["too short", GOOD, ""]))
    assert res.rejected["id"].tolist() == ["0", "2"]
    assert res.rejected["reason"].tolist() == ["too_few_words", "too_few_words"]
    assert res.rejected["text"].tolist() == ["too short", ""]
