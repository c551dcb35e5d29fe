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

__version__ = "0.1.0"

from gpupipe import stages
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
from gpupipe.registry import all_stages
from gpupipe.runner import RunResult


def explain_document(pipeline, text: str):
    """One text through ``pipeline``'s row-local stages: every measure, its bounds and each
    filter's verdict (`gpupipe.notebook.explain_document`)."""
    from gpupipe.notebook import explain_document as run

    return run(pipeline, text)


def stage_names() -> list[str]:
    return list(all_stages())


def check_gpu(data="data", *, sample: int = 1000, max_doc_bytes: int | None = None,
              kernels: list[str] | None = None) -> list[dict]:
    """Every text kernel on the CPU and on the GPU, compared bit for bit (what
    ``gpupipe check-gpu`` runs); see `gpupipe.kernels.checks.check_gpu`."""
    from gpupipe.kernels.checks import check_gpu as run

    return run(data, sample=sample, max_doc_bytes=max_doc_bytes, kernels=kernels)


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
