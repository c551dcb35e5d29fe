"""What a run leaves: `RunResult`, the run directory and its summary (the content of
``run.json``), as data. Its notebook views live in `gpupipe.notebook`."""

from __future__ import annotations

import dataclasses
import os

from gpupipe import views


@dataclasses.dataclass(frozen=True)
class ReportView:
    """A run's ``report.html``: in a notebook it renders inline (`gpupipe.notebook` puts the
    page in an isolated frame); its repr is the path to open in a browser."""

    path: str
    height: int = 720

    def __repr__(self) -> str:
        return f"report: {os.path.abspath(self.path)}"

    def _repr_html_(self) -> str:
        return views.html(self)


@dataclasses.dataclass
class RunResult:
    """What `Pipeline.run` returns: the run directory and its summary (the content of run.json)."""

    output: str
    summary: dict

    @property
    def data_path(self) -> str:
        return self.summary["output"]["data"]

    @property
    def shards_path(self) -> str | None:
        return (self.summary.get("shards") or {}).get("directory")

    @property
    def stats(self) -> dict:
        return self.summary

    @property
    def report_path(self) -> str:
        """``<output>/report.html``, the run report (`gpupipe.report`)."""
        return os.path.join(self.output, "report.html")

    def report(self) -> ReportView:
        """The run report; in a notebook it renders inline (an isolated frame), elsewhere its
        repr is the path to open in a browser."""
        return ReportView(self.report_path)

    def stage(self, name_or_position: str | int) -> dict:
        for st in self.summary["stages"]:
            if name_or_position in (st["stage"], st["position"]):
                return st
        raise KeyError(name_or_position)

    def table(self) -> str:
        """The per-stage table printed at the end of a run."""
        from gpupipe.runner.stats import format_table

        return format_table(self.summary)

    def to_dask(self):
        """The output as a Dask DataFrame (lazy)."""
        import dask.dataframe as dd

        return dd.read_parquet(self.data_path)

    def to_pandas(self):
        """The output as one pandas DataFrame, rows in partition order."""
        import pandas as pd
        import pyarrow.parquet as pq

        from gpupipe.frame import from_arrow

        files = sorted(f for f in os.listdir(self.data_path) if f.endswith(".parquet"))
        frames = [from_arrow(pq.read_table(os.path.join(self.data_path, f))) for f in files]
        return pd.concat(frames, ignore_index=True) if frames else None

    def _repr_html_(self) -> str:
        return views.html(self)

    def __repr__(self) -> str:
        out = self.summary["output"]
        return (f"RunResult(output={self.output!r}, docs={out['docs']:,}, "
                f"partitions={out['partitions']}, seconds={self.summary['seconds']:.2f})")
