"""gpupipe: declarative LLM training-data pipelines on pandas or cuDF, distributed with Dask.

>>> import gpupipe as gp
>>> p = gp.Pipeline(input="data/sample", output="out/example",
...                 stages=[gp.stages.NormalizeText(), gp.stages.LengthFilter(min_words=20)])
>>> [s.describe() for s in p.stages]
['normalize_text()', 'length_filter(min_words=20)']
>>> {"normalize_text", "fuzzy_dedup", "decontaminate", "tokenize"} <= set(gp.stage_names())
True
"""

from __future__ import annotations

from gpupipe import stages
from gpupipe._version import __version__
from gpupipe.errors import (
    BackendUnavailableError,
    ClusterError,
    GpupipeError,
    InputError,
    OutputError,
    SpecError,
    StageError,
)
from gpupipe.io import read_jsonl, read_parquet
from gpupipe.pipeline import Pipeline
from gpupipe.result import RunResult
from gpupipe.stages.registry import all_stages
from gpupipe.views import html as _html
from gpupipe.views import report as _report


# the views of the floors below (stages, pipelines, results) live in the ui floor
@_html.register_lazy("gpupipe")
def _register_html() -> None:
    from gpupipe import notebook

    notebook.register()


@_report.register_lazy("gpupipe")
def _register_report() -> None:
    from gpupipe import report

    report.register()


def explain_document(pipeline, text: str):
    """One text through ``pipeline``'s row-local stages: every measure, its bounds and each
    filter's verdict (`gpupipe.preview.explain_document`)."""
    from gpupipe.preview import explain_document as run

    return run(pipeline, text)


def stage_names() -> list[str]:
    return list(all_stages())


def check_gpu(data="data", *, sample: int = 1000, max_doc_bytes: int | None = None,
              kernels: list[str] | None = None, simulate: bool = False) -> list[dict]:
    """Every text kernel on the CPU and on the GPU (or numba's CUDA simulator), compared bit
    for bit (what ``gpupipe check-gpu`` runs); see `gpupipe.gpu_check.check_gpu`."""
    from gpupipe.gpu_check import check_gpu as run

    return run(data, sample=sample, max_doc_bytes=max_doc_bytes, kernels=kernels,
               simulate=simulate)


__all__ = [
    "BackendUnavailableError",
    "ClusterError",
    "GpupipeError",
    "InputError",
    "OutputError",
    "Pipeline",
    "RunResult",
    "SpecError",
    "StageError",
    "__version__",
    "check_gpu",
    "read_jsonl",
    "read_parquet",
    "stage_names",
    "stages",
]
