"""Blending named sources at chosen token shares (``mixture:``), from the routed documents.

``materialize``: per split, every source's target is ``share x total`` tokens. A source with
fewer tokens is repeated: every document ``floor(target / tokens)`` times, plus once more for
the documents with the smallest draws (a hash of (id, seed)) until the rest of the target is
met; one with more is cut down the same way. The draw decides, so the choice does not depend on
partitioning or workers, and the tokens of a source are within one document of its target.
The total is ``total_tokens`` for the train split (other splits in proportion to their size),
or the largest total that needs no source repeated.

``weights``: nothing is drawn; each source gets shards of its own, and Megatron's blend weights
(``data_args.txt``) are set so that sampling gives the requested token shares.
"""

from __future__ import annotations

import math
import os

import numpy as np

from gpupipe.errors import GpupipeError
from gpupipe.shards.routing import SPLIT_ORDER


class MixtureError(GpupipeError):
    """The requested mixture cannot be made from the documents at hand."""


def load_docs(route_dir: str, partitions: int) -> np.ndarray:
    parts = [np.load(os.path.join(route_dir, f"part-{p:05d}.docs.npy"))
             for p in range(partitions)]
    return np.concatenate(parts) if parts else np.zeros(0)


def source_tokens(docs: np.ndarray, n_sources: int) -> dict[str, np.ndarray]:
    """Tokens per source in every split."""
    out = {}
    for k, split in enumerate(SPLIT_ORDER):
        sel = docs[docs["split"] == k]
        out[split] = np.bincount(sel["source"], weights=sel["length"],
                                 minlength=n_sources).astype(np.int64)
    return out


def plan_materialize(docs: np.ndarray, sources: tuple[str, ...], shares: dict[str, float],
                     total_tokens: int | None) -> tuple[dict, dict]:
    """(plan for `gpupipe.shards.writer.doc_copies`, report per split and source)."""
    n = len(sources)
    w = np.array([shares[s] for s in sources], dtype=np.float64)
    have = source_tokens(docs, n)
    base = [[0] * n for _ in SPLIT_ORDER]
    threshold = [[0.0] * n for _ in SPLIT_ORDER]
    report: dict = {}
    train_total = int(have["train"].sum())
    for k, split in enumerate(SPLIT_ORDER):
        t = have[split]
        if t.sum() == 0:
            continue
        missing = [sources[j] for j in range(n) if t[j] == 0]
        if missing:
            raise MixtureError(f"mixture: source {', '.join(missing)} has no tokens in the "
                               f"{split} split, so its share cannot be met; check its input "
                               f"and stages (run.json 'sources'), or its weight")
        if total_tokens is None:
            total = float(np.min(t / w))
        elif split == "train" or train_total == 0:
            total = float(total_tokens)
        else:
            total = total_tokens * t.sum() / train_total
        report[split] = {}
        for j in range(n):
            target = w[j] * total
            whole = math.floor(target / t[j])
            rest = target - whole * t[j]
            sel = docs[(docs["split"] == k) & (docs["source"] == j)]
            order = np.lexsort((sel["key"], sel["draw"]))
            cum = np.concatenate([[0], np.cumsum(sel["length"][order])])
            cut = int(np.argmin(np.abs(cum - rest)))
            thr = float(sel["draw"][order[cut]]) if cut < len(sel) else 2.0
            base[k][j], threshold[k][j] = whole, thr
            extra = sel["draw"] < thr
            copies = whole + extra
            report[split][sources[j]] = {
                "documents": int(copies.sum()),
                "tokens": int((copies * sel["length"]).sum()),
                "repeats": int(np.maximum(copies - 1, 0).sum()),
                "available_tokens": int(t[j]),
                "requested_share": round(float(w[j]), 6),
            }
        got = sum(r["tokens"] for r in report[split].values())
        for r in report[split].values():
            r["achieved_share"] = round(r["tokens"] / got, 6) if got else 0.0
    return {"sources": list(sources), "base": base, "threshold": threshold}, report


def weights_report(shards: list[dict], sources: tuple[str, ...],
                   shares: dict[str, float]) -> tuple[dict, dict]:
    """(Megatron blend weight of every shard prefix, report per split and source): a shard's
    weight is its source's share times its part of that source's tokens in the split, so the
    weights of a source sum to its share."""
    per = {}
    for s in shards:
        d = per.setdefault(s["split"], {}).setdefault(s["source"], {"documents": 0, "tokens": 0})
        d["documents"] += s["documents"]
        d["tokens"] += s["tokens"]
    weight = {}
    for s in shards:
        total = per[s["split"]][s["source"]]["tokens"]
        weight[s["prefix"]] = shares[s["source"]] * s["tokens"] / total
    report = {}
    for split, by in per.items():
        missing = [x for x in sources if x not in by]
        if missing and split == "train":
            raise MixtureError(f"mixture: source {', '.join(missing)} has no tokens in the "
                               f"train split")
        report[split] = {src: {**d, "repeats": 0, "requested_share": round(shares[src], 6),
                               "blend_weight": round(sum(weight[s["prefix"]] for s in shards
                                                         if s["split"] == split
                                                         and s["source"] == src), 6)}
                         for src, d in sorted(by.items())}
    return weight, report
