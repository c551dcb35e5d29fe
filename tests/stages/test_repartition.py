"""repartition runs as steps (sizes, plan on the client, write); its partitions are the ones
dask's own ``DataFrame.repartition`` draws, checked against dask on random partitionings."""

from __future__ import annotations

import random

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.stages.layout.repartition import plan_pieces


def _parts(rng, n):
    parts, start = [], 0
    for _ in range(n):
        r = rng.randint(0, 40)
        parts.append(pd.DataFrame({"v": np.arange(start, start + r),
                                   "t": ["x" * rng.randint(1, 300) for _ in range(r)]}))
        start += r
    return parts


@pytest.mark.parametrize("mode", ["npartitions", "partition_size"])
def test_the_pieces_are_dasks_partitions(mode):
    rng = random.Random(7)
    for _ in range(20):
        parts = _parts(rng, rng.randint(1, 7))
        rows = [len(p) for p in parts]
        ddf = dd.from_map(lambda i, parts=parts: parts[i], list(range(len(parts))),
                          meta=parts[0].iloc[:0],
                          enforce_metadata=False)
        if mode == "npartitions":
            k = rng.randint(1, 12)
            want = ddf.repartition(npartitions=k)
            plan = plan_pieces(rows, [0] * len(parts), npartitions=k)
        else:
            mem = [int(p.memory_usage(deep=True, index=True).sum()) for p in parts]
            size = rng.randint(max(200, min(mem) // 2), 2 * max(mem) + 300)
            want = ddf.repartition(partition_size=size)
            plan = plan_pieces(rows, mem, partition_size=size)
        got = [[v for j, a, b in pieces for v in parts[j]["v"].iloc[a:b]] for pieces in plan]
        assert got == [d.compute()["v"].tolist() for d in want.to_delayed()]


def test_partition_size_in_a_run_keeps_every_row_in_order(client, tmp_path, small_corpus):
    def run(stages, out):
        return gp.Pipeline(input=str(small_corpus), output=str(tmp_path / out),
                           stages=stages).run(client=client, progress=False)

    flat = run([], "flat")
    res = run([gp.stages.Repartition(partition_size="150KB")], "sized")
    st = res.stage("repartition")
    assert [s["step"] for s in st["steps"]] == ["sizes", "plan", "write"]
    assert st["counters"]["partitions_out"] == res.summary["output"]["partitions"] > 3
    assert res.to_pandas()["id"].tolist() == flat.to_pandas()["id"].tolist()
    assert st["docs_in"] == st["docs_out"] == 300
