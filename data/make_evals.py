#!/usr/bin/env python
"""Build the small evaluation sets in ``data/evals/`` that the decontamination example uses.

``python_quiz.jsonl``: 24 reading-comprehension items whose ``passage`` is a 40-word window of
a Python-documentation section of ``data/sample/`` (PSF License, as that corpus), so a run on
the sample corpus finds them; the sections and windows are drawn with a fixed seed, and the
output is byte-identical on every run. ``general.txt`` (one question per line) is written by
hand for gpupipe and matches nothing in the corpus.

    python data/make_evals.py
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    docs = [json.loads(line) for f in sorted((HERE / "sample").glob("python-docs-*.jsonl.gz"))
            for line in gzip.open(f, "rt", encoding="utf-8")]
    docs = [d for d in docs if len(d["text"].split()) >= 120]
    rng = random.Random(2026)
    items = []
    for d in rng.sample(docs, 24):
        w = d["text"].split()
        a = rng.randrange(20, len(w) - 60)
        items.append({"id": f"quiz-{len(items):02d}", "passage": " ".join(w[a:a + 40]),
                      "question": "What does the passage above describe?", "source": d["id"]})
    out = HERE / "evals" / "python_quiz.jsonl"
    out.parent.mkdir(exist_ok=True)
    out.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items),
                   encoding="utf-8")
    print(f"wrote {out} ({len(items)} items)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
