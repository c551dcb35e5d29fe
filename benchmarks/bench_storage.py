#!/usr/bin/env python
"""Object storage and MDS shards. Prints JSON.

    python benchmarks/bench_storage.py [--files 8] [--scale 4]

* ``s3_read``: the same Parquet files (data/sample/ repeated ``--scale`` times, ``--files``
  files) read by gpupipe's Parquet reader from the local disk and from a local S3-compatible
  server process (moto_server from .venv-moto, through s3fs over HTTP, as tests/io/test_s3.py
  runs it): MB/s
  of file and the ratio. The server runs on this machine, so the figure is the cost of the S3
  protocol and client, not of a network.
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
