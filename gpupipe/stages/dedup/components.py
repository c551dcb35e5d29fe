"""Connected components of the candidate graph on the Dask cluster.

Min-label propagation with hooking and pointer jumping, as Dask DataFrame merges and group-bys:
every node starts with the smallest id among itself and its neighbours; each round a node takes
the smallest label of its neighbours, and that label is also offered to the node its current
label names (hooking, so a whole region moves at once), then nodes take the label of their label
(pointer jumping); rounds stop when no label changes. The
fixed point labels every node with the smallest node id of its component (that node's label can
never change, and labels agree across every edge). No machine ever holds the whole graph: the
edges and labels stay partitioned across the workers and only the count of changed labels comes
back to the client each round. LSH candidate graphs are mostly stars, so a few rounds suffice.

Used by `fuzzy_dedup` when the candidate graph is large (``components: dask``, or ``auto`` above
``LOCAL_EDGE_LIMIT`` edges); smaller graphs go through scipy on the client, which gives the same
components.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: above this many candidate edges ``components: auto`` uses the Dask algorithm
LOCAL_EDGE_LIMIT = 20_000_000
MAX_ROUNDS = 100
JUMPS = 2  # pointer jumps per round


def _min_label(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(label=np.minimum(df["label"].to_numpy(), df["cand"].to_numpy()))[
        ["node", "label"]]


def _persisted(frame):
    """``frame.persist()``, returned once its graph is built and computed. Python 3.11's
    ``functools.cached_property`` holds one lock per property across all instances: building
    the next expression here while the scheduler thread still materialises the previous graph
    (which shares sub-expressions) deadlocked, seen in bench_dedup (Python 3.12 has no lock)."""
    from distributed import wait

    frame = frame.persist()
    wait(frame)
    return frame


def dask_components(edges, client, npartitions: int | None = None) -> tuple[object, int]:
    """(Dask DataFrame ``node, label`` with label = smallest node id of the component, rounds).

    ``edges``: Dask DataFrame with int64 columns ``a`` and ``b`` (undirected; duplicates and
    self-loops are harmless).
    """
    import dask.dataframe as dd

    nparts = npartitions or max(1, edges.npartitions)
    both = dd.concat([edges.rename(columns={"a": "u", "b": "v"})[["u", "v"]],
                      edges.rename(columns={"b": "u", "a": "v"})[["u", "v"]]])
    both = _persisted(both.shuffle(on="u", npartitions=nparts))
    first = both.groupby("u")["v"].min().reset_index()
    labels = first.rename(columns={"u": "node", "v": "cand"}).assign(
        label=lambda d: d["node"]).map_partitions(
        _min_label, meta=pd.DataFrame({"node": np.zeros(0, np.int64),
                                       "label": np.zeros(0, np.int64)}))
    labels = _persisted(labels.shuffle(on="node", npartitions=nparts))
    meta = labels._meta
    for rounds in range(1, MAX_ROUNDS + 1):
        # the smallest label among the neighbours
        seen = both.merge(labels.rename(columns={"node": "v", "label": "lv"}), on="v")
        cand = seen.groupby("u")["lv"].min().reset_index().rename(
            columns={"u": "node", "lv": "cand"})
        step = labels.merge(cand, on="node", how="left")
        step = step.assign(cand=step["cand"].fillna(step["label"]).astype("int64"))
        # hooking: a node's smaller candidate also goes to the root its label names, so a whole
        # region labelled l moves to the smaller label at once (through the jumps below)
        hooks = dd.concat([step[["node", "cand"]],
                           step[["label", "cand"]].rename(columns={"label": "node"})])
        best = hooks.groupby("node")["cand"].min().reset_index()
        step = labels.merge(best, on="node", how="left")
        step = step.assign(cand=step["cand"].fillna(step["label"]).astype("int64"))
        step = step.map_partitions(_min_label, meta=meta)
        # pointer jumping: the label of the label (never larger); each jump halves the
        # distance to the root of a chain of labels
        new = _persisted(step)
        for _ in range(JUMPS):
            jump = new.merge(new.rename(columns={"node": "label", "label": "cand"}),
                             on="label", how="left")
            jump = jump.assign(cand=jump["cand"].fillna(jump["label"]).astype("int64"))
            new = jump.map_partitions(_min_label, meta=meta)
            new = _persisted(new.shuffle(on="node", npartitions=nparts))
        diff = new.merge(labels.rename(columns={"label": "old"}), on="node")
        changed = int(client.compute((diff["label"] != diff["old"]).sum()).result())
        labels = new
        if changed == 0:
            return labels, rounds
    raise RuntimeError(f"connected components did not converge in {MAX_ROUNDS} rounds")
