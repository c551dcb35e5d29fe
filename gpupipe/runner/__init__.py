"""Execution: planning segments, running them on Dask, checkpoints, stats."""

from gpupipe.runner.execute import RunResult, execute
from gpupipe.runner.plan import Segment, plan

__all__ = ["RunResult", "Segment", "execute", "plan"]
