"""Writing training shards from the tokenized partitions, as a two-phase shuffle on Dask.

1. route (one task per partition): compute each document's key, split and length; save the
   partition's tokens (shard dtype) and a small document table under ``shards/_route/``.
2. write (one task per shard): gather the shard's documents from every partition's table,
   order them by key, write ``.bin`` then ``.idx`` (or the datatrove ``.ds`` files).

Then ``manifest.json`` is written last, as the commit marker, with ``data_args.txt`` and
``per_split_data_args.json`` beside it.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import xxhash

from gpupipe.io.writer import write_bytes, write_json, write_npy
from gpupipe.shards.megatron import write_indexed
from gpupipe.shards.routing import SPLIT_ORDER, assign_splits, doc_keys, ranges

DOC_DTYPE = np.dtype([("split", "u1"), ("key", "<u8"), ("length", "<i8"), ("offset", "<i8")])
FORMAT = "megatron-mmidx-v1"


def route_partition(p: int, data_file: str, *, route_dir: str, seed: int, fractions: dict,
                    dtype: str, vocab_size: int) -> dict:
    table = pq.read_table(data_file, columns=["id", "tokens"])
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
    write_npy(flat, os.path.join(route_dir, f"part-{p:05d}.tokens.npy"))
    write_npy(docs, os.path.join(route_dir, f"part-{p:05d}.docs.npy"))
    tokens_per_split = {s: int(lengths[docs["split"] == k].sum()) for k, s in
                        enumerate(SPLIT_ORDER)}
    docs_per_split = {s: int((docs["split"] == k).sum()) for k, s in enumerate(SPLIT_ORDER)}
    return {"partition": p, "tokens": tokens_per_split, "docs": docs_per_split}


def gather_shard(split: str, shard: int, n_shards: int, *, route_dir: str,
                 partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and lengths of one shard's documents, in ascending key order.

    Equal keys (the same id twice, or a 64-bit collision) are ordered by a hash of their tokens,
    so the result never depends on which partition a document came from.
    """
    k = SPLIT_ORDER.index(split)
    parts_docs, parts_tokens = [], []
    for p in range(partitions):
        docs = np.load(os.path.join(route_dir, f"part-{p:05d}.docs.npy"))
        sel = docs[(docs["split"] == k) & (docs["key"] % np.uint64(n_shards) == np.uint64(shard))]
        if len(sel) == 0:
            continue
        tokens = np.load(os.path.join(route_dir, f"part-{p:05d}.tokens.npy"), mmap_mode="r")
        parts_tokens.append(np.asarray(tokens[ranges(sel["offset"], sel["length"])]))
        parts_docs.append(sel)
    if not parts_docs:
        return np.zeros(0, np.uint16), np.zeros(0, np.int64)
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
    return tokens[ranges(local[order], docs["length"][order])], docs["length"][order]


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


def write_datatrove(prefix: str, tokens: np.ndarray, lengths: np.ndarray, tokenizer_name: str):
    """datatrove / nanotron ``.ds`` files: tokens, cumulative end offsets, metadata."""
    dt = np.dtype("<u2") if tokens.dtype.itemsize == 2 else np.dtype("<u4")
    data = tokens.astype(dt)
    ends = np.cumsum(lengths).astype("<u8")
    files = {".ds": data.tobytes(), ".ds.index": ends.tobytes(),
             ".ds.metadata": f"{tokenizer_name}|{dt.itemsize}\n{data.size}\n".encode()}
    return {suffix: write_bytes(payload, prefix + suffix) for suffix, payload in files.items()}


def write_shard(split: str, shard: int, n_shards: int, *, route_dir: str, partitions: int,
                shards_dir: str, spec: dict, eod_id: int, tokenizer_name: str) -> dict | None:
    tokens, lengths = gather_shard(split, shard, n_shards, route_dir=route_dir,
                                   partitions=partitions)
    if len(lengths) == 0:
        return None  # never write an empty shard
    documents = len(lengths)
    if spec["packing"] == "bfd":
        tokens, lengths = pack_bfd(tokens, lengths, spec["seq_length"], eod_id)
    name = f"{split}-{shard:05d}"
    rel = f"{split}/{name}"
    prefix = os.path.join(shards_dir, rel)
    if spec["format"] == "datatrove":
        files = write_datatrove(prefix, tokens, lengths, tokenizer_name)
    else:
        files = write_indexed(prefix, tokens, lengths)
    return {"split": split, "shard": shard, "prefix": rel, "documents": documents,
            "sequences": int(len(lengths)), "tokens": int(tokens.size), "files": files}


def write_manifest(shards_dir: str, *, shards: list[dict], spec: dict, tokenizer, dtype,
                   version: str, fingerprint: str, append_eod: bool) -> dict:
    from gpupipe.shards.megatron import CODE_OF

    shards = sorted(shards, key=lambda s: (SPLIT_ORDER.index(s["split"]), s["shard"]))
    totals = {}
    for s in shards:
        t = totals.setdefault(s["split"], {"shards": 0, "documents": 0, "tokens": 0})
        t["shards"] += 1
        t["documents"] += s["documents"]
        t["tokens"] += s["tokens"]
    manifest = {
        "format": FORMAT if spec["format"] == "megatron" else "datatrove-ds",
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
        "mixture": None,
    }
    abs_dir = os.path.abspath(shards_dir)
    if spec["format"] == "megatron":
        per_split = {s: [] for s in SPLIT_ORDER}
        for s in shards:
            per_split[s["split"]] += [str(s["tokens"]), os.path.join(abs_dir, s["prefix"])]
        with open(os.path.join(shards_dir, "data_args.txt"), "w", encoding="utf-8") as f:
            f.write(" ".join(per_split["train"]) + "\n")
        write_json(per_split, os.path.join(shards_dir, "per_split_data_args.json"))
    write_json(manifest, os.path.join(shards_dir, "manifest.json"))  # last: the commit marker
    return manifest


def read_manifest(shards_dir: str) -> dict:
    with open(os.path.join(shards_dir, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def clean(shards_dir: str) -> None:
    if os.path.isdir(shards_dir):
        shutil.rmtree(shards_dir)
