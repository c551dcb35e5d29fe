"""The selection of fuzzy and semantic dedup: which documents of a graph of similar pairs stay
(`gpupipe.stages.dedup.fuzzy.keep_greedy` prepares the graph and calls `greedy`)."""

from __future__ import annotations

import numpy as np

from gpupipe.kernels.target import entry


@entry
def greedy(order, indptr, nbr, sim, fixed):
    """Nodes in ``order`` over a graph in CSR form (``indptr``, neighbours ``nbr``, edge
    similarities ``sim``): a node is kept unless it has a kept neighbour; then it goes for its
    most similar kept neighbour (ties: the one earlier in ``order``). ``fixed`` nodes stay.
    Returns (kept, the neighbour each removed node lost to or -1, that similarity)."""
    n = order.shape[0]
    rank = np.empty(n, np.int64)
    for t in range(n):
        rank[order[t]] = t
    kept = np.zeros(n, np.bool_)
    dup = np.full(n, -1, np.int64)
    best = np.zeros(n, np.float64)
    for t in range(n):
        v = order[t]
        if fixed[v]:
            kept[v] = True
            continue
        bu, bs = -1, -1.0
        for e in range(indptr[v], indptr[v + 1]):
            u = nbr[e]
            if kept[u] and (sim[e] > bs or (sim[e] == bs and rank[u] < rank[bu])):
                bu, bs = u, sim[e]
        if bu < 0:
            kept[v] = True
        else:
            dup[v] = bu
            best[v] = bs
    return kept, dup, best
