"""What several benchmark scripts share: the sample corpus's texts and a best-of timer."""

from __future__ import annotations

import glob
import gzip
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sample_texts(scale: int = 1) -> list[str]:
    """Every text of data/sample/, in file order, repeated ``scale`` times."""
    texts = [json.loads(line)["text"]
             for f in sorted(glob.glob(str(REPO / "data/sample/*.jsonl.gz")))
             for line in gzip.open(f, "rt", encoding="utf-8")]
    return texts * scale


def best_of(fn, repeat: int = 3, warm: bool = False) -> float:
    """The shortest of ``repeat`` timed calls of ``fn`` (after one untimed call when ``warm``:
    compilation, allocation)."""
    if warm:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
