#!/usr/bin/env python
"""Object storage and MDS shards. Prints JSON.

    python benchmarks/bench_storage.py [--files 8] [--scale 4]

* ``s3_read``: the same Parquet files (data/sample/ repeated ``--scale`` times, ``--files``
  files) read by gpupipe's Parquet reader from the local disk and from a local S3-compatible
  server process (moto_server from .venv-moto, through s3fs over HTTP, as tests/io/test_s3.py
  runs it): MB/s
  of file and the ratio. The server runs on this machine, so the figure is the cost of the S3
  protocol and client, not of a network.
* ``s3_write``: a run (normalize_text + length_filter over those files) with its run
  directory on local disk, then on the S3 server (`output.path: s3://…`, uploaded from a
  staging directory in commit order), on one shared local cluster: seconds and the ratio. And
  the upload alone (`RunMirror.push` of the finished run directory into an empty prefix)
  against s3fs ``put_file`` of the same files in a loop, the unavoidable work: MB/s and ratio.
* ``mds_write``: the tokens of the same documents written as one shard in each format
  (`gpupipe.shards.formats`): MB/s of shard, MDS against Megatron's ``.bin/.idx``, and the
  read-back check (every sequence of the MDS shard, read by gpupipe's reader, equals the
  Megatron one).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_common import best_of, sample_texts  # noqa: E402  (next to this script)


def parquet_files(d: Path, texts: list[str], n: int) -> list[Path]:
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(n):
        part = texts[k::n]
        p = d / f"part-{k:03d}.parquet"
        pq.write_table(pa.table({"id": [f"{k}-{i}" for i in range(len(part))], "text": part}), p)
        out.append(p)
    return out


def read_all(path: str, storage_options: dict | None = None) -> int:
    from gpupipe.runner.sources import make_source
    from gpupipe.spec import InputSpec

    src = make_source(InputSpec(path=path, id_column="id", storage_options=storage_options or {}))
    return sum(src.read(i).stats["docs"] for i in range(src.npartitions))


def s3_write(server, tmp: Path, repeat: int) -> dict:
    import time

    from distributed import Client, LocalCluster

    import gpupipe as gp
    from gpupipe.io.mirror import RunMirror
    from gpupipe.stages import LengthFilter, NormalizeText

    def run(out: str, **output) -> float:
        pipe = gp.Pipeline(input={"path": str(tmp / "pq"), "id_column": "id"},
                           stages=[NormalizeText(), LengthFilter(min_words=20)],
                           output={"path": out, "overwrite": True, **output})
        t0 = time.perf_counter()
        pipe.run(client=client, progress=False)
        return time.perf_counter() - t0

    options = server.options()
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        run(str(tmp / "warm"))   # kernels compiled once, outside the timings
        local = best_of(lambda: run(str(tmp / "run")), repeat)
        remote = best_of(lambda: run("s3://bench/run", storage_options=options,
                                     staging=str(tmp / "staging")), repeat)
    files = [p for p in (tmp / "run").rglob("*") if p.is_file()]
    mb = sum(p.stat().st_size for p in files) / 1e6
    fs = server.fs()
    n = [0]

    def put_loop():
        n[0] += 1
        for p in files:
            fs.put_file(str(p), f"bench/put-{n[0]}/{p.relative_to(tmp / 'run')}")

    def push():
        n[0] += 1
        RunMirror(f"s3://bench/push-{n[0]}", str(tmp / f"push-{n[0]}"), options, 0).pull()
        mirror = RunMirror(f"s3://bench/push-{n[0]}", str(tmp / "run"), options, 0)
        (tmp / "run" / ".gpupipe-mirror.json").unlink(missing_ok=True)
        mirror.push()

    t_put, t_push = best_of(put_loop, repeat), best_of(push, repeat)
    return {"run_seconds": {"local": round(local, 2), "s3": round(remote, 2)},
            "run_s3_vs_local": round(remote / local, 2),
            "upload": {"files": len(files), "mb": round(mb, 2),
                       "push_mb_per_s": round(mb / t_push, 1),
                       "put_file_mb_per_s": round(mb / t_put, 1),
                       "push_vs_put_file": round(t_put / t_push, 2)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--scale", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    texts = sample_texts(args.scale)
    report: dict = {"docs": len(texts), "text_mb": round(sum(map(len, texts)) / 1e6, 2)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = parquet_files(tmp / "pq", texts, args.files)
        mb = sum(p.stat().st_size for p in files) / 1e6
        from tests.io.s3_server import S3Server

        server = S3Server(tmp)
        try:
            fs = server.fs()
            fs.mkdir("bench")
            for p in files:
                fs.put_file(str(p), f"bench/pq/{p.name}")
            docs_local = read_all(str(tmp / "pq"))
            docs_s3 = read_all("s3://bench/pq/", server.options())
            t_local = best_of(lambda: read_all(str(tmp / "pq")), args.repeat)
            t_s3 = best_of(lambda: read_all("s3://bench/pq/", server.options()), args.repeat)
            report["s3_write"] = s3_write(server, tmp, args.repeat)
        finally:
            server.stop()
        report["s3_read"] = {"files": len(files), "file_mb": round(mb, 2),
                             "docs": [docs_local, docs_s3],
                             "local_mb_per_s": round(mb / t_local, 1),
                             "s3_mb_per_s": round(mb / t_s3, 1),
                             "s3_vs_local": round(t_local / t_s3, 2)}

        from gpupipe.io.tokenizer import describe_tokenizer, load_tokenizer
        from gpupipe.shards import formats

        path = str(REPO / "data" / "tokenizer.json")
        eod = describe_tokenizer(path).eod_id
        ids = [np.append(np.asarray(e.ids, np.uint16), np.uint16(eod))
               for e in load_tokenizer(path).encode_batch(texts)]
        tokens = np.concatenate(ids)
        lengths = np.array([len(x) for x in ids], np.int64)
        out = {}
        for name in ("megatron", "mds"):
            fmt = formats.get(name)
            prefix = str(tmp / name / "train-00000")
            (tmp / name).mkdir()
            seconds = best_of(lambda fmt=fmt, prefix=prefix: fmt.write(
                prefix, tokens, lengths, tokenizer_name="t"), args.repeat)
            size = sum(f.stat().st_size for f in (tmp / name).iterdir())
            out[name] = {"seconds": round(seconds, 4), "shard_mb": round(size / 1e6, 2),
                         "mb_per_s": round(size / 1e6 / seconds, 1)}
        mds = formats.get("mds").open(str(tmp / "mds" / "train-00000"))
        meg = formats.get("megatron").open(str(tmp / "megatron" / "train-00000"))
        same = sum(np.array_equal(mds[k], meg[k]) for k in range(len(meg)))
        out["mds_vs_megatron"] = round(out["megatron"]["seconds"] / out["mds"]["seconds"], 2)
        out["read_back"] = {"sequences": len(meg), "equal": int(same)}
        report["mds_write"] = out
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
