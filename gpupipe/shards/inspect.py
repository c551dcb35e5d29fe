"""Verifying a shard directory against its manifest, and decoding documents back to text."""

from __future__ import annotations

import os

import numpy as np

from gpupipe.errors import InputError
from gpupipe.shards import formats
from gpupipe.shards.megatron import sha256_file
from gpupipe.shards.writer import read_manifest


def resolve_dir(path: str) -> str:
    """Accept the shard directory or the run directory that contains it."""
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    if os.path.exists(os.path.join(path, "shards", "manifest.json")):
        return os.path.join(path, "shards")
    raise InputError(f"{path}: no manifest.json here (nor in {path}/shards): not a finished "
                     f"gpupipe shard directory — the manifest is written last, so an "
                     f"interrupted run has none; run the pipeline again to finish it")


def verify(shards_dir: str, *, hashes: bool = True) -> tuple[dict, list[str]]:
    """Check every shard the manifest lists: presence, sizes, sha256, index invariants, counts."""
    shards_dir = resolve_dir(shards_dir)
    manifest = read_manifest(shards_dir)
    problems: list[str] = []
    fmt = formats.of_manifest(manifest["format"], os.path.join(shards_dir, "manifest.json"))
    for s in manifest["shards"]:
        prefix = os.path.join(shards_dir, s["prefix"])
        bad = False
        for suffix, meta in s["files"].items():
            path = prefix + suffix
            if not os.path.exists(path):
                problems.append(f"{path}: missing")
                bad = True
                continue
            size = os.path.getsize(path)
            if size != meta["bytes"]:
                problems.append(f"{path}: {size} bytes, the manifest says {meta['bytes']}"
                                f" ({'truncated' if size < meta['bytes'] else 'grown'})")
                bad = True
            elif hashes and sha256_file(path) != meta["sha256"]:
                problems.append(f"{path}: sha256 differs from the manifest (modified)")
                bad = True
        if fmt.reader is not None and not bad:
            try:
                ds = fmt.open(prefix)
            except ValueError as e:
                problems.append(str(e))
                continue
            problems.extend(ds.verify())
            if len(ds) != s["sequences"]:
                problems.append(f"{prefix}: {len(ds)} sequences, manifest says {s['sequences']}")
            if int(ds.sizes.astype(np.int64).sum()) != s["tokens"]:
                problems.append(f"{prefix}: token count differs from the manifest")
    listed = {os.path.normpath(os.path.join(shards_dir, s["prefix"]) + suf)
              for s in manifest["shards"] for suf in s["files"]}
    for root, _, files in os.walk(shards_dir):
        for f in files:
            p = os.path.normpath(os.path.join(root, f))
            # a compressed shard's file beside it, decompressed by streaming (its cache)
            if f.endswith(formats.all_suffixes()) and p not in listed and \
                    p + ".zstd" not in listed:
                problems.append(f"{p}: not listed in the manifest (left over from another run?)")
    return manifest, problems


def decode_document(shards_dir: str, prefix: str, k: int, tokenizer: str | None = None) -> tuple[
        list[int], str]:
    """Token ids and text of document ``k`` of shard ``prefix`` (e.g. ``train/train-00000``)."""
    from gpupipe.io.tokenizer import load_tokenizer

    shards_dir = resolve_dir(shards_dir)
    manifest = read_manifest(shards_dir)
    fmt = formats.of_manifest(manifest["format"], os.path.join(shards_dir, "manifest.json"))
    if fmt.reader is None:
        raise InputError(f"decoding is implemented for {' and '.join(formats.readable())} shards; "
                         f"gpupipe has no reader of {fmt.name} shards ({fmt.manifest_format})")
    known = [s["prefix"] for s in manifest["shards"]]
    if prefix not in known:
        from gpupipe.errors import did_you_mean

        raise InputError(f"no shard {prefix!r} in {shards_dir}{did_you_mean(prefix, known)} "
                         f"(shards: {', '.join(known[:6])}{' ...' if len(known) > 6 else ''})")
    ds = fmt.open(os.path.join(shards_dir, prefix))
    if not 0 <= k < len(ds):
        raise InputError(f"{prefix} has {len(ds)} documents; {k} is out of range")
    ids = ds[k].tolist()
    path = tokenizer or manifest["tokenizer"]["path"]
    if not os.path.exists(path):
        raise InputError(f"tokenizer {path!r} (from the manifest) not found; pass --tokenizer")
    text = load_tokenizer(path).decode(ids, skip_special_tokens=False)
    return ids, text
