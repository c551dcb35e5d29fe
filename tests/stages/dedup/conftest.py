from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, write_jsonl


def word_grams(text: str, n: int = 5) -> set[str]:
    w = text.lower().split()
    return {" ".join(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


@pytest.fixture(scope="session")
def planted(tmp_path_factory):
    """500 distinct Python-doc sections (150+ words), 100 near-copies with 1-5% of their words
    replaced, and 20 exact copies, shuffled into three files plus an empty one."""
    recs = [json.loads(line) for f in sorted(SAMPLE.glob("python-docs-*.jsonl.gz"))
            for line in gzip.open(f, "rt", encoding="utf-8")]
    base = [r for r in recs if len(r["text"].split()) >= 150][:500]
    rng = random.Random(0)
    near = []
    for r in rng.sample(base, 100):
        words = r["text"].split(" ")
        for j in rng.sample(range(len(words)), max(1, int(len(words) * rng.uniform(0.01, 0.05)))):
            words[j] = rng.choice(["alpha", "beta", "gamma", "delta"])
        text = " ".join(words)
        a, b = word_grams(r["text"]), word_grams(text)
        near.append({"id": r["id"] + "~near", "text": text, "orig": r["id"],
                     "jaccard": len(a & b) / len(a | b)})
    exact = [{"id": r["id"] + "~copy", "text": r["text"], "orig": r["id"]}
             for r in rng.sample(base, 20)]
    rows = [{"id": r["id"], "text": r["text"]} for r in base] + [
        {"id": r["id"], "text": r["text"]} for r in near + exact]
    rng.shuffle(rows)
    d = tmp_path_factory.mktemp("planted")
    for k in range(3):
        write_jsonl(d / f"p{k}.jsonl", rows[k::3])
    (d / "p3-empty.jsonl").write_text("")
    return {"dir": Path(d), "base": base, "near": near, "exact": exact}
