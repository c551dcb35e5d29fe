"""The backend seam: stages reach their partition only through `gpupipe.backends.dispatch`, whose pandas half
is tested here on real text and whose cuDF half is checked against the installed cuDF package
(imports without a GPU) and, on a GPU machine, by the `gpu` tests."""

from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pandas as pd
import pytest

from gpupipe.backends import dispatch
from gpupipe.frame import STRING
from gpupipe.kernels import cpu
from gpupipe.stages.filters.quality import C4Quality, GopherQuality


def _frame(texts):
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                         "text": pd.array(texts, dtype=STRING)})


def test_pandas_half_on_real_text(sample_records):
    texts = [r["text"] for r in sample_records[:50]]
    df = _frame(texts)
    offsets, data = dispatch.text_buffers(df["text"])
    assert offsets.dtype == np.int64 and len(offsets) == 51
    assert data[offsets[7]: offsets[8]].tobytes().decode() == texts[7]
    assert dispatch.kernels_for(df) is cpu
    same = dispatch.string_column(df["text"], offsets, data)
    assert same.tolist() == texts and str(same.dtype) == str(STRING)
    keep = np.arange(50) % 2 == 0
    empty = np.zeros(51, np.int64)
    mixed = dispatch.string_column(df["text"], empty, np.zeros(0, np.uint8), keep=keep)
    assert mixed.tolist() == ["" if k else t for k, t in zip(keep, texts)]
    labels = dispatch.label_column(df, np.array([0, 2, 1] + [0] * 47, np.uint8), ("a", "b"))
    assert labels.isna().tolist()[:4] == [True, False, False, True]
    assert labels.tolist()[1:3] == ["b", "a"] and int(labels.isna().sum()) == 48
    kept = dispatch.filter_rows(df, keep)
    assert kept["text"].tolist() == texts[::2] and kept.index.tolist() == list(range(25))


def test_stages_declare_backends_from_their_kernels():
    """A stage runs on cuDF when every kernel it declares has a GPU launcher; one without
    keeps it on pandas (the claim is derived, not restated)."""
    from gpupipe.stages.base import _backends_of
    from gpupipe.stages.registry import all_stages

    assert GopherQuality.kernels == ("gopher_quality_features",)
    assert C4Quality.backends == _backends_of("c4_quality", C4Quality.kernels)
    for name, cls in all_stages().items():
        if cls.kernels:
            want = ("pandas", "cudf") if set(cls.kernels) <= cpu.ON_GPU else ("pandas",)
            assert cls.backends == want, name
    no_gpu = cpu.ON_GPU - {"gopher_quality_features"}
    assert _backends_of("g", GopherQuality.kernels, on_gpu=no_gpu) == ("pandas",)
    assert _backends_of("c", C4Quality.kernels, on_gpu=no_gpu) == ("pandas", "cudf")


def test_catalog_names_the_cpu_launchers():
    """The stages validate kernel names against the catalog, without importing numba."""
    from gpupipe.kernels import catalog

    assert set(catalog.LAUNCHERS) == set(cpu.__all__) and len(catalog.LAUNCHERS) == 21
    assert all(callable(getattr(cpu, name)) for name in catalog.LAUNCHERS)


def test_every_cpu_launcher_has_a_gpu_launcher_with_the_same_parameters():
    pytest.importorskip("numba_cuda")
    from gpupipe.kernels import gpu

    assert cpu.ON_GPU == {name for name in cpu.__all__ if hasattr(gpu, name)}
    for name in cpu.ON_GPU:
        want = [p for p in inspect.signature(getattr(cpu, name)).parameters]
        got = [p for p in inspect.signature(getattr(gpu, name)).parameters
               if p != "chunk_bytes"]
        assert got == want, name


@pytest.mark.skipif(importlib.util.find_spec("cudf") is None, reason="cuDF is not installed")
def test_cudf_half_registers_against_the_installed_cudf():
    import cudf

    from gpupipe.kernels import gpu

    assert dispatch.kernels_for.dispatch(cudf.DataFrame)(None) is gpu
    for op, cls in ((dispatch.text_buffers, cudf.Series), (dispatch.string_column, cudf.Series),
                    (dispatch.label_column, cudf.DataFrame), (dispatch.filter_rows, cudf.DataFrame),
                    (dispatch.arrow_table, cudf.DataFrame), (dispatch.byte_size, cudf.Series),
                    (dispatch.to_host, cudf.DataFrame), (dispatch.like, cudf.DataFrame),
                    (dispatch.take_text, cudf.Series)):
        assert op.dispatch(cls).__module__ == "gpupipe.backends.cudf"
    assert "mode" not in inspect.signature(cudf.Series.to_pylibcudf).parameters


def test_partitions_leave_as_one_canonical_arrow_table(sample_records):
    """What both backends write: strings as large_string, no metadata, whatever the column's
    Arrow type was (cuDF hands out ``string`` or ``large_string`` columns)."""
    import pyarrow as pa

    from gpupipe.frame import canonical_arrow

    texts = [r["text"] for r in sample_records[:20]]
    df = _frame(texts).assign(score=np.arange(20, dtype=np.float32))
    table = dispatch.arrow_table(df)
    assert table.schema == pa.schema([("id", pa.large_string()), ("text", pa.large_string()),
                                      ("score", pa.float32())])
    small = pa.table({"id": pa.array([str(i) for i in range(20)], pa.string()),
                      "text": pa.array(texts, pa.string()),
                      "score": pa.array(np.arange(20, dtype=np.float32))})
    assert canonical_arrow(small.replace_schema_metadata({"pandas": "x"})).equals(table)
    assert dispatch.byte_size(df["text"]) == sum(len(t.encode()) for t in texts)
    assert dispatch.to_host(df) is df and dispatch.like(df, df) is df


def test_sample_draws_with_the_routing_hash():
    """`sample` now hashes ids with the XXH64 kernel (so it runs on cuDF); the draw is the one
    `shards.routing.doc_keys` (the xxhash package) gives, for any seed."""
    from gpupipe.shards.routing import doc_keys
    from gpupipe.stages.filters.simple import _SALT, Sample

    ids = [f"doc-{i}" for i in range(2000)]
    df = _frame(["x"] * 2000).assign(id=pd.array(ids, dtype=STRING))
    for seed in (0, 7, -3):
        keys = doc_keys(ids, seed ^ _SALT)
        want = ((keys >> np.uint64(11)).astype(np.float64) / 2**53 >= 0.3).astype(np.uint8)
        got = Sample(rate=0.3, seed=seed).reason_codes(df)
        assert np.array_equal(got, want)
        assert 500 < int((got == 0).sum()) < 700  # about 30% kept
    assert Sample.backends == ("pandas", "cudf")


def test_language_id_runs_on_cudf_unless_a_fasttext_model_is_given(tmp_path):
    from gpupipe.stages import LanguageId

    model = tmp_path / "lid.bin"
    model.write_bytes(b"")  # only its existence is checked before a run
    assert LanguageId().runs_on("cudf") == "cudf"
    assert LanguageId(fasttext_model=str(model)).runs_on("cudf") == "pandas"
    assert LanguageId(fasttext_model=str(model)).runs_on("pandas") == "pandas"


def test_a_few_rewritten_rows_go_back_into_the_column(sample_records):
    """`scatter_buffers` + `string_column(keep=...)`: what pii_redact and language_id use to
    write back only the rows they rewrote on the host."""
    import pyarrow as pa

    from gpupipe.kernels.utf8 import scatter_buffers

    texts = [r["text"] for r in sample_records[:30]]
    df = _frame(texts)
    rows = [2, 17, 29]
    new = pa.array(["two", "", "twenty-nine é"], pa.large_string())
    keep = np.zeros(30, bool)
    keep[rows] = True
    out = dispatch.string_column(df["text"], *scatter_buffers(30, rows, new), keep=keep)
    want = list(texts)
    want[2], want[17], want[29] = "two", "", "twenty-nine é"
    assert out.tolist() == want
