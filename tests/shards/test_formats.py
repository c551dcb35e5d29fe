"""The shard-format registry (`gpupipe.shards.formats`): both formats by both names, clear errors
for unknown ones, the bytes each format writes, and inspect / verify / decode / ShardSet / the
demo deciding through the registry."""

from __future__ import annotations

import json
import os
import typing

import numpy as np
import pytest

import gpupipe as gp
from gpupipe.shards import formats
from gpupipe.shards.formats.base import ShardFormat
from gpupipe.shards.inspect import decode_document, verify
from gpupipe.shards.megatron import IndexedDataset, write_indexed
from gpupipe.spec import ShardSpec
from gpupipe.stages import LengthFilter, NormalizeText, Tokenize


def test_the_registry_lists_every_format_by_both_names():
    assert {n: f.manifest_format for n, f in formats.FORMATS.items()} == {
        "megatron": "megatron-mmidx-v1", "datatrove": "datatrove-ds", "mds": "mosaicml-mds-v2"}
    for name, fmt in formats.FORMATS.items():
        assert fmt.name == name and issubclass(fmt, ShardFormat)
        assert formats.get(name) is fmt and formats.of_manifest(fmt.manifest_format) is fmt
    megatron, datatrove = formats.get("megatron"), formats.get("datatrove")
    assert megatron.suffixes == (".bin", ".idx") and megatron.reader is IndexedDataset
    assert megatron.writes_data_args and not datatrove.writes_data_args
    assert datatrove.suffixes == (".ds", ".ds.index", ".ds.metadata") and datatrove.reader is None
    assert formats.readable() == ("megatron", "mds")
    # the pipeline file accepts exactly the registered names
    assert typing.get_args(ShardSpec.model_fields["format"].annotation) == tuple(formats.FORMATS)
    assert ShardSpec().format == "megatron"


def test_unknown_formats_name_the_known_ones():
    with pytest.raises(gp.SpecError, match=r"unknown shard format 'megatronn' — did you mean "
                                           r"'megatron'\? \(known: megatron, datatrove, mds\)"):
        formats.get("megatronn")
    with pytest.raises(gp.InputError, match=r"x/manifest.json: unknown shard format 'webdataset' "
                                            r"\(known: megatron-mmidx-v1, datatrove-ds, "
                                            r"mosaicml-mds-v2\)"):
        formats.of_manifest("webdataset", "x/manifest.json")
    with pytest.raises(gp.SpecError, match="'megatron', 'datatrove' or 'mds'"):
        gp.Pipeline(input={"path": "data/sample"}, output={"path": "o", "shards": {
            "format": "webdataset"}}, stages=[])


def test_the_formats_write_the_bytes_they_always_wrote(tmp_path):
    tokens = np.array([5, 6, 0, 7, 8, 9, 0], np.uint16)
    lengths = np.array([3, 4], np.int64)
    p = str(tmp_path / "m")
    files = formats.get("megatron").write(p, tokens, lengths, tokenizer_name="tok.json")
    assert list(files) == [".bin", ".idx"]
    assert files == write_indexed(str(tmp_path / "w"), tokens, lengths)
    for suffix in files:
        assert open(p + suffix, "rb").read() == open(str(tmp_path / "w") + suffix, "rb").read()
    for dtype, size in ((np.uint16, 2), (np.int32, 4)):
        p = str(tmp_path / f"d{size}")
        files = formats.get("datatrove").write(p, tokens.astype(dtype), lengths,
                                               tokenizer_name="tok.json")
        assert list(files) == [".ds", ".ds.index", ".ds.metadata"]
        assert open(p + ".ds", "rb").read() == tokens.astype(f"<u{size}").tobytes()
        assert open(p + ".ds.index", "rb").read() == np.array([3, 7], "<u8").tobytes()
        assert open(p + ".ds.metadata", "rb").read() == f"tok.json|{size}\n7\n".encode()
        assert files[".ds"]["bytes"] == 7 * size and len(files[".ds"]["sha256"]) == 64


def test_a_datatrove_run_through_the_registry(client, tmp_path, small_corpus, capsys):
    from gpupipe import cli, demo
    from gpupipe.shards.dataset import ShardSet

    out = tmp_path / "o"
    res = gp.Pipeline(
        input={"path": str(small_corpus), "id_column": "id"},
        output={"path": str(out), "shards": {"num_shards": 2, "format": "datatrove"}},
        stages=[NormalizeText(), LengthFilter(min_words=20),
                Tokenize(tokenizer="data/tokenizer.json")]).run(client=client, progress=False)
    d = res.shards_path
    assert sorted(os.listdir(d)) == ["manifest.json", "train"]  # no Megatron data_args
    manifest, problems = verify(d)
    assert manifest["format"] == "datatrove-ds" and problems == []
    assert cli.main(["inspect", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "datatrove-ds" in printed and "ok: every shard matches the manifest" in printed

    assert demo.main(str(out)) == 0  # lists the .ds files; no decoding, no Megatron flags
    printed = capsys.readouterr().out
    assert "train/train-00000.ds/.ds.index/.ds.metadata" in printed
    assert "Decoded" not in printed and "--data-args-path" not in printed

    with pytest.raises(gp.InputError, match="decoding is implemented for megatron and mds "
                                            "shards; gpupipe has no reader of datatrove shards"):
        decode_document(d, "train/train-00000", 0)
    with pytest.raises(ValueError, match="no reader of datatrove shards"):
        ShardSet(d)

    stray = os.path.join(d, "train", "train-00009.ds.index")
    open(stray, "wb").close()
    assert verify(d)[1] == [f"{stray}: not listed in the manifest (left over from another run?)"]
    os.remove(stray)
    m = json.load(open(os.path.join(d, "manifest.json")))
    m["format"] = "datatrove-ds-v9"
    json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
    with pytest.raises(gp.InputError, match="unknown shard format 'datatrove-ds-v9' — did you "
                                            "mean 'datatrove-ds'"):
        verify(d)


class _Toy(ShardFormat):
    """A format added by one class and its registration: verify and all_suffixes follow."""

    name = "toy"
    manifest_format = "toy-v0"
    suffixes = (".toy",)

    @classmethod
    def write(cls, prefix, tokens, lengths, *, tokenizer_name):
        from gpupipe.io.writer import write_bytes

        return {".toy": write_bytes(tokens.tobytes(), prefix + ".toy")}


def test_a_registered_format_is_used_everywhere(monkeypatch, tmp_path):
    monkeypatch.setitem(formats.FORMATS, "toy", _Toy)
    assert formats.get("toy") is _Toy and formats.of_manifest("toy-v0") is _Toy
    os.makedirs(tmp_path / "train")
    files = _Toy.write(str(tmp_path / "train" / "t-0"), np.arange(4, dtype=np.uint16),
                       np.array([4]), tokenizer_name="tok.json")
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "toy-v0", "shards": [
        {"prefix": "train/t-0", "files": files, "sequences": 1, "tokens": 4}]}))
    assert verify(str(tmp_path))[1] == []
    (tmp_path / "train" / "t-1.toy").write_bytes(b"")
    assert verify(str(tmp_path))[1] == [f"{tmp_path}/train/t-1.toy: not listed in the manifest "
                                        f"(left over from another run?)"]
