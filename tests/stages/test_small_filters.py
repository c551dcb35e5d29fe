"""word_count_filter, symbol_ratio_filter, regex_filter, sample, language_id, pii_redact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupipe.errors import SpecError
from gpupipe.frame import STRING
from gpupipe.spec import build_stage
from gpupipe.stages import (
    LanguageId,
    PiiRedact,
    RegexFilter,
    Sample,
    SymbolRatioFilter,
    WordCountFilter,
)
from gpupipe.stages.filters.language import identify


def frame(texts, ids=None):
    ids = ids if ids is not None else [str(i) for i in range(len(texts))]
    return pd.DataFrame({"id": pd.array(ids, dtype=STRING), "text": pd.array(texts, dtype=STRING)})


# ---------------------------------------------------------------------------- word counts

@pytest.mark.parametrize("count, expected", [("words", 2), ("tokens", 4), ("whitespace", 2)])
def test_word_count_modes(count, expected):
    df = frame(["Hello, world!"])
    assert WordCountFilter(min_words=expected, count=count).process(df).drops == {}
    assert WordCountFilter(min_words=expected + 1, count=count).process(df).drops == {
        "too_few_words": 1}
    assert WordCountFilter(max_words=expected - 1, count=count).process(df).drops == {
        "too_many_words": 1}


def test_word_count_bounds_checked():
    with pytest.raises(SpecError, match="greater than max_words"):
        build_stage({"stage": "word_count_filter", "min_words": 5, "max_words": 2}, "stages[0]")


def test_symbol_ratio():
    res = SymbolRatioFilter(max_ratio=0.2).process(frame(["#a #b #c d e", "a b c d e #f"]))
    assert res.drops == {"too_many_symbols": 1}
    assert res.frame["id"].tolist() == ["1"]
    # a document of symbols only has no words: infinitely many symbols per word
    assert SymbolRatioFilter().process(frame(["", "###"])).frame["text"].tolist() == [""]
    # non-overlapping counts, like str.count
    assert SymbolRatioFilter(symbols=("..",), max_ratio=0.5).process(frame(["a b ...."])).drops
SUBSTRINGS = st.lists(st.text(st.sampled_from(list("#.…*ab é\n")), max_size=30), max_size=12)


@settings(max_examples=200, deadline=None)
@given(SUBSTRINGS, st.lists(st.text(st.sampled_from(list("#.…*é")), min_size=1, max_size=3),
                            min_size=1, max_size=4))
def test_count_substrings_is_arrows_count_substring(texts, patterns):
    """The kernel symbol_ratio_filter counts with (on either backend) against Arrow's
    ``count_substring``, summed over the patterns: left to right, no overlaps."""
    import pyarrow.compute as pc

    from gpupipe.kernels.utf8 import count_substrings, utf8_buffers

    arr = pa.array(texts, pa.large_string())
    want = np.zeros(len(texts), np.int64)
    for p in patterns:
        want += pc.count_substring(arr, p).to_numpy(zero_copy_only=False)
    assert count_substrings(*utf8_buffers(arr), patterns).tolist() == want.tolist()


def test_symbol_ratio_on_the_corpus_counts_like_arrow(sample_records):
    import pyarrow.compute as pc

    from gpupipe.kernels.utf8 import count_substrings, utf8_buffers

    arr = pa.array([r["text"] for r in sample_records], pa.large_string())
    symbols = ("#", "...", "…", "•", "*")
    want = sum(pc.count_substring(arr, p).to_numpy(zero_copy_only=False) for p in symbols)
    got = count_substrings(*utf8_buffers(arr), symbols)
    assert got.tolist() == want.tolist() and int(got.sum()) > 100
    assert SymbolRatioFilter.backends == ("pandas", "cudf")




def test_regex_filter_drop_keep_and_case():
    df = frame(["Buy cheap pills now", "A page about Debian", "BUY NOW"])
    assert RegexFilter(pattern=r"buy\b").process(df).frame["id"].tolist() == ["0", "1", "2"]
    res = RegexFilter(pattern=r"buy\b", ignore_case=True).process(df)
    assert res.frame["id"].tolist() == ["1"] and res.drops == {"matches_pattern": 2}
    res = RegexFilter(pattern="Debian", action="keep").process(df)
    assert res.frame["id"].tolist() == ["1"] and res.drops == {"does_not_match_pattern": 2}


def test_regex_filter_rejects_bad_patterns_before_running():
    with pytest.raises(SpecError, match="invalid regular expression"):
        build_stage({"stage": "regex_filter", "pattern": "(unclosed"}, "stages[0]")
    with pytest.raises(SpecError, match="invalid regular expression"):
        build_stage({"stage": "regex_filter", "pattern": r"(?<=a)b"}, "stages[0]")  # no RE2


def test_sample_rate_is_met_and_independent_of_partitioning():
    ids = [f"doc-{i}" for i in range(20000)]
    df = frame(["x"] * len(ids), ids)
    kept = set(Sample(rate=0.3, seed=7).process(df).frame["id"])
    assert abs(len(kept) / len(ids) - 0.3) < 0.015
    halves = [Sample(rate=0.3, seed=7).process(df.iloc[a:b].reset_index(drop=True))
              for a, b in ((0, 7000), (7000, 20000))]
    assert kept == set().union(*(set(h.frame["id"]) for h in halves))
    assert kept != set(Sample(rate=0.3, seed=8).process(df).frame["id"])
    assert len(Sample(rate=0.0).process(df).frame) == 0
    assert len(Sample(rate=1.0).process(df).frame) == len(ids)


def test_sample_is_not_correlated_with_the_shard_split():
    from gpupipe.shards.routing import assign_splits, doc_keys

    ids = [f"doc-{i}" for i in range(20000)]
    kept = Sample(rate=0.5, seed=0).process(frame(["x"] * len(ids), ids)).frame["id"]
    splits = assign_splits(doc_keys(kept, 0), {"train": 0.5, "valid": 0.5})
    assert 0.45 < (splits == 0).mean() < 0.55


# ---------------------------------------------------------------------------- language id

TEXTS = {
    "en": "The quick brown fox jumps over the lazy dog while the children watch from the window.",
    "de": "Der schnelle braune Fuchs springt über den faulen Hund, während die Kinder zusehen.",
    "fr": "Le renard brun rapide saute par-dessus le chien paresseux pendant que les enfants "
          "regardent.",
    "es": "El rápido zorro marrón salta sobre el perro perezoso mientras los niños miran.",
    "ru": "Быстрая коричневая лиса прыгает через ленивую собаку, пока дети смотрят в окно.",
    "ja": "素早い茶色の狐が怠け者の犬を飛び越え、子供たちは窓から見ています。",
    "it": "La volpe marrone veloce salta sopra il cane pigro mentre i bambini guardano.",
}


def test_language_id_columns_and_keep():
    df = frame(list(TEXTS.values()))
    res = LanguageId().process(df)
    assert res.frame["language"].tolist() == list(TEXTS)
    assert res.frame["language_score"].dtype == np.float32
    assert (res.frame["language_score"] > 0.5).all()
    res = LanguageId(keep=("en", "de")).process(df)
    assert res.frame["language"].tolist() == ["en", "de"]
    assert res.drops == {"language_not_kept": 5}
    res = LanguageId(min_score=0.99999).process(df)
    assert res.drops.get("low_language_score", 0) >= 1
    assert res.counters["language:en"] == 1


def test_language_id_equals_py3langid(sample_records):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    texts = [r["text"] for r in sample_records[::7]] + list(TEXTS.values()) + [
        "", "12345", "ALL CAPS ENGLISH TEXT HERE", "e\u0301te\u0301"]
    langs, conf = identify(pa.array(texts, type=pa.large_string()))
    expected = [ident.classify(t) for t in texts]
    assert langs.to_pylist() == [lang for lang, _ in expected]
    np.testing.assert_allclose(conf, [p for _, p in expected], atol=1e-4)


def test_language_id_rejects_unknown_codes_and_missing_model():
    with pytest.raises(SpecError, match="not languages of the py3langid model"):
        build_stage({"stage": "language_id", "keep": ["english"]}, "stages[0]")
    with pytest.raises(SpecError, match="is not a file"):
        build_stage({"stage": "language_id", "fasttext_model": "/no/such/lid.176.bin"},
                    "stages[0]")


# ---------------------------------------------------------------------------- PII

POSITIVES = [
    ("write to jane.doe+news@mail.example.co.uk today", "email", "<EMAIL>"),
    ("host 10.0.0.254 is down", "ipv4", "<IP_ADDRESS>"),
    ("gateway 2001:db8:85a3::8a2e:370:7334 routes", "ipv6", "<IP_ADDRESS>"),
    ("call +1 (555) 123-4567 or", "phone", "<PHONE>"),
    ("office 555-867-5309 ext", "phone", "<PHONE>"),
    ("London 020 7946 0958 desk", "phone", "<PHONE>"),
    ("card 4111-1111-1111-1111 used", "credit_card", "<CREDIT_CARD>"),
    ("amex 378282246310005 used", "credit_card", "<CREDIT_CARD>"),
    ("pay GB82 WEST 1234 5698 7654 32 now", "iban", "<IBAN>"),
    ("ssn 078-05-1120 on file", "us_ssn", "<US_SSN>"),
    ("key AKIAIOSFODNN7EXAMPLE leaked", "secret_key", "<SECRET_KEY>"),
    ("token ghp_" + "a1B2" * 9 + " leaked", "secret_key", "<SECRET_KEY>"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
     "-----END OPENSSH PRIVATE KEY-----", "private_key", "<PRIVATE_KEY>"),
]

NEGATIVES = [
    "Python 3.11.7 and kernel 6.1.0-13-amd64 and version 1.2.3.4 and v2.0.0.1",
    "released on 2023-12-04 at 12:30:45, build 20231204.1",
    "the sum is 1234567890123456 and 4111 1111 1111 1112 fails Luhn",
    "pi is 3.14159265358979, e is 2.718281828, 10.100.1000.12 is a version",
    "std::vector<int> and a::b and Foo::Bar::baz()",
    "ISBN 978-3-16-148410-0 and order 000-12-3456 and 666-12-3456",
    "IBAN-like DE00 1234 5678 9012 3456 78 fails mod 97",
    "a table: 12 345 678 and 2024 2025 2026 and 1 800 000 people",
    "email-like text@home without a domain, and user@localhost",
]


@pytest.mark.parametrize("text, kind, token", POSITIVES)
def test_pii_positives(text, kind, token):
    res = PiiRedact().process(frame([text]))
    assert token in res.frame["text"][0]
    assert res.counters[f"redacted:{kind}"] == 1
    assert res.counters["documents_redacted"] == 1


@pytest.mark.parametrize("text", NEGATIVES)
def test_pii_leaves_versions_dates_and_numbers_alone(text):
    res = PiiRedact().process(frame([text]))
    assert res.frame["text"][0] == text
    assert res.counters == {}


def test_pii_entity_selection_and_tokens():
    text = "mail a@b.org from 10.1.2.3"
    res = PiiRedact(entities=("email",), tokens={"email": "[redacted]"}).process(frame([text]))
    assert res.frame["text"][0] == "mail [redacted] from 10.1.2.3"
    with pytest.raises(SpecError):
        build_stage({"stage": "pii_redact", "entities": ["passport"]}, "stages[0]")


def test_pii_rows_keep_their_order_and_untouched_rows_are_unchanged(sample_records):
    texts = [r["text"] for r in sample_records[:200]]
    texts[5] += " contact me@example.org"
    res = PiiRedact().process(frame(texts))
    out = res.frame["text"].tolist()
    assert out[5].endswith("contact <EMAIL>")
    changed = [i for i, (a, b) in enumerate(zip(texts, out)) if a != b]
    assert 5 in changed and res.counters["documents_redacted"] == len(changed)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("0123456789.-: ()+@abcxyzAKI")),
                        max_size=60), max_size=5))
def test_pii_never_changes_row_count_or_crashes(texts):
    res = PiiRedact().process(frame(texts))
    assert len(res.frame) == len(texts)
    assert res.frame["id"].tolist() == [str(i) for i in range(len(texts))]


def test_language_id_with_a_fasttext_model(tmp_path, sample_records):
    fasttext = pytest.importorskip("fasttext")
    # a real (tiny) supervised model trained here: English from data/, German and French lines
    train = tmp_path / "train.txt"
    lines = [f"__label__en {r['text'][:300]}".replace("\n", " ") for r in sample_records[:200]]
    lines += [f"__label__de {TEXTS['de']}"] * 100 + [f"__label__fr {TEXTS['fr']}"] * 100
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = fasttext.train_supervised(str(train), epoch=10, verbose=0, seed=1, thread=1)
    path = tmp_path / "lid.bin"
    model.save_model(str(path))
    stage = LanguageId(fasttext_model=str(path), keep=("en",))
    res = stage.process(frame([sample_records[500]["text"], TEXTS["de"], TEXTS["fr"]]))
    assert res.frame["language"].tolist() == ["en"]
    assert res.drops == {"language_not_kept": 2}
    assert 0 < res.frame["language_score"][0] <= 1


def pii_reference(texts, kinds=None):
    """pii_redact without its compiled prefilter: every document through the candidate scans
    and validators (what the stage did before the prefilter)."""
    import pyarrow.compute as pc

    from gpupipe.stages.transforms.pii import CANDIDATES, DEFAULT_TOKENS, ENTITIES, redact

    arr = pa.array(texts, pa.large_string())
    kinds = [k for k in ENTITIES if kinds is None or k in kinds]
    counts: dict[str, int] = {}
    out = []
    for i, text in enumerate(texts):
        hit = [k for k in kinds if pc.match_substring_regex(
            arr.slice(i, 1), CANDIDATES.get(k, ENTITIES[k][0])).to_pylist()[0]]
        out.append(redact(text, hit, DEFAULT_TOKENS, counts) if hit else text)
    return out, {f"redacted:{k}": v for k, v in counts.items() if v}


PII_PIECES = st.sampled_from(
    list("0123456789.-:()+@ abcdefxyzABCDEFGKIS_\n")
    + ["AKIA", "ghp_", "xoxb-", "GB82", "-----BEGIN ", ".com", "::", "a@b.org", "10.0.0.1",
       "4111-1111-1111-1111", "+1 (555) 123-4567", "555-867-5309", "078-05-1120",
       "2001:db8::1", "fe80::1", "GB82 WEST 1234 5698 7654 32", "AKIAIOSFODNN7EXAMPLE",
       "12:30:45", "1.2.3.4.5", "ab:cd::ef"])
PII_TEXT = st.lists(st.lists(PII_PIECES, max_size=30).map("".join), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(PII_TEXT)
def test_the_pii_prefilter_never_clears_a_document_with_something_to_redact(texts):
    from gpupipe.kernels.pii import pii_candidates
    from gpupipe.kernels.utf8 import utf8_buffers

    want, _ = pii_reference(texts)
    flagged = pii_candidates(*utf8_buffers(pa.array(texts, pa.large_string())))
    for text, new, flag in zip(texts, want, flagged):
        assert flag or new == text, text


def test_pii_with_the_prefilter_equals_the_full_scan(sample_records):
    texts = ([r["text"] for r in sample_records] + [t for t, _, _ in POSITIVES] + NEGATIVES
             + ["mixed: a@b.org 10.0.0.1 4111-1111-1111-1111 +1 (555) 123-4567 GB82 WEST "
                "1234 5698 7654 32 078-05-1120 2001:db8::1 fe80::1"])
    res = PiiRedact().process(frame(texts))
    want, counters = pii_reference(texts)
    assert res.frame["text"].tolist() == want
    changed = sum(a != b for a, b in zip(texts, want))
    assert res.counters == {**counters, "documents_redacted": changed}
    assert changed >= len(POSITIVES) and PiiRedact.backends == ("pandas", "cudf")
