"""The shards phase of a run that ends with a sink stage (tokenize): route every partition,
write one task per shard, then the manifest (`gpupipe.shards`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time

from gpupipe.runner.cluster import gather
from gpupipe.runner.tasks import part_name

log = logging.getLogger(__name__)


def run_shards(client, pipeline, out, fingerprint, partitions, bar, vers) -> dict:
    """Route the tokenized partitions and write the shards (skipped when already complete)."""
    import hashlib

    from gpupipe.shards import writer
    from gpupipe.shards.megatron import token_dtype
    from gpupipe.shards.routing import SPLIT_ORDER, shards_per_split

    spec = pipeline.output.shards
    spec_dict = spec.model_dump(mode="json")
    if spec_dict.get("compression") is None:   # shards written before it existed stay current
        spec_dict.pop("compression", None)
    tok_stage = pipeline.sink_stage()
    info = tok_stage.info()
    mix = pipeline.mixture
    mix_dict = mix.model_dump(mode="json") if mix is not None else None
    fp = hashlib.sha256(json.dumps([fingerprint, spec_dict, mix_dict],
                                   sort_keys=True).encode()).hexdigest()
    shards_dir = os.path.join(out, "shards")
    t0 = time.perf_counter()
    try:
        manifest = writer.read_manifest(shards_dir)
    except (OSError, ValueError):
        manifest = None
    if manifest is not None and manifest.get("fingerprint") == fp[:16]:
        log.info("shards: %s is complete for this pipeline; nothing to write", shards_dir)
        return _shard_summary(shards_dir, manifest, computed=False, seconds=0.0)
    writer.clean(shards_dir)
    route_dir = os.path.join(shards_dir, "_route")
    dtype = token_dtype(info.vocab_size).name
    data = os.path.join(out, "data")
    files = [os.path.join(data, part_name(i) + ".parquet") for i in range(partitions)]
    bar.start("[shards] route", partitions)
    futures = client.map(writer.route_partition, list(range(partitions)), files,
                         route_dir=route_dir, seed=spec.seed, fractions=dict(spec.splits),
                         dtype=dtype, vocab_size=info.vocab_size, pure=False,
                         sources=tuple(pipeline.inputs) if mix is not None else (),
                         mix_seed=mix.seed if mix is not None else 0, text=spec.text,
                         key=[f"gpupipe-route-{fp[:16]}-{i}" for i in range(partitions)])
    routes = gather(futures, bar, "shards/route")
    tokens = {s: sum(r["tokens"][s] for r in routes) for s in SPLIT_ORDER}
    plan_, mixture = None, None
    if mix is not None:
        from gpupipe.shards import mixture as mixing

        names = tuple(pipeline.inputs)
        docs = mixing.load_docs(route_dir, partitions)
        if mix.mode == "materialize":
            plan_, report = mixing.plan_materialize(docs, names, mix.shares(), mix.total_tokens)
            tokens = {s: sum(r["tokens"] for r in report.get(s, {}).values())
                      for s in SPLIT_ORDER}
            mixture = {**mix_dict, "shares": mix.shares(), "splits": report}
    if mix is not None and mix.mode == "weights":
        have = mixing.source_tokens(docs, len(names))
        tasks = [(s, j, n, (k, name)) for s in SPLIT_ORDER
                 for k, name in enumerate(names)
                 for n in [shards_per_split(spec, {s: int(have[s][k])})[s]]
                 for j in range(n)]
    else:
        counts = shards_per_split(spec, tokens)
        tasks = [(s, j, counts[s], None) for s in SPLIT_ORDER for j in range(counts[s])]
    bar.start("[shards] write", len(tasks))
    futures = client.map(writer.write_shard, [t[0] for t in tasks], [t[1] for t in tasks],
                         [t[2] for t in tasks], [t[3] for t in tasks],
                         route_dir=route_dir, partitions=partitions, plan=plan_,
                         shards_dir=shards_dir, spec=spec_dict, eod_id=info.eod_id,
                         tokenizer_name=os.path.basename(info.path), pure=False,
                         key=[f"gpupipe-shard-{fp[:16]}-{s}-{'' if t is None else t[1]}-{j}"
                              for s, j, _, t in tasks])
    written = [r for r in gather(futures, bar, "shards/write") if r is not None]
    if not written:
        log.warning("shards: no document reached the shards; the manifest lists none")
    weights = None
    if mix is not None and mix.mode == "weights":
        weights, report = mixing.weights_report(written, names, mix.shares())
        mixture = {**mix_dict, "shares": mix.shares(), "splits": report}
    manifest = writer.write_manifest(shards_dir, shards=written, spec=spec_dict, tokenizer=info,
                                     dtype=dtype, version=vers["gpupipe"], fingerprint=fp[:16],
                                     append_eod=tok_stage.append_eod, mixture=mixture,
                                     weights=weights)
    shutil.rmtree(route_dir, ignore_errors=True)
    return _shard_summary(shards_dir, manifest, computed=True,
                          seconds=round(time.perf_counter() - t0, 3))


def _shard_summary(shards_dir, manifest, *, computed: bool, seconds: float) -> dict:
    return {"directory": shards_dir, "format": manifest["format"], "dtype": manifest["dtype"],
            "shards": len(manifest["shards"]), "totals": manifest["totals"],
            "computed": computed, "seconds": seconds,
            "data_args": os.path.join(shards_dir, "data_args.txt")}
