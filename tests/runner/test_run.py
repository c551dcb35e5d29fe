"""End to end on a real LocalCluster with real text: output, stats, resume, policies."""

from __future__ import annotations

import hashlib
import json
import os
import re
import unicodedata

import pyarrow.parquet as pq
import pytest

import gpupipe as gp
from gpupipe.stages import LengthFilter, NormalizeText, Repartition
from tests.conftest import REPO


def pipeline(inp, out, stages=None, **input_kw):
    return gp.Pipeline(input={"path": str(inp), **input_kw}, output=str(out),
                       stages=stages if stages is not None else
                       [NormalizeText(), LengthFilter(min_words=30)])


def reference(records, min_words=30):
    """What the pipeline must produce, computed one document at a time in plain Python."""
    out = []
    for r in records:
        t = re.sub(r"\r\n|[\r\x0b\x0c\x85\u2028\u2029]", "\n", r["text"])
        t = re.sub(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ufeff\u200b]", "", t)
        t = unicodedata.normalize("NFC", t)
        t = re.sub(r"[\xa0\u1680\u2000-\u200a\u202f\u205f\u3000]", " ", t)
        t = "\n".join(line.rstrip(" \t") for line in t.split("\n"))
        while "\n\n\n\n" in t:
            t = t.replace("\n\n\n\n", "\n\n\n")
        t = t.strip()
        if len(t.split()) >= min_words:
            out.append((r["id"], t))
    return out


def read_rows(path):
    rows = []
    for f in sorted(os.listdir(path)):
        if f.endswith(".parquet"):
            t = pq.read_table(os.path.join(path, f))
            rows.extend(zip(t.column("id").to_pylist(), t.column("text").to_pylist()))
    return rows


def test_output_and_stats_match_a_plain_python_reference(client, tmp_path, sample_records):
    res = pipeline("data/sample/*.jsonl.gz", tmp_path / "o", id_column="id").run(
        client=client, progress=False)
    got = read_rows(res.data_path)
    expected = reference(sample_records)
    assert got == expected  # same documents, same order (file order, then line order)
    s = res.summary
    assert s["status"] == "complete" and s["read"]["docs"] == len(sample_records)
    assert s["read"]["files"] == 5 and s["input"]["partitions"] == 5
    norm, length = s["stages"]
    assert norm["docs_in"] == norm["docs_out"] == len(sample_records)
    assert length["docs_out"] == len(expected)
    assert length["drops"] == {"too_few_words": len(sample_records) - len(expected)}
    assert length["bytes_out"] == sum(len(t.encode()) for _, t in expected)
    assert s["accounting"]["balanced"]
    on_disk = json.loads((tmp_path / "o" / "run.json").read_text())
    assert on_disk["stages"] == json.loads(json.dumps(s["stages"]))
    assert on_disk["versions"]["dask"] == "2026.7.1"
    assert on_disk["pipeline"]["stages"][1] == {"stage": "length_filter", "mode": "drop",
                                                "keep_rejected": False, "min_chars": None,
                                                "max_chars": None, "min_words": 30,
                                                "max_words": None}
    assert len(os.listdir(tmp_path / "o" / "stats" / "00-length_filter")) == 5


def test_rerun_resumes_and_edit_recomputes(client, tmp_path, small_corpus):
    p = pipeline(small_corpus, tmp_path / "o")
    first = p.run(client=client, progress=False)
    assert first.summary["segments"][0]["computed"] == 3
    again = p.run(client=client, progress=False)
    assert again.summary["segments"][0] == {**first.summary["segments"][0], "computed": 0,
                                            "reused": 3,
                                            "seconds": again.summary["segments"][0]["seconds"]}
    assert again.summary["stages"] == first.summary["stages"]
    # a partition lost (crash before its marker): only that one runs again
    os.remove(tmp_path / "o" / "data" / "_done" / "part-00001")
    part = p.run(client=client, progress=False)
    assert part.summary["segments"][0]["computed"] == 1
    assert read_rows(part.data_path) == read_rows(first.data_path)
    edited = pipeline(small_corpus, tmp_path / "o",
                      [NormalizeText(), LengthFilter(min_words=200)]).run(client=client,
                                                                           progress=False)
    assert edited.summary["segments"][0]["computed"] == 3
    assert edited.summary["output"]["docs"] < first.summary["output"]["docs"]


def test_global_stage_materialises_a_checkpoint(client, tmp_path, small_corpus):
    stages = [NormalizeText(), Repartition(npartitions=2), LengthFilter(min_words=30)]
    res = pipeline(small_corpus, tmp_path / "o", stages).run(client=client, progress=False)
    segs = res.summary["segments"]
    assert [s["name"] for s in segs] == ["00-normalize_text", "01-repartition",
                                         "02-length_filter"]
    assert [s["partitions"] for s in segs] == [3, 2, 2]
    ck = tmp_path / "o" / "checkpoints"
    assert sorted(os.listdir(ck)) == ["00-normalize_text", "01-repartition", "01-repartition.work"]
    assert len([f for f in os.listdir(ck / "01-repartition") if f.endswith(".parquet")]) == 2
    flat = pipeline(small_corpus, tmp_path / "flat").run(client=client, progress=False)
    assert read_rows(res.data_path) == read_rows(flat.data_path)  # order kept
    rep = res.stage("repartition")
    assert rep["docs_in"] == rep["docs_out"] == 300 and rep["kind"] == "global"
    # resuming reuses both checkpoints
    again = pipeline(small_corpus, tmp_path / "o", stages).run(client=client, progress=False)
    assert [s["computed"] for s in again.summary["segments"]] == [0, 0, 0]


def digest(path):
    h = hashlib.sha256()
    for f in sorted(os.listdir(path)):
        if f.endswith(".parquet"):
            h.update(f.encode() + open(os.path.join(path, f), "rb").read())
    return h.hexdigest()


def test_output_is_byte_identical_with_1_or_2_workers(client, tmp_path, small_corpus):
    from distributed import Client, LocalCluster

    stages = [NormalizeText(), Repartition(npartitions=2), LengthFilter(min_words=30)]
    two = pipeline(small_corpus, tmp_path / "two", stages).run(client=client, progress=False)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as one_client:
        one = pipeline(small_corpus, tmp_path / "one", stages).run(client=one_client,
                                                                  progress=False)
    assert digest(one.data_path) == digest(two.data_path)


def test_bad_input_skip_counts_and_sets_aside(client, tmp_path, small_corpus):
    bad = small_corpus / "d.jsonl"
    bad.write_bytes(b'{"text": "fine document here"}\n{"text": broken\n\n{"text": "\xff"}\n'
                    b'{"body": "x"}\n')
    res = pipeline(small_corpus, tmp_path / "o", [LengthFilter(min_words=30)],
                   on_error="skip").run(client=client, progress=False)
    read = res.summary["read"]
    assert read["rejected"] == {"bad_utf8": 1, "malformed_json": 1, "missing_text": 1}
    assert read["blank_lines"] == 1 and read["docs"] == 301
    acc = res.summary["accounting"]
    assert acc == {"records_in": 304, "added": 0, "docs_out": res.summary["output"]["docs"],
                   "dropped": acc["dropped"], "rejected": 3, "balanced": True}
    rej = pq.read_table(tmp_path / "o" / "rejected" / "read" / "part-00003.parquet").to_pylist()
    assert [(r["line"], r["reason"]) for r in rej] == [(2, "malformed_json"), (4, "bad_utf8"),
                                                       (5, "missing_text")]
    assert all(r["file"].endswith("d.jsonl") for r in rej)


def test_bad_input_fail_stops_with_file_and_line(client, tmp_path, small_corpus):
    (small_corpus / "d.jsonl").write_text('{"text": "ok"}\n{"text": oops}\n')
    with pytest.raises(gp.InputError, match=r"d\.jsonl line 2: malformed JSON"):
        pipeline(small_corpus, tmp_path / "o").run(client=client, progress=False)
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["status"] == "failed" and "d.jsonl line 2" in run["error"]


def test_corrupt_file_is_counted(client, tmp_path, small_corpus):
    gz = (small_corpus / "b.jsonl.gz").read_bytes()
    (small_corpus / "b.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    res = pipeline(small_corpus, tmp_path / "o", [], on_error="skip").run(client=client,
                                                                          progress=False)
    assert res.summary["read"]["files_corrupt"] == 1
    assert res.summary["read"]["rejected"]["corrupt_file"] == 1
    assert 170 < res.summary["output"]["docs"] < 300


def test_stage_failure_names_stage_and_partition(client, tmp_path, small_corpus):
    from gpupipe.runner.tasks import run_stages

    class Broken(LengthFilter):
        def reason_codes(self, df):
            raise RuntimeError("boom")

    import pandas as pd

    with pytest.raises(gp.StageError, match=r"'length_filter' \(stages\[4\]\) failed on "
                                            r"partition 7 \(x\): RuntimeError: boom") as e:
        run_stages(pd.DataFrame({"id": ["a"], "text": ["b"]}), [(4, Broken())], "partition 7 (x)")
    assert isinstance(e.value.__cause__, RuntimeError)


def test_output_directory_safety(client, tmp_path, small_corpus):
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(gp.OutputError, match="not empty and holds no gpupipe run"):
        pipeline(small_corpus, other).run(client=client, progress=False)
    assert (other / "notes.txt").read_text() == "keep me"
    p = pipeline(small_corpus, tmp_path / "o")
    p.run(client=client, progress=False)
    res = p.run(client=client, progress=False, overwrite=True)
    assert res.summary["segments"][0]["computed"] == 3


def test_empty_partitions_flow_through(client, tmp_path, small_corpus):
    (small_corpus / "empty.jsonl").write_text("")
    res = pipeline(small_corpus, tmp_path / "o", [LengthFilter(min_words=10**6)]).run(
        client=client, progress=False)
    assert res.summary["output"]["docs"] == 0 and res.summary["output"]["partitions"] == 4
    assert res.to_pandas().empty


def test_large_file_blocks_give_the_same_output(client, tmp_path, sample_records):
    from tests.conftest import write_jsonl

    recs = [{"text": r["text"]} for r in sample_records[:500]]
    write_jsonl(tmp_path / "in" / "big.jsonl", recs)
    whole = pipeline(tmp_path / "in", tmp_path / "whole", blocksize=None).run(
        client=client, progress=False)
    cut = pipeline(tmp_path / "in", tmp_path / "cut", blocksize=150_000).run(
        client=client, progress=False)
    assert cut.summary["input"]["partitions"] > 3 and whole.summary["input"]["partitions"] == 1
    assert cut.summary["read"]["files"] == 1
    assert read_rows(cut.data_path) == read_rows(whole.data_path)
    assert read_rows(cut.data_path)[0][0].startswith("big.jsonl:")


def test_a_task_may_end_only_a_one_thread_worker_under_a_nanny(client):
    """`worker_may_end` in the shared cluster's workers (one thread, a nanny), not outside a
    worker nor in one without a nanny (a thread of this process); `expendable_for` is half the
    scheduler's worker-ttl on the run's own cluster, 0 on another or on the cuDF backend."""
    import dask
    from distributed import Client, LocalCluster

    from gpupipe.runner.segments import expendable_for
    from gpupipe.runner.tasks import worker_may_end

    assert client.submit(worker_may_end, pure=False).result() is True
    assert worker_may_end() is False
    with dask.config.set({"distributed.scheduler.worker-ttl": "42s"}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                         dashboard_address=":0") as cluster, Client(cluster) as threads:
        assert threads.submit(worker_may_end, pure=False).result() is False
        assert expendable_for(threads, "pandas", own_workers=True) == 21.0
        assert expendable_for(threads, "pandas", own_workers=False) == 0.0
        assert expendable_for(threads, "cudf", own_workers=True) == 0.0


def test_workers_forget_the_shipped_stages_when_the_segment_ends(client, tmp_path):
    """Each worker loads a segment's stages once and drops them when the segment ends: on a
    cluster that stays (a notebook's), nothing of an earlier run is kept."""
    import time

    from gpupipe.runner import tasks

    res = gp.Pipeline(input={"path": str(REPO / "data" / "sample" / "debian-docs.jsonl.gz")},
                      stages=[LengthFilter(min_words=20)],
                      output={"path": str(tmp_path / "o")}).run(client=client, progress=False)
    assert res.stats["output"]["docs"] > 0
    deadline = time.monotonic() + 10
    while (held := [p for ps in client.run(lambda: list(tasks._shipped)).values() for p in ps]) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held == []


def test_gather_releases_each_result_once_read(client):
    """The scheduler forgets a task once `gather` read its result: kept on a worker, it would
    be computed again (and write its files again) when that worker ends."""
    import time

    from gpupipe.runner.cluster import gather

    class Bar:
        advanced = 0

        def advance(self):
            self.advanced += 1

    futures = client.map(lambda i: {"i": i}, range(4), pure=False)
    keys = [f.key for f in futures]
    bar = Bar()
    assert sorted(r["i"] for r in gather(futures, bar, "t")) == [0, 1, 2, 3]
    assert bar.advanced == 4
    deadline = time.monotonic() + 10
    while (held := client.run_on_scheduler(
            lambda dask_scheduler, keys=keys: [k for k in keys if k in dask_scheduler.tasks])) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held == []
