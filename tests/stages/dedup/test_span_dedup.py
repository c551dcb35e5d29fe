"""span_dedup against the plain-Python reference (tests/stages/reference_spans.py): the kernels
unit for unit and hash for hash, whole runs span for span on the sample corpus and on written
corner cases, with 1 and 2 workers, against an earlier run, annotating, and bad specs."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpupipe as gp
from gpupipe.kernels.spans import cut_units, span_units
from gpupipe.kernels.utf8 import utf8_buffers
from gpupipe.spec import SpecError
from gpupipe.stages import SpanDedup
from tests.conftest import write_jsonl
from tests.stages import reference_spans as ref


def kernel_units(texts: list[str], unit: str, span: int, normalize=ref.NORMS):
    """Per document: (unit end byte offsets from its start, window hashes)."""
    off, data = utf8_buffers(pa.array(texts, pa.string()))
    nunits, ends, nwin, wh = span_units(off, data, unit, span, ref.table_for(normalize))
    uo, wo = np.r_[0, np.cumsum(nunits)], np.r_[0, np.cumsum(nwin)]
    return [(list(ends[uo[d]:uo[d + 1]] - off[d]), [int(x) for x in wh[wo[d]:wo[d + 1]]])
            for d in range(len(texts))]


def reference_units(text: str, unit: str, span: int, normalize=ref.NORMS):
    us = ref.units(text, unit, ref.table_for(normalize))
    ends = [len(text[:u[1]].encode()) for u in us]
    return ends, [ref.window_hash(tuple(u[2] for u in us[k:k + span]))
                  for k in range(len(us) - span + 1)]


@pytest.mark.parametrize("unit", ["line", "paragraph", "sentence"])
def test_kernels_equal_reference_on_the_sample(sample_records, unit):
    texts = [r["text"] for r in sample_records]
    got = kernel_units(texts, unit, 3)
    assert got == [reference_units(t, unit, 3) for t in texts]
    assert sum(len(e) for e, _ in got) == {"line": 71712, "paragraph": 24393,
                                           "sentence": 27208}[unit]


PIECES = ["The cat sat.", "It rained!", "Why?", "e.g. this", "U.S. law.", "J. Smith said.",
          "Wait...", "no end", "said: \"Go.\"", "(See above.)", "3.14 is pi.", "Ünïcödé Wörds.",
          "我们走了。", "「你好。」", "他说！", "ｱｲｳ｡", "🙂 emoji.", "e\u0301 acute.", "1999 2024.",
          "-----", "***", " ", "  ", "\t", "\n", "\n\n", " \n \n", "\r\n", "\u3000", "\u00a0",
          "x" * 300]


texts_st = st.lists(st.sampled_from(PIECES), max_size=30).map(lambda ps: "".join(
    p if i % 3 else p + " " for i, p in enumerate(ps)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(texts_st, min_size=1, max_size=6),
       unit=st.sampled_from(["line", "paragraph", "sentence"]), span=st.integers(1, 4),
       normalize=st.sets(st.sampled_from(ref.NORMS)), data=st.data())
def test_kernels_equal_reference_on_generated_text(texts, unit, span, normalize, data):
    """Units, window hashes and the cut, on CJK without spaces, emoji, combining marks, runs of
    blank lines and whitespace, text with nothing to hash, and one long word."""
    got = kernel_units(texts, unit, span, tuple(normalize))
    assert got == [reference_units(t, unit, span, tuple(normalize)) for t in texts]
    # cut a random choice of units: the kernel's text is the reference's
    table = ref.table_for(tuple(normalize))
    us = [ref.units(t, unit, table) for t in texts]
    masks = [data.draw(st.lists(st.booleans(), min_size=len(u), max_size=len(u))) for u in us]
    off, raw = utf8_buffers(pa.array(texts, pa.string()))
    nunits = np.array([len(u) for u in us], np.int64)
    ends = np.array([off[d] + e for d, (e, _) in enumerate(got) for e in e], np.int64)
    new_off, new_data, changed = cut_units(off, raw, nunits, ends,
                                           np.array([m for ms in masks for m in ms], bool))
    for d, (t, u, m) in enumerate(zip(texts, us, masks)):
        tail = u[-1][1] if u else 0
        want = "".join(t[a:b] for (a, b, _), c in zip(u, m) if not c) + t[tail:]
        if any(m):
            want = want.lstrip()
        assert bytes(new_data[new_off[d]:new_off[d + 1]]).decode() == want
        assert bool(changed[d]) == any(m)


# --- whole runs ---------------------------------------------------------------------------------

def run(client, path, out, **kw):
    return gp.Pipeline(input={"path": str(path), "id_column": "id"}, output=str(out),
                       stages=[SpanDedup(**kw)]).run(client=client, progress=False)


def audit_rows(out) -> list[tuple]:
    sp = pd.read_parquet(out / "dedup" / "spans.parquet")
    return list(zip(sp["id"], sp["start"], sp["end"], sp["count"], sp["kept_by"], sp["bytes"],
                    sp["text"]))


def check_against_reference(res, out, docs, **kw):
    kept, audit, emptied = ref.span_dedup(docs, **kw)
    got = res.to_pandas()
    assert dict(zip(got["id"], got["text"])) == kept
    assert list(got["id"]) == [i for i, _ in docs if i in kept]   # input order kept
    st = res.stage("span_dedup")
    assert st["drops"] == ({"span_dedup_emptied": len(emptied)} if emptied else {})
    assert audit_rows(out) == audit
    return st, audit


@pytest.fixture(scope="module")
def sample_dir(tmp_path_factory, sample_records):
    """The sample as 3 JSONL files (3 partitions)."""
    d = tmp_path_factory.mktemp("span-sample")
    for k in range(3):
        write_jsonl(d / f"s{k}.jsonl", [{"id": r["id"], "text": r["text"]}
                                         for r in sample_records[k::3]])
    return d


def in_order(records, k=3):
    return [(r["id"], r["text"]) for j in range(k) for r in records[j::k]]


@pytest.mark.parametrize("kw", [
    {},                                                          # sentence, span 3
    {"unit": "line", "span": 1, "min_words": 5},
    {"unit": "paragraph", "span": 2, "normalize": ["case"], "max_occurrences": 2},
    {"unit": "sentence", "span": 1, "normalize": [], "min_words": 0},
    {"within_document": True, "min_words": 0},                  # datatrove's SentenceDedup
    {"unit": "line", "span": 3, "within_document": True, "max_occurrences": 2},
], ids=["sentence3", "line1", "paragraph2", "sentence1-raw", "within", "line3-within2"])
def test_runs_equal_the_reference_on_the_sample(client, sample_dir, sample_records, tmp_path, kw):
    out = tmp_path / "o"
    res = run(client, sample_dir, out, **kw)
    st, audit = check_against_reference(res, out, in_order(sample_records), **kw)
    assert st["counters"]["spans_cut"] == len(audit)
    assert st["counters"]["bytes_cut"] >= sum(a[5] for a in audit)   # + the lstrip after cuts
    if not kw:   # the default: 3-sentence spans, as datatrove
        assert (len(audit), st["counters"]["documents_cut"]) == (529, 138)


CORNERS = [
    ("a", "Cookie banner here. Accept all cookies now. Read our policy today. "
          "The first story is about cats and dogs. It has several sentences."),
    ("b", "Cookie banner here. Accept all cookies now. Read our policy today. "
          "A second story about birds. Birds fly south in winter."),
    ("c", "A third story about fish. Fish swim in the sea. Cookie banner here. "
          "Accept all cookies now. Read our policy today."),           # the span at the end
    ("d", "COOKIE banner HERE!! accept ALL cookies now?! Read our policy today."),
    ("e", "Cookie banner here. Accept all cookies now. Read our policy today. "
          "The first story is about cats and dogs. It has several sentences."),  # = a
    ("f", ""),
    ("g", "\n\n\n   \n"),
    ("h", "我们走了。他们来了。天气很好。我们走了。他们来了。天气很好。"),
    ("i", "序文。我们走了。他们来了。天气很好。结尾。"),
    ("j", "one huge line " * 4000 + "end. Cookie banner here. Accept all cookies now. "
          "Read our policy today."),
    ("k", "Line one\n\n\nCookie banner here.\nAccept all cookies now.\nRead our policy today.\n"
          "\n-----\nLast line 2024\n"),
]


@pytest.fixture(scope="module")
def corner_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("span-corners")
    write_jsonl(d / "a.jsonl", [{"id": i, "text": t} for i, t in CORNERS[:6]])
    write_jsonl(d / "b.jsonl", [{"id": i, "text": t} for i, t in CORNERS[6:]])
    return d


def test_corner_cases_equal_the_reference(client, corner_dir, tmp_path):
    out = tmp_path / "o"
    res = run(client, corner_dir, out, min_words=1)
    _, audit = check_against_reference(res, out, CORNERS, min_words=1)
    got = dict(zip(*res.to_pandas()[["id", "text"]].T.values))
    # b and c lose the banner (at the start, at the end), d too (normalised), e is a copy of a
    assert got["b"] == "A second story about birds. Birds fly south in winter."
    assert got["c"] == "A third story about fish. Fish swim in the sea."
    assert "d" not in got and "e" not in got
    # a document keeps the spans it repeats itself when it is the first to have them
    assert got["h"].startswith("我们走了。他们来了。天气很好。我们走了。")
    assert got["i"] == "序文。结尾。"
    assert got["j"] == "one huge line " * 4000 + "end."
    assert got["f"] == "" and got["g"] == "\n\n\n   \n"
    assert [a[0] for a in audit] == ["b", "c", "d", "e", "e", "e", "i", "j"]


@pytest.mark.parametrize("counting", ["exact", "bloom"])
def test_one_and_two_workers_give_the_same_bytes(client, sample_dir, tmp_path, counting):
    from distributed import Client, LocalCluster

    two = tmp_path / "two"
    run(client, sample_dir, two, unit="line", span=2, counting=counting)
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one_client:
        run(one_client, sample_dir, tmp_path / "one", unit="line", span=2, counting=counting)

    def digest(out):
        files = sorted(p for sub in ("data", "dedup") for p in (out / sub).rglob("*.parquet") if p.is_file())
        return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in files}
    assert digest(two) == digest(tmp_path / "one") and len(digest(two)) == 9


def test_against_an_earlier_run_equals_one_run_of_both(client, sample_records, tmp_path):
    first, second = sample_records[:900], sample_records[900:]
    write_jsonl(tmp_path / "a" / "a.jsonl", [{"id": r["id"], "text": r["text"]} for r in first])
    write_jsonl(tmp_path / "b" / "b.jsonl", [{"id": r["id"], "text": r["text"]} for r in second])
    run(client, tmp_path / "a", tmp_path / "ra", unit="line", span=2, min_words=5)
    res = run(client, tmp_path / "b", tmp_path / "rb", unit="line", span=2, min_words=5,
              against=[str(tmp_path / "ra")])
    docs = [(r["id"], r["text"]) for r in sample_records]
    kept, audit, emptied = ref.span_dedup(docs, unit="line", span=2, min_words=5)
    ids = {r["id"] for r in second}
    got = res.to_pandas()
    assert dict(zip(got["id"], got["text"])) == {i: t for i, t in kept.items() if i in ids}
    mine = [a for a in audit if a[0] in ids]
    assert audit_rows(tmp_path / "rb") == mine and len(mine) == 904
    sp = pd.read_parquet(tmp_path / "rb" / "dedup" / "spans.parquet")
    earlier = {r["id"] for r in first}
    assert set(sp.loc[sp["kept_run"].notna(), "kept_by"]) <= earlier
    assert (sp["kept_run"].notna() == sp["kept_by"].isin(earlier)).all()
    # an index of other parameters is refused, naming them
    with pytest.raises(SpecError, match="span"):
        run(client, tmp_path / "b", tmp_path / "rc", unit="line", span=3,
            against=[str(tmp_path / "ra")])


def test_annotate_cuts_nothing_and_reports_the_share(client, corner_dir, tmp_path):
    out = tmp_path / "o"
    res = run(client, corner_dir, out, mode="annotate", min_words=1)
    got = res.to_pandas()
    assert dict(zip(got["id"], got["text"])) == dict(CORNERS)
    kept, _, _ = ref.span_dedup(CORNERS, min_words=0)
    want = {i: (len(t) - len(kept[i])) / len(t) if t else 0.0 for i, t in CORNERS}
    assert dict(zip(got["id"], got["span_dedup_fraction"])) == want
    assert want["e"] == 1.0 and want["a"] == 0.0
    assert len(audit_rows(out)) == 8


@pytest.mark.parametrize("bad, message", [
    ({"span": 0}, "span"), ({"unit": "word"}, "unit"), ({"normalize": ["accents"]}, "normalize"),
    ({"max_occurrences": 0}, "max_occurrences"),
])
def test_bad_specs_are_refused_with_the_field(bad, message):
    spec = {"version": 1, "input": {"path": "x.jsonl"},
            "stages": [{"stage": "span_dedup", **bad}], "output": {"path": "o"}}
    with pytest.raises(SpecError, match=message):
        gp.Pipeline.from_dict(spec)


def test_run_json_counts(client, corner_dir, tmp_path):
    out = tmp_path / "o"
    run(client, corner_dir, out, min_words=1)
    summary = json.loads((out / "run.json").read_text())
    st = next(s for s in summary["stages"] if s["stage"] == "span_dedup")
    assert [s["step"] for s in st["steps"]] == ["spans", "count", "cut"]
    assert st["counters"]["documents"] == 11 and summary["accounting"]["balanced"]


def test_the_report_lists_the_most_repeated_spans(client, corner_dir, tmp_path):
    import html

    out = tmp_path / "o"
    res = run(client, corner_dir, out, min_words=1)
    page = open(res.report_path, encoding="utf-8").read()
    section = page[page.index("<h2>Repeated spans</h2>"):]
    assert "8 spans cut from 6 of 11 documents" in section
    cells = re.findall(r"<td>([^<]*)</td>", section.split("</table>")[0])
    rows = [[html.unescape(c) for c in cells[k:k + 5]] for k in range(0, len(cells), 5)]
    sp = pd.read_parquet(out / "dedup" / "spans.parquet")
    banner = sp[sp["count"] == 6]
    assert rows[0] == ["6", "5", f"{banner['bytes'].sum():,}",
                       f"{banner['bytes'].sum() / sp['bytes'].sum():.1%}",
                       "Cookie banner here. Accept all cookies now. Read our policy today."]
    assert len(rows) == sp["hash"].nunique() == 4


# --- counting: bloom ----------------------------------------------------------------------------

def without_counts(audit):
    """Audit rows as counting: bloom writes them: no count, no keeping document."""
    return [(a[0], a[1], a[2], None, None, *a[5:]) for a in audit]


def bloom_audit_rows(out) -> list[tuple]:
    sp = pd.read_parquet(out / "dedup" / "spans.parquet")
    assert sp["count"].isna().all() and sp["kept_by"].isna().all()
    return [(i, s, e, None, None, b, t) for i, s, e, b, t in
            zip(sp["id"], sp["start"], sp["end"], sp["bytes"], sp["text"])]


@pytest.mark.parametrize("kw", [{}, {"within_document": True, "min_words": 0}],
                         ids=["sentence3", "within"])
def test_bloom_with_a_tiny_rate_equals_exact_counting(client, sample_dir, sample_records,
                                                       tmp_path, kw):
    """At a false-positive rate of 1e-9 no unique span of the sample tests positive: the text,
    drops and cut ranges are the reference's."""
    out = tmp_path / "o"
    res = run(client, sample_dir, out, counting="bloom", false_positive_rate=1e-9, **kw)
    kept, audit, emptied = ref.span_dedup(in_order(sample_records), **kw)
    got = res.to_pandas()
    assert dict(zip(got["id"], got["text"])) == kept
    assert bloom_audit_rows(out) == without_counts(audit)
    c = res.stage("span_dedup")["counters"]
    assert [s["step"] for s in res.stage("span_dedup")["steps"]] == ["spans", "bloom", "cut"]
    assert (c["bloom_keys"], c["bloom_seen"], c["bloom_hashes"]) == (23774, len(audit), 27)
    assert c["bloom_fp_rate_bound"] <= 1e-9 and c["bloom_fp_rate_end"] <= 1e-9


def test_bloom_false_positives_only_add_cuts_within_the_bound(client, sample_dir,
                                                              sample_records, tmp_path):
    """At the largest rate allowed (0.1), every span exact counting cuts is cut, and the unique
    windows cut besides are fewer than the bound says (they are tested while the filter
    fills)."""
    out = tmp_path / "o"
    res = run(client, sample_dir, out, unit="line", span=1, min_words=0, counting="bloom",
              false_positive_rate=0.1)
    _, audit, _ = ref.span_dedup(in_order(sample_records), unit="line", span=1, min_words=0)
    sp = pd.read_parquet(out / "dedup" / "spans.parquet")
    exact = {(a[0], a[1], a[2]) for a in audit}
    got = set(zip(sp["id"], sp["start"], sp["end"]))
    c = res.stage("span_dedup")["counters"]
    extra = len(got - exact)
    assert exact < got and extra == 1119
    unique_windows = c["spans"] - len(exact)
    assert extra / unique_windows < c["bloom_fp_rate_bound"] <= 0.1


def test_bloom_against_an_earlier_run(client, sample_records, tmp_path):
    """An earlier run's span index (written by exact counting) goes into the filter first."""
    first, second = sample_records[:900], sample_records[900:]
    write_jsonl(tmp_path / "a" / "a.jsonl", [{"id": r["id"], "text": r["text"]} for r in first])
    write_jsonl(tmp_path / "b" / "b.jsonl", [{"id": r["id"], "text": r["text"]} for r in second])
    run(client, tmp_path / "a", tmp_path / "ra", unit="line", span=2, min_words=5)
    res = run(client, tmp_path / "b", tmp_path / "rb", unit="line", span=2, min_words=5,
              against=[str(tmp_path / "ra")], counting="bloom", false_positive_rate=1e-9)
    docs = [(r["id"], r["text"]) for r in sample_records]
    kept, audit, _ = ref.span_dedup(docs, unit="line", span=2, min_words=5)
    ids = {r["id"] for r in second}
    got = res.to_pandas()
    assert dict(zip(got["id"], got["text"])) == {i: t for i, t in kept.items() if i in ids}
    assert bloom_audit_rows(tmp_path / "rb") == without_counts([a for a in audit
                                                                if a[0] in ids])


@pytest.mark.parametrize("bad, message", [
    ({"counting": "bloom", "max_occurrences": 2}, "counting: bloom .* max_occurrences: 2"),
    ({"counting": "bloom", "keep": "longest"}, "counting: bloom .* keep: longest"),
    ({"counting": "bloom", "false_positive_rate": 0}, "false_positive_rate"),
    ({"counting": "bloom", "false_positive_rate": 0.5}, "false_positive_rate"),
    ({"counting": "approximate"}, "counting"),
])
def test_bad_bloom_specs_are_refused(bad, message):
    spec = {"version": 1, "input": {"path": "x.jsonl"},
            "stages": [{"stage": "span_dedup", **bad}], "output": {"path": "o"}}
    with pytest.raises(SpecError, match=message):
        gp.Pipeline.from_dict(spec)


def test_the_report_of_a_bloom_run(client, corner_dir, tmp_path):
    import html

    res = run(client, corner_dir, tmp_path / "o", min_words=1, counting="bloom")
    page = html.unescape(open(res.report_path, encoding="utf-8").read())
    section = page[page.index("<h2>Repeated spans</h2>"):]
    assert "8 spans cut from 6 of 11 documents" in section
    # 24 windows in one block of 512 bits: far below the default 1e-4
    assert ("counted with a Bloom filter of 0.0 MiB over 24 spans: a span seen nowhere else was "
            "cut with probability at most 7.7e-08") in section
    cells = re.findall(r"<td>([^<]*)</td>", section.split("</table>")[0])
    assert cells[:2] == ["n/a", "5"] and cells[4].startswith("Cookie banner here.")
