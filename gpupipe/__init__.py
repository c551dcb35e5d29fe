"""gpupipe: declarative LLM training-data pipelines on pandas or cuDF, distributed with Dask.

>>> import gpupipe as gp
>>> sorted(gp.stage_names())[:2]
['length_filter', 'normalize_text']
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


def stage_names() -> list[str]:
    return list(all_stages())


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
    "read_jsonl",
    "read_parquet",
    "stage_names",
    "stages",
]
