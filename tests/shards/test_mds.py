"""MDS shards (``output.shards.format: mds``): MosaicML Streaming's own ``StreamingDataset``
reads every sample back, equal to the tokens of the Megatron shards of the same run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import gpupipe as gp
from gpupipe.shards import formats
from gpupipe.shards.formats.mds import MdsReader, encode_shard
from gpupipe.shards.inspect import verify
from gpupipe.shards.megatron import IndexedDataset
from gpupipe.stages import LengthFilter, NormalizeText, Tokenize
from tests.conftest import REPO

STREAMING = REPO / ".venv-streaming" / "bin" / "python"

# mosaicml-streaming 0.13 pins numpy < 2.2 and transformers < 5, which the suite's venv cannot
# have, so it lives in .venv-streaming (make test installs it) over the suite's packages. Its
# package import loads torchvision for its image datasets, and PyPI's torchvision needs the CUDA
# build of PyTorch: the three names its vision module imports are given empty stand-ins, which
# the MDS path never calls.
READER = r"""
import hashlib, importlib.machinery, json, sys, types
for name in ("torchvision", "torchvision.datasets", "torchvision.transforms",
             "torchvision.transforms.functional"):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = module
sys.modules["torchvision.datasets"].VisionDataset = object
sys.modules["torchvision.datasets"].CIFAR10 = object
sys.modules["torchvision.transforms.functional"].to_tensor = None
from streaming import StreamingDataset
out = {}
for split in sys.argv[2:]:
    ds = StreamingDataset(local=f"{sys.argv[1]}/{split}", shuffle=False, batch_size=1)
    out[split] = [[str(ds[i]["tokens"].dtype), hashlib.sha256(ds[i]["tokens"].tobytes()).hexdigest()]
                  + ([ds[i]["text"]] if "text" in ds[i] else []) for i in range(len(ds))]
print(json.dumps(out))
"""


def run(client, corpus, out, fmt, **shards):
    return gp.Pipeline(
        input={"path": str(corpus), "id_column": "id"},
        output={"path": str(out), "shards": {"num_shards": 3, "format": fmt, "seed": 7,
                                             "splits": {"train": 0.9, "valid": 0.1},
                                             **shards}},
        stages=[NormalizeText(), LengthFilter(min_words=20),
                Tokenize(tokenizer="data/tokenizer.json")]).run(client=client, progress=False)


def digests(shards: str, manifest: dict) -> dict[str, list]:
    """Per split, (dtype, sha256) of every sequence in shard order, read by gpupipe's reader of
    the manifest's format."""
    out: dict[str, list] = {}
    fmt = formats.of_manifest(manifest["format"])
    for s in manifest["shards"]:
        ds = fmt.open(os.path.join(shards, s["prefix"]))
        out.setdefault(s["split"], []).extend(
            [str(ds[i].dtype), hashlib.sha256(ds[i].tobytes()).hexdigest()]
            for i in range(len(ds)))
    return out


@pytest.fixture(scope="module")
def runs(client, tmp_path_factory, sample_records):
    from tests.conftest import write_jsonl

    d = tmp_path_factory.mktemp("mds")
    write_jsonl(d / "in" / "a.jsonl", sample_records[:400])
    mds = run(client, d / "in", d / "mds", "mds")
    meg = run(client, d / "in", d / "meg", "megatron")
    with_text = run(client, d / "in", d / "text", "mds", text=True)
    zstd = run(client, d / "in", d / "zstd", "mds", text=True, compression="zstd:7")
    return mds, meg, with_text, zstd


def test_layout_manifest_and_own_reader(runs):
    mds, meg, _, _ = runs
    d = mds.shards_path
    manifest, problems = verify(d)
    assert manifest["format"] == "mosaicml-mds-v2" and problems == []
    assert sorted(os.listdir(os.path.join(d, "train"))) == [
        "index.json", "train-00000.mds", "train-00001.mds", "train-00002.mds"]
    index = json.load(open(os.path.join(d, "train", "index.json")))
    assert index["version"] == 2
    assert [e["raw_data"]["basename"] for e in index["shards"]] == [
        f"train-0000{k}.mds" for k in range(3)]
    assert [e["samples"] for e in index["shards"]] == [
        s["sequences"] for s in manifest["shards"] if s["split"] == "train"]
    assert [e["raw_data"]["bytes"] for e in index["shards"]] == [
        os.path.getsize(os.path.join(d, "train", f"train-0000{k}.mds")) for k in range(3)]
    theirs = json.load(open(os.path.join(meg.shards_path, "manifest.json")))
    assert manifest["totals"] == theirs["totals"]
    # gpupipe's own reader gives the Megatron tokens
    assert formats.of_manifest(theirs["format"]).reader is IndexedDataset
    assert digests(d, manifest) == digests(meg.shards_path, theirs)
    for s in manifest["shards"]:
        assert MdsReader(os.path.join(d, s["prefix"])).verify() == []


@pytest.mark.skipif(not STREAMING.exists(), reason="mosaicml-streaming is not installed in "
                    ".venv-streaming (make .venv-streaming/.installed)")
def test_streaming_dataset_reads_every_sample(runs, tmp_path):
    mds, meg, with_text, zstd = runs
    r = subprocess.run([str(STREAMING), "-c", READER, str(mds.shards_path), "train", "valid"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = digests(meg.shards_path,
                              json.load(open(os.path.join(meg.shards_path, "manifest.json"))))
    got = json.loads(r.stdout)
    assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in theirs.items()}
    assert got == theirs
    # with text: the same tokens, and beside each the text of its document, as gpupipe reads it
    r = subprocess.run([str(STREAMING), "-c", READER, str(with_text.shards_path), "train",
                        "valid"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert {k: [x[:2] for x in v] for k, v in got.items()} == theirs
    manifest = json.load(open(os.path.join(with_text.shards_path, "manifest.json")))
    mine = {}
    for s in manifest["shards"]:
        ds = MdsReader(os.path.join(with_text.shards_path, s["prefix"]))
        mine.setdefault(s["split"], []).extend(ds.text(i) for i in range(len(ds)))
    assert {k: [x[2] for x in v] for k, v in got.items()} == mine
    # compressed: streaming decompresses each shard (beside it: a copy) and reads the same
    # samples; gpupipe's check takes the decompressed files for what they are
    copy = tmp_path / "zstd"
    shutil.copytree(zstd.shards_path, copy)
    r = subprocess.run([str(STREAMING), "-c", READER, str(copy), "train", "valid"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout) == got
    assert (copy / "train" / "train-00000.mds").exists()
    assert verify(str(copy))[1] == []


def test_compressed_shards_hold_the_same_samples(runs):
    """``compression: zstd:7``: each shard is one ``.mds.zstd`` file, the zstd frame of the
    bytes the same run writes uncompressed but for the configuration's ``compression``."""
    import zstandard

    _, _, with_text, zstd = runs
    d = zstd.shards_path
    manifest, problems = verify(d)
    assert problems == []
    assert sorted(os.listdir(os.path.join(d, "train"))) == [
        "index.json", "train-00000.mds.zstd", "train-00001.mds.zstd", "train-00002.mds.zstd"]
    index = json.load(open(os.path.join(d, "train", "index.json")))
    plain = json.load(open(os.path.join(with_text.shards_path, "train", "index.json")))
    for k, (e, p) in enumerate(zip(index["shards"], plain["shards"])):
        name = f"train-0000{k}"
        packed = open(os.path.join(d, "train", name + ".mds.zstd"), "rb").read()
        raw = zstandard.ZstdDecompressor().decompress(packed)
        before = open(os.path.join(with_text.shards_path, "train", name + ".mds"), "rb").read()
        # the configuration is sorted JSON in the header, which sizes the offsets before it
        shift = len(b'"zstd:7"') - len(b"null")
        head = 4 + 4 * (p["samples"] + 1)
        offsets = np.frombuffer(before, "<u4", p["samples"] + 1, 4).astype(np.int64) + shift
        assert raw[4:head] == offsets.astype("<u4").tobytes()
        assert raw[head:] == before[head:].replace(b'"compression": null',
                                                   b'"compression": "zstd:7"', 1)
        assert len(packed) < 0.6 * len(raw)
        assert e["compression"] == "zstd:7" and p["compression"] is None
        assert e["zip_data"] == {"basename": name + ".mds.zstd", "bytes": len(packed),
                                 "hashes": {}}
        assert e["raw_data"] == {"basename": name + ".mds", "bytes": len(raw), "hashes": {}}
        assert e["samples"] == p["samples"]
    plain_manifest = json.load(open(os.path.join(with_text.shards_path, "manifest.json")))
    assert digests(d, manifest) == digests(with_text.shards_path, plain_manifest)
    assert MdsReader(os.path.join(d, "train", "train-00001")).text(3) == MdsReader(
        os.path.join(with_text.shards_path, "train", "train-00001")).text(3)


def test_text_is_each_documents_own(runs):
    """Every sample's text is the text of the document whose tokens it holds (the data
    Parquet pairs them), and the shards' tokens equal those of the run without text."""
    import pyarrow.parquet as pq

    mds, _, with_text, _ = runs
    table = pq.read_table(os.path.join(with_text.output, "data"), columns=["text", "tokens"])
    pairs = {t: tuple(ids) for t, ids in zip(table.column("text").to_pylist(),
                                             table.column("tokens").to_pylist())}
    manifest = json.load(open(os.path.join(with_text.shards_path, "manifest.json")))
    seen = 0
    for s in manifest["shards"]:
        ds = MdsReader(os.path.join(with_text.shards_path, s["prefix"]))
        assert ds.verify() == [] and ds.has_text
        for i in range(len(ds)):
            assert pairs[ds.text(i)] == tuple(ds[i].tolist())
            seen += 1
    assert seen == len(pairs) == 393
    plain = json.load(open(os.path.join(mds.shards_path, "manifest.json")))
    assert digests(with_text.shards_path, manifest) == digests(mds.shards_path, plain)
    with pytest.raises(KeyError, match="holds no text"):
        MdsReader(os.path.join(mds.shards_path, plain["shards"][0]["prefix"])).text(0)


def test_compression_needs_mds_and_a_zstd_level():
    from gpupipe.spec import ShardSpec

    with pytest.raises(ValueError, match=r"compression needs a format that compresses its files "
                                         r"\(mds\); megatron does not"):
        ShardSpec(num_shards=1, compression="zstd")
    for bad in ("gzip", "zstd:0", "zstd:23", "zstd:x"):
        with pytest.raises(ValueError, match=rf"compression '{bad}': zstd or zstd:N with N "
                                             rf"from 1 to 22"):
            ShardSpec(num_shards=1, format="mds", compression=bad)
    assert ShardSpec(num_shards=1, format="mds", compression="zstd:22").compression == "zstd:22"


def test_text_needs_mds_and_no_packing():
    from gpupipe.spec import ShardSpec

    with pytest.raises(ValueError, match=r"text: true needs a format that stores text \(mds\); "
                                         r"megatron holds tokens only"):
        ShardSpec(num_shards=1, text=True)
    with pytest.raises(ValueError, match="text: true needs packing: none"):
        ShardSpec(num_shards=1, text=True, format="mds", packing="bfd", seq_length=64)


def test_encoding_of_one_shard():
    """The bytes of a two-sample shard, written out by hand from streaming's format."""
    tokens = np.array([5, 6, 0] + [7] * 300 + [0], np.uint16)
    data = encode_shard(tokens, np.array([3, 301]))
    head = json.dumps({"column_encodings": ["ndarray:uint16"], "column_names": ["tokens"],
                       "column_sizes": [None], "compression": None, "format": "mds",
                       "hashes": [], "size_limit": None, "version": 2},
                      sort_keys=True).encode()
    start = 4 + 12 + len(head)
    first = (4 + 1 + 1 + 6)
    expected = (np.array([2, start, start + first, start + first + 4 + 1 + 2 + 602],
                         "<u4").tobytes() + head
                + np.uint32(8).tobytes() + bytes([4 | 0, 3]) + tokens[:3].tobytes()
                + np.uint32(1 + 2 + 602).tobytes() + bytes([4 | 1]) + (301).to_bytes(2, "little")
                + tokens[3:].tobytes())
    assert data == expected
    with pytest.raises(ValueError, match="empty sequence"):
        encode_shard(tokens, np.array([0, 304]))


def test_encoding_with_text():
    """With text: both columns' sizes, then the UTF-8 text, then the array (streaming's
    MDSWriter order for columns sorted by name)."""
    tokens = np.array([5, 6, 0], np.uint16)
    data = encode_shard(tokens, np.array([3]), ["café"])
    head = json.dumps({"column_encodings": ["str", "ndarray:uint16"],
                       "column_names": ["text", "tokens"], "column_sizes": [None, None],
                       "compression": None, "format": "mds", "hashes": [],
                       "size_limit": None, "version": 2}, sort_keys=True).encode()
    start = 4 + 8 + len(head)
    sample = (np.uint32(5).tobytes() + np.uint32(8).tobytes() + "café".encode()
              + bytes([4 | 0, 3]) + tokens.tobytes())
    assert data == np.array([1, start, start + len(sample)], "<u4").tobytes() + head + sample
