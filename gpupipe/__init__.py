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

import importlib

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
from gpupipe.views import html as _html
from gpupipe.views import report as _report

#: what the face gives, imported the first time it is asked for: importing one module of
#: gpupipe (a worker unpickling a stage, `gpupipe.backends.dispatch`) does not load them all
_LAZY = {"Pipeline": "gpupipe.pipeline", "RunResult": "gpupipe.result",
         "read_jsonl": "gpupipe.io", "read_parquet": "gpupipe.io", "stages": None}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'gpupipe' has no attribute {name!r}")
    module = _LAZY[name]
    value = (importlib.import_module(f"gpupipe.{name}") if module is None else
             getattr(importlib.import_module(module), name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    """The names of every stage, built-in and from plugins."""
    from gpupipe.stages.registry import all_stages

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
