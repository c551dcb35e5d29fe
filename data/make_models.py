"""Trains data/models/quality.bin, the fastText quality classifier of the model-filtering example
(pipelines/model_filter.yaml), on the sample corpus. Deterministic: rerunning reproduces the
committed file byte for byte.

The labels distil the heuristic filters into a model, as DCLM-style classifiers are trained on
a curated "good" set against the rest: a document is ``hq`` when the English web recipe
(pipelines/english_web.yaml, with the alphabetic-word bound the quickstart notebook settles on)
keeps it, ``lq`` otherwise. Every third document is held out, and the script prints the
classifier's agreement with the heuristics on it.

    python data/make_models.py
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> int:
    import fasttext

    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    import gpupipe as gp

    pipe = gp.Pipeline.from_yaml("pipelines/english_web.yaml",
                                 overrides=["gopher_quality.min_alpha_words_ratio=0.55"])
    pv = pipe.preview(n=10**9, seed=0).sort_values("id", kind="stable").reset_index(drop=True)
    labels = ["hq" if v == "keep" else "lq" for v in pv["verdict"]]
    lines = [f"__label__{lab} {' '.join(text.split())}\n" for lab, text in zip(labels, pv["text"])]
    train = [x for k, x in enumerate(lines) if k % 3]
    held = [(lab, t) for k, (lab, t) in enumerate(zip(labels, pv["text"])) if k % 3 == 0]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(train)
        model = fasttext.train_supervised(path, epoch=25, lr=0.5, dim=16, wordNgrams=2,
                                          bucket=1 << 13, minCount=5, seed=1, thread=1,
                                          verbose=0)
    out = os.path.join(HERE, "models", "quality.bin")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    model.save_model(out)
    predicted = model.predict([" ".join(t.split()) for _, t in held], k=1)[0]
    agree = sum(p[0] == f"__label__{lab}" for p, (lab, _) in zip(predicted, held))
    print(f"{out}: {os.path.getsize(out):,} bytes; {labels.count('hq')} hq / "
          f"{labels.count('lq')} lq documents; held-out agreement with the heuristics "
          f"{agree}/{len(held)} ({agree / len(held):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
