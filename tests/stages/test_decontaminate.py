"""decontaminate: planted evaluation text is found with exact counts under both policies, text
that shares 12 of 13 words is untouched, cut keeps the text around a match, and the kernel
agrees with a plain-Python reference of the normalisation and the n-gram matching."""

from __future__ import annotations

import functools
import gzip
import json
import operator
import random
import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.kernels.contamination import build_index, contamination_scan, sample_keys
from gpupipe.kernels.utf8 import utf8_buffers
from gpupipe.stages import Decontaminate
from tests.conftest import SAMPLE, write_jsonl

N = 13


def norm_words(text: str) -> list[str]:
    """The kernel's words in plain Python: runs of letters, digits and marks, lower case,
    accents stripped."""
    out, cur = [], []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "M":
            continue
        if cat[0] in "LN":
            base = "".join(c for c in unicodedata.normalize("NFKD", ch)
                           if not unicodedata.combining(c)).lower()
            cur.append(base if len(base) == 1 else (ch.lower() if len(ch.lower()) == 1 else ch))
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def grams(words: list[str], n: int = N) -> list[tuple]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


@pytest.fixture(scope="module")
def texts():
    python = [json.loads(line) for f in sorted(SAMPLE.glob("python-docs-*.jsonl.gz"))
              for line in gzip.open(f, "rt", encoding="utf-8")]
    debian = [json.loads(line) for line in gzip.open(SAMPLE / "debian-docs.jsonl.gz", "rt",
                                                     encoding="utf-8")]
    corpus = [r for r in python if len(r["text"]) > 2000][:150]
    return corpus, [r["text"] for r in debian if len(r["text"].split()) > 200]


def sample_of(text: str, k: int, rng) -> str:
    """``k`` consecutive whitespace words of ``text``, from a random place."""
    w = text.split()
    a = rng.randrange(0, len(w) - k)
    return " ".join(w[a:a + k])


@pytest.fixture(scope="module")
def planted(texts, tmp_path_factory):
    """150 Python-doc documents; two eval sets taken from Debian documents (trivia: 6 samples of
    30 words, JSONL; code: 4 samples of 20 words, .txt); 10 documents carry one sample each,
    upper-cased and re-punctuated; 3 documents carry a sample with one word changed or only
    12 of its words."""
    corpus, debian = texts
    rng = random.Random(7)
    trivia = [sample_of(t, 30, rng) for t in debian[:6]]
    code = [sample_of(t, 20, rng) for t in debian[6:10]]
    d = tmp_path_factory.mktemp("decontam")
    write_jsonl(d / "evals" / "trivia.jsonl", [{"question": q, "answer": "x"} for q in trivia])
    (d / "evals" / "code.txt").write_text("\n".join(code) + "\n", encoding="utf-8")
    docs = [dict(id=r["id"], text=r["text"]) for r in corpus]
    hits = {}
    spans = {}
    for k, (doc, sample) in enumerate(zip(docs[:10], trivia + code)):
        w = doc["text"].split(" ")
        at = len(w) // 2
        disguised = sample
        if k % 2:   # other case (ASCII letters: upper-casing "ß" would change the word) and
            disguised = "".join(c.upper() if c.isascii() else c for c in sample).replace(
                " ", " -- ", 3)   # other punctuation
        head = " ".join(w[:at]) + " \n\n"
        doc["text"] = head + disguised + ".\n\n " + " ".join(w[at:])
        word = [j for j, c in enumerate(disguised) if unicodedata.category(c)[0] in "LN"]
        spans[doc["id"]] = (len(head) + word[0], len(head) + word[-1] + 1)
        m = len(norm_words(sample))
        hits[doc["id"]] = ("trivia" if k < 6 else "code", m - N + 1 if m >= N else 1)
    near = []
    for doc, sample in zip(docs[10:12], trivia[:2]):   # one word of each 13-gram changed
        w = norm_words(sample)[:26]
        w[12] = "zebra"
        w[25] = "zebra"
        doc["text"] += "\n" + " ".join(w)
        near.append(doc["id"])
    docs[12]["text"] += "\n" + " ".join(norm_words(code[0])[:12])   # 12 words only
    near.append(docs[12]["id"])
    write_jsonl(d / "in" / "a.jsonl", docs[::2])
    write_jsonl(d / "in" / "b.jsonl", docs[1::2])
    return {"dir": d, "docs": docs, "hits": hits, "near": near, "spans": spans}


def eval_sets(planted):
    e = planted["dir"] / "evals"
    return [{"name": "trivia", "path": str(e / "trivia.jsonl"), "text_column": "question"},
            {"name": "code", "path": str(e / "code.txt")}]


def run(planted, out, client, **kw):
    res = gp.Pipeline(input={"path": str(planted["dir"] / "in"), "id_column": "id"},
                      output=str(out), stages=[Decontaminate(eval_sets=eval_sets(planted), **kw)]
                      ).run(client=client, progress=False)
    return res, pd.read_parquet(out / "data")


def test_drop_removes_exactly_the_planted_documents(planted, client, tmp_path):
    res, data = run(planted, tmp_path / "o", client, keep_rejected=True)
    st = res.stage("decontaminate")
    assert st["drops"] == {"contaminated": 10}
    assert sorted(set(d["id"] for d in planted["docs"]) - set(data["id"])) == sorted(planted["hits"])
    for name in ("trivia", "code"):
        mine = [n for s, n in planted["hits"].values() if s == name]
        assert st["counters"][f"{name}:documents"] == len(mine)
        assert st["counters"][f"{name}:ngrams"] == sum(mine)   # 18 per trivia, 8 per code
    lengths = {d["id"]: len(d["text"]) for d in planted["docs"]}
    assert st["counters"]["trivia:chars_removed"] + st["counters"]["code:chars_removed"] == \
        sum(lengths[i] for i in planted["hits"])
    rejected = pd.read_parquet(tmp_path / "o" / "rejected" / "decontaminate")
    assert sorted(rejected["id"]) == sorted(planted["hits"]) and set(rejected["reason"]) == {
        "contaminated"}
    assert set(planted["near"]) <= set(data["id"])   # 12 of 13 words: untouched
    assert res.summary["accounting"]["balanced"]


def test_cut_keeps_the_text_around_each_match(planted, client, tmp_path):
    res, data = run(planted, tmp_path / "o", client, policy="cut", margin=50,
                    min_piece_chars=100)
    st = res.stage("decontaminate")
    by_id = dict(zip(data["id"], data["text"]))
    for doc in planted["docs"][:10]:
        assert doc["id"] not in by_id
        # the match runs from the sample's first word to its last: it and 50 characters on
        # each side go, the text around stays
        a, b = planted["spans"][doc["id"]]
        assert by_id[doc["id"] + "#0"] == doc["text"][:a - 50].strip()
        assert by_id[doc["id"] + "#1"] == doc["text"][b + 50:].strip()
        assert doc["id"] + "#2" not in by_id
    assert st["counters"]["documents_cut"] == 10 and st["counters"]["pieces"] == 20
    assert st["drops"] == {}
    acc = res.summary["accounting"]
    assert acc["added"] == 10 and acc["balanced"] and acc["docs_out"] == 150 + 10
    # clean documents are byte for byte unchanged
    for doc in planted["docs"][10:]:
        assert by_id[doc["id"]] == doc["text"]


def test_cut_drops_documents_over_max_matches_or_without_pieces(planted, client, tmp_path):
    res, data = run(planted, tmp_path / "o", client, policy="cut", max_matches=0)
    assert res.stage("decontaminate")["drops"] == {"contaminated": 10}
    res, data = run(planted, tmp_path / "o2", client, policy="cut", min_piece_chars=10**6)
    assert res.stage("decontaminate")["drops"] == {"contaminated": 10}
    assert len(data) == 140


def test_annotate_names_the_sets_and_drops_nothing(planted, client, tmp_path):
    res, data = run(planted, tmp_path / "o", client, mode="annotate")
    assert len(data) == 150
    marked = data.dropna(subset=["decontaminate_sets"])
    assert dict(zip(marked["id"], marked["decontaminate_sets"])) == {
        i: s for i, (s, _) in planted["hits"].items()}
    assert set(marked["decontaminate_reason"]) == {"contaminated"}
    assert res.stage("decontaminate")["counters"]["flagged:contaminated"] == 10


def test_same_bytes_with_one_and_two_workers(planted, client, tmp_path):
    from distributed import Client, LocalCluster

    run(planted, tmp_path / "two", client, policy="cut")
    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as c, \
            Client(c) as one:
        run(planted, tmp_path / "one", one, policy="cut")
    files = sorted(p.name for p in (tmp_path / "two" / "data").glob("*.parquet"))
    assert files
    for f in files:
        assert (tmp_path / "one" / "data" / f).read_bytes() == \
               (tmp_path / "two" / "data" / f).read_bytes()


def test_kernel_matches_a_python_reference(texts):
    """Random windows of real documents (several languages, accents) as an eval set of 13-grams
    and whole short samples; per document, the n-grams matched equal a set lookup in Python."""
    corpus, debian = texts
    rng = random.Random(3)
    docs = [r["text"] for r in corpus[:40]] + debian[:40]
    samples = [sample_of(t, rng.choice([5, 8, 20, 40]), rng) for t in rng.sample(docs, 30)]
    off, data = utf8_buffers(pa.array(samples, pa.large_string()))
    keys, rows, words = sample_keys(off, data, N, 3)
    ix = build_index(keys, rows % 2)
    lengths = np.array(sorted({N, *(int(w) for w in words if 3 <= w < N)}), np.int64)
    ref = {}
    for k, s in enumerate(samples):
        w = norm_words(s)
        for g in (grams(w) if len(w) >= N else [tuple(w)]):
            ref[g] = ref.get(g, 0) | (1 << (k % 2))
    off, data = utf8_buffers(pa.array(docs, pa.large_string()))
    hits, sets, nreg, set_hits, regions, _ = contamination_scan(
        off, data, ix["keys"], ix["masks"], ix["bloom"], lengths, 2, 4)
    for d, text in enumerate(docs):
        w = norm_words(text)
        found = [ref[g] for n in lengths for g in grams(w, int(n)) if g in ref]
        assert hits[d] == len(found), d
        assert int(sets[d]) == functools.reduce(operator.or_, found, 0), d
        assert set_hits[d].tolist() == [sum(1 for m in found if m >> s & 1) for s in (0, 1)]
    assert hits.sum() > 30 and (hits > 0).sum() >= 25   # the samples' documents, at least


def test_normalisation_ignores_case_punctuation_and_accents():
    evals = pa.array(["Le café « crème » coûte trois euros, dit-il à l'été"], pa.large_string())
    keys, rows, words = sample_keys(*utf8_buffers(evals), 13, 3)
    assert words.tolist() == [11]   # le cafe creme coute trois euros dit il a l ete
    ix = build_index(keys, rows)
    docs = pa.array(["x LE CAFE creme COUTE trois-euros; dit il, A L ETE y",
                     "le cafe creme coute trois euros dit il a l ete",
                     "le cafe creme coute trois euros dit il a"], pa.large_string())
    hits, *_ = contamination_scan(*utf8_buffers(docs), ix["keys"], ix["masks"], ix["bloom"],
                                  np.array([11, 13]), 1, 2)
    assert hits.tolist() == [1, 1, 0]


def test_bad_eval_sets_stop_with_the_file_and_line(planted, client, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n{"prompt": "no question here"}\n')
    stage = Decontaminate(eval_sets=[{"name": "b", "path": str(bad), "text_column": "question"}])
    with pytest.raises(SpecError, match=r"bad.jsonl:2: no field 'question' \(has: prompt\)"):
        stage.prepare()
    missing = Decontaminate(eval_sets=[{"name": "m", "path": str(tmp_path / "nope.jsonl")}])
    with pytest.raises(SpecError, match="matches no file"):
        missing.prepare()
    with pytest.raises(ValueError, match="unique"):
        Decontaminate(eval_sets=[{"name": "a", "path": "x"}, {"name": "a", "path": "y"}])
    with pytest.raises(ValueError):
        Decontaminate(eval_sets=[])
