"""Writing training shards from the tokenized partitions, as a two-phase shuffle on Dask.

1. route (one task per partition): compute each document's key, split and length; save the
   partition's tokens (shard dtype) and a small document table under ``shards/_route/``.
2. write (one task per shard): gather the shard's documents from every partition's table,
   order them by key, write the files of its format (`gpupipe.shards.formats`: Megatron's
   ``.bin`` then ``.idx``, or datatrove's ``.ds`` files).

Then ``manifest.json`` is written last, as the commit marker, after what the format writes
beside it (Megatron's ``data_args.txt`` and ``per_split_data_args.json``).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from gpupipe.faults import failpoint
from gpupipe.io.writer import write_json, write_npy
from gpupipe.shards import formats
from gpupipe.shards.routing import SPLIT_ORDER, assign_splits, doc_keys, ranges

DOC_DTYPE = np.dtype([("split", "u1"), ("key", "<u8"), ("length", "<i8"), ("offset", "<i8"),
                      ("source", "u1"), ("draw", "<f8")])
#: salt of the mixture's draw, so that it is independent of the split drawn with the same seed
_MIX_SALT = 0x6D6978747572  # "mixtur"


def route_partition(p: int, data_file: str, *, route_dir: str, seed: int, fractions: dict,
                    dtype: str, vocab_size: int, sources: tuple[str, ...] = (),
                    mix_seed: int = 0, text: bool = False) -> dict:
    """Route one tokenized partition. With named ``sources`` every document also gets its
    source's number and the mixture's draw, a uniform number from (id, ``mix_seed``). With
    ``text``, the documents' texts are saved too, in partition order (a format that stores
    them: ``output.shards.text``)."""
    table = pq.read_table(data_file, columns=["id", "tokens"] + (["source"] if sources else [])
                          + (["text"] if text else []))
    if text:
        _write_texts(table.column("text"), os.path.join(route_dir, f"part-{p:05d}.text.arrow"))
    ids = table.column("id").to_pylist()
    col = table.column("tokens").combine_chunks()
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
    if flat.size and (int(flat.max()) >= vocab_size or int(flat.min()) < 0):
        raise ValueError(f"{data_file}: token id outside the vocabulary (size {vocab_size})")
    flat = flat.astype(np.dtype(dtype))
    keys = doc_keys(ids, seed)
    offsets = np.zeros(len(ids), dtype=np.int64)
    if len(ids):
        np.cumsum(lengths[:-1], out=offsets[1:])
    docs = np.empty(len(ids), dtype=DOC_DTYPE)
    docs["split"] = assign_splits(keys, fractions)
    docs["key"], docs["length"], docs["offset"] = keys, lengths, offsets
    docs["source"], docs["draw"] = 0, 0.0
    if sources:
        names = table.column("source").to_pylist()
        index = {n: k for k, n in enumerate(sources)}
        docs["source"] = [index[n] for n in names]
        mix = doc_keys(ids, (mix_seed ^ _MIX_SALT) % 2**64)
        docs["draw"] = (mix >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
    write_npy(flat, os.path.join(route_dir, f"part-{p:05d}.tokens.npy"))
    write_npy(docs, os.path.join(route_dir, f"part-{p:05d}.docs.npy"))
    tokens_per_split = {s: int(lengths[docs["split"] == k].sum()) for k, s in
                        enumerate(SPLIT_ORDER)}
    docs_per_split = {s: int((docs["split"] == k).sum()) for k, s in enumerate(SPLIT_ORDER)}
    failpoint(f"shard-route/{p}")
    return {"partition": p, "tokens": tokens_per_split, "docs": docs_per_split}


def _write_texts(column, path: str) -> None:
    from gpupipe.io.writer import atomic_path

    table = pa.table({"text": column.cast(pa.large_string())})
    with atomic_path(path) as tmp, pa.OSFile(tmp, "wb") as f, \
            pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)


def gather_texts(route_dir: str, where: np.ndarray) -> list[str]:
    """The texts of the documents at ``where`` (rows of (partition, row)), in that order."""
    out: list = [None] * len(where)
    for p in np.unique(where[:, 0]).tolist():
        at = np.flatnonzero(where[:, 0] == p)
        with pa.memory_map(os.path.join(route_dir, f"part-{p:05d}.text.arrow")) as src:
            column = pa.ipc.open_file(src).read_all().column("text")
            for i, value in zip(at.tolist(), column.take(pa.array(where[at, 1])).to_pylist()):
                out[i] = value
    return out


def copy_keys(docs: np.ndarray, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every copy of the documents (``copies`` each): (row of its document, shuffle key). Copy
    0 keeps the document's key; repeat ``r`` gets ``fmix64(key + r * golden)``, a key of its own,
    so repeats land in other shards and places."""
    rows = np.repeat(np.arange(len(docs)), copies)
    start = np.cumsum(copies) - copies
    rep = (np.arange(len(rows)) - np.repeat(start, copies)).astype(np.uint64)
    keys = docs["key"][rows]
    with np.errstate(over="ignore"):
        k = keys + rep * np.uint64(0x9E3779B97F4A7C15)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xFF51AFD7ED558CCD)
        k ^= k >> np.uint64(33)
        k *= np.uint64(0xC4CEB9FE1A85EC53)
        k ^= k >> np.uint64(33)
    return rows, np.where(rep == 0, keys, k)


def doc_copies(docs: np.ndarray, plan: dict | None, split: int) -> np.ndarray:
    """Copies of each document in the output: 1 without a mixture; else its source's base
    count, plus one when its draw is below the source's threshold."""
    if plan is None:
        return np.ones(len(docs), dtype=np.int64)
    base = np.asarray(plan["base"][split], dtype=np.int64)[docs["source"]]
    thr = np.asarray(plan["threshold"][split], dtype=np.float64)[docs["source"]]
    return base + (docs["draw"] < thr)


def gather_shard(split: str, shard: int, n_shards: int, *, route_dir: str, partitions: int,
                 plan: dict | None = None, source: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tokens, lengths, source numbers and (partition, row) of one shard's documents, in
    ascending key order (``plan``: the mixture's copies per source; ``source``: that source's
    documents only).

    Equal keys (the same id twice, or a 64-bit collision) are ordered by a hash of their tokens,
    so the result never depends on which partition a document came from.
    """
    k = SPLIT_ORDER.index(split)
    parts_docs, parts_tokens, parts_where = [], [], []
    for p in range(partitions):
        docs = np.load(os.path.join(route_dir, f"part-{p:05d}.docs.npy"))
        at = np.flatnonzero(docs["split"] == k)
        if source is not None:
            at = at[docs["source"][at] == source]
        docs = docs[at]
        rows, keys = copy_keys(docs, doc_copies(docs, plan, k))
        docs, at = docs[rows], at[rows]
        docs["key"] = keys
        mine = docs["key"] % np.uint64(n_shards) == np.uint64(shard)
        sel = docs[mine]
        if len(sel) == 0:
            continue
        tokens = np.load(os.path.join(route_dir, f"part-{p:05d}.tokens.npy"), mmap_mode="r")
        parts_tokens.append(np.asarray(tokens[ranges(sel["offset"], sel["length"])]))
        parts_docs.append(sel)
        parts_where.append(np.stack([np.full(len(sel), p, np.int64), at[mine]], axis=1))
    if not parts_docs:
        return (np.zeros(0, np.uint16), np.zeros(0, np.int64), np.zeros(0, np.uint8),
                np.zeros((0, 2), np.int64))
    docs = np.concatenate(parts_docs)
    tokens = np.concatenate(parts_tokens)
    local = np.zeros(len(docs), dtype=np.int64)
    np.cumsum(docs["length"][:-1], out=local[1:])
    order = np.argsort(docs["key"], kind="stable")
    if np.any(np.diff(docs["key"][order]) == 0):
        raw = tokens.view(np.uint8)
        size = tokens.dtype.itemsize
        tiebreak = np.fromiter(
            (xxhash.xxh64_intdigest(raw[o * size:(o + n) * size].tobytes())
             for o, n in zip(local.tolist(), docs["length"].tolist())), dtype=np.uint64,
            count=len(docs))
        order = np.lexsort((tiebreak, docs["key"]))
    return (tokens[ranges(local[order], docs["length"][order])], docs["length"][order],
            docs["source"][order], np.concatenate(parts_where)[order])


def pack_bfd(tokens: np.ndarray, lengths: np.ndarray, seq_length: int, eod_id: int):
    """Best-fit-decreasing packing into sequences of exactly ``seq_length`` tokens.

    Documents longer than ``seq_length`` are cut into pieces first; free space is filled with
    EOD (use Megatron's ``--eod-mask-loss``). Deterministic: ties keep the input order.
    """
    starts = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths):
        np.cumsum(lengths[:-1], out=starts[1:])
    piece_start, piece_len = [], []
    for s, n in zip(starts.tolist(), lengths.tolist()):
        for off in range(0, n, seq_length):
            piece_start.append(s + off)
            piece_len.append(min(seq_length, n - off))
    piece_start = np.asarray(piece_start, dtype=np.int64)
    piece_len = np.asarray(piece_len, dtype=np.int64)
    order = np.lexsort((np.arange(len(piece_len)), -piece_len))
    # capacity-indexed stacks of open bins: best fit = smallest remaining capacity >= length
    by_room: list[list[int]] = [[] for _ in range(seq_length + 1)]
    bins: list[list[int]] = []
    for i in order.tolist():
        n = int(piece_len[i])
        room = next((r for r in range(n, seq_length + 1) if by_room[r]), None)
        if room is None:
            bins.append([i])
            b, room = len(bins) - 1, seq_length
        else:
            b = by_room[room].pop()
            bins[b].append(i)
        by_room[room - n].append(b)
    out = np.full(len(bins) * seq_length, eod_id, dtype=tokens.dtype)
    for b, members in enumerate(bins):
        pos = b * seq_length
        for i in members:
            n = int(piece_len[i])
            out[pos:pos + n] = tokens[piece_start[i]:piece_start[i] + n]
            pos += n
    return out, np.full(len(bins), seq_length, dtype=np.int64)


def write_shard(split: str, shard: int, n_shards: int, source: tuple[int, str] | None = None,
                *, route_dir: str, partitions: int, shards_dir: str, spec: dict, eod_id: int,
                tokenizer_name: str, plan: dict | None = None) -> dict | None:
    """Write one shard (``source``: (number, name) of the source whose own shards these are,
    for a mixture in ``weights`` mode)."""
    tokens, lengths, srcs, where = gather_shard(split, shard, n_shards, route_dir=route_dir,
                                                partitions=partitions, plan=plan,
                                                source=None if source is None else source[0])
    if len(lengths) == 0:
        return None  # never write an empty shard
    documents = len(lengths)
    by_source = None
    if plan is not None or source is not None:
        names = plan["sources"] if plan is not None else None
        by_source = {}
        for k in np.unique(srcs).tolist():
            name = names[k] if names is not None else source[1]
            by_source[name] = {"documents": int((srcs == k).sum()),
                               "tokens": int(lengths[srcs == k].sum())}
    if spec["packing"] == "bfd":
        tokens, lengths = pack_bfd(tokens, lengths, spec["seq_length"], eod_id)
    name = f"{split}-{shard:05d}" if source is None else f"{source[1]}-{shard:05d}"
    rel = f"{split}/{name}"
    prefix = os.path.join(shards_dir, rel)
    extra = {"texts": gather_texts(route_dir, where)} if spec.get("text") else {}
    if spec.get("compression"):
        extra["compression"] = spec["compression"]
    files = formats.get(spec["format"]).write(prefix, tokens, lengths,
                                              tokenizer_name=tokenizer_name, **extra)
    out = {"split": split, "shard": shard, "prefix": rel, "documents": documents,
           "sequences": int(len(lengths)), "tokens": int(tokens.size), "files": files}
    failpoint(f"shard-write/{split}/{shard}")
    if source is not None:
        out["source"] = source[1]
    if by_source is not None:
        out["by_source"] = by_source
    return out


def write_manifest(shards_dir: str, *, shards: list[dict], spec: dict, tokenizer, dtype,
                   version: str, fingerprint: str, append_eod: bool, mixture: dict | None = None,
                   weights: dict | None = None) -> dict:
    """``mixture``: what the blend asked for and got, per split and source; ``weights``: the
    Megatron blend weight of every shard prefix (a mixture in weights mode), else its tokens."""
    from gpupipe.shards.megatron import CODE_OF

    fmt = formats.get(spec["format"])
    shards = sorted(shards, key=lambda s: (SPLIT_ORDER.index(s["split"]), s.get("source", ""),
                                           s["shard"]))
    totals = {}
    for s in shards:
        t = totals.setdefault(s["split"], {"shards": 0, "documents": 0, "tokens": 0})
        t["shards"] += 1
        t["documents"] += s["documents"]
        t["tokens"] += s["tokens"]
    manifest = {
        "format": fmt.manifest_format,
        "gpupipe_version": version,
        "fingerprint": fingerprint,
        "tokenizer": {"path": os.path.abspath(tokenizer.path), "sha256": tokenizer.sha256,
                      "vocab_size": tokenizer.vocab_size, "eod_id": tokenizer.eod_id,
                      "eod_token": tokenizer.eod_token, "bos_id": tokenizer.bos_id,
                      "pad_id": tokenizer.pad_id},
        "dtype": np.dtype(dtype).name,
        "dtype_code": CODE_OF[np.dtype(dtype)],
        "append_eod": append_eod,
        "seed": spec["seed"],
        "shuffle": "key = xxh64(utf8(id), seed); split by (key >> 11) / 2^53 against cumulative "
                   "fractions (train, valid, test); shard = key mod shards(split); order inside "
                   "a shard = ascending key",
        "splits": spec["splits"],
        "packing": spec["packing"],
        "seq_length": spec["seq_length"],
        "shards": shards,
        "totals": totals,
        "mixture": mixture,
    }
    fmt.write_data_args(shards_dir, shards, weights)
    failpoint("manifest")
    write_json(manifest, os.path.join(shards_dir, "manifest.json"))  # last: the commit marker
    return manifest


def read_manifest(shards_dir: str) -> dict:
    with open(os.path.join(shards_dir, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def clean(shards_dir: str) -> None:
    if os.path.isdir(shards_dir):
        shutil.rmtree(shards_dir)
