"""Run statistics as typed, mergeable values (as datatrove's ``utils/stats.py``): what a row
task or a global stage reports for a stage is a `StageStats`, what a reader reports is a
`ReadStats`; the runner adds them up (``+``) and writes their JSON into run.json. Also the
end-of-run table."""

from __future__ import annotations

import dataclasses
from typing import Any


def _sum(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclasses.dataclass
class StageStats:
    """What one stage did: on one partition (a row task), or summed over a run.

    ``by_source`` (named inputs only): source -> ``{"docs_in": n, "docs_out": m}``."""

    position: int
    stage: str
    docs_in: int = 0
    docs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    drops: dict[str, int] = dataclasses.field(default_factory=dict)
    counters: dict[str, int | float] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    #: the backend it ran on
    backend: str = "pandas"
    by_source: dict[str, dict[str, int]] | None = None
    #: in run.json only: "row" or "global", the parameters, a global stage's steps
    kind: str = "row"
    params: dict[str, Any] | None = None
    steps: list[dict] | None = None

    def __add__(self, other: StageStats) -> StageStats:
        if (other.position, other.stage) != (self.position, self.stage):
            raise ValueError(f"cannot add the stats of stages[{other.position}] "
                             f"({other.stage}) to stages[{self.position}] ({self.stage})")
        by_source = None
        if self.by_source is not None or other.by_source is not None:
            by_source = {k: _sum((self.by_source or {}).get(k, {}),
                                 (other.by_source or {}).get(k, {}))
                         for k in sorted(set(self.by_source or {}) | set(other.by_source or {}))}
        return dataclasses.replace(
            self, docs_in=self.docs_in + other.docs_in, docs_out=self.docs_out + other.docs_out,
            bytes_in=self.bytes_in + other.bytes_in, bytes_out=self.bytes_out + other.bytes_out,
            drops=_sum(self.drops, other.drops), counters=_sum(self.counters, other.counters),
            seconds=self.seconds + other.seconds, by_source=by_source)

    def to_json(self) -> dict:
        """run.json's entry (with ``kind`` and ``params`` when known; counts sorted)."""
        out = {"position": self.position, "stage": self.stage, "kind": self.kind,
               "params": self.params, "docs_in": self.docs_in, "docs_out": self.docs_out,
               "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
               "drops": dict(sorted(self.drops.items())),
               "counters": dict(sorted(self.counters.items())),
               "seconds": round(self.seconds, 4), "backend": self.backend}
        if self.params is None:   # a partition's report
            del out["kind"], out["params"]
        if self.steps is not None:
            out["steps"] = self.steps
        if self.by_source is not None:
            out["by_source"] = {k: {"docs_in": v.get("docs_in", 0), "docs_out": v.get("docs_out", 0)}
                                for k, v in sorted(self.by_source.items())}
        return out

    @classmethod
    def from_json(cls, d: dict) -> StageStats:
        by_source = d.get("by_source")
        if by_source is not None:   # stats files of runs before 2026-12: [docs_in, docs_out]
            by_source = {k: v if isinstance(v, dict) else {"docs_in": v[0], "docs_out": v[1]}
                         for k, v in by_source.items()}
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)
                      if f.name in d and f.name != "by_source"}, by_source=by_source)


@dataclasses.dataclass
class ReadStats:
    """What the readers did: files, records kept and set aside (per reason), bytes, seconds."""

    files: int = 0
    docs: int = 0
    bytes: int = 0
    compressed_bytes: int = 0
    blank_lines: int = 0
    files_corrupt: int = 0
    text_bytes: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    #: WARC input: records by WARC-Type, responses not kept by content type, bodies whose
    #: charset was detected (the declared one was missing or wrong); left out of run.json
    #: for other formats
    records: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    charset_detected: int = 0

    def __add__(self, other: ReadStats) -> ReadStats:
        return ReadStats(**{f.name: (_sum(getattr(self, f.name), getattr(other, f.name))
                                     if isinstance(getattr(self, f.name), dict) else
                                     getattr(self, f.name) + getattr(other, f.name))
                            for f in dataclasses.fields(self)})

    @classmethod
    def from_json(cls, d: dict) -> ReadStats:
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("rejected", "records", "skipped"):
            out[key] = dict(sorted(getattr(self, key).items()))
        if not self.records:
            for key in ("records", "skipped", "charset_detected"):
                del out[key]
        return out

    @property
    def records_rejected(self) -> int:
        """Records set aside (a corrupt file counts as one entry, not as records)."""
        return sum(v for k, v in self.rejected.items() if k != "corrupt_file")

#: text-length buckets (characters) of the length distributions in run.json and the report
LENGTH_EDGES = (0, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)
LENGTH_LABELS = tuple([f"{a:,}–{b:,}" for a, b in zip(LENGTH_EDGES, LENGTH_EDGES[1:])]
                      + [f"{LENGTH_EDGES[-1]:,}+"])


def profile(df) -> dict:
    """Documents per text-length bucket and, when the partition has a ``language`` column, per
    language: what run.json records of the documents read and of the output (summed over
    partitions; pandas or cuDF)."""
    import numpy as np

    from gpupipe.backends import dispatch
    from gpupipe.frame import TEXT

    out: dict = {"length_hist": dict.fromkeys(LENGTH_LABELS, 0)}
    if len(df):
        # both targets' launchers return host numpy arrays
        chars = dispatch.kernels_for(df).count_chars(*dispatch.text_buffers(df[TEXT]))
        bins = np.searchsorted(np.asarray(LENGTH_EDGES[1:]), chars, side="right")
        for k, n in enumerate(np.bincount(bins, minlength=len(LENGTH_LABELS))):
            out["length_hist"][LENGTH_LABELS[k]] = int(n)
    if "language" in df.columns:
        counts = dispatch.to_host(df[["language"]])["language"].fillna("?").value_counts()
        out["languages"] = {str(k): int(v) for k, v in sorted(counts.items())}
    return out


def merge_profiles(reports: list[dict], key: str = "profile") -> dict:
    total: dict = {}
    for r in reports:
        _add(total, r.get(key, {}))
    if "languages" in total:
        total["languages"] = dict(sorted(total["languages"].items(), key=lambda kv: -kv[1]))
    return total


def _add(total: dict, part: dict) -> None:
    for k, v in part.items():
        if isinstance(v, dict):
            _add(total.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v


def merge_stages(reports: list[dict], stages: list, positions: tuple,
                 backend: str = "pandas") -> list[StageStats]:
    """The row stages of a segment summed over its partitions' reports."""
    merged = []
    for pos, st in zip(positions, stages):
        total = StageStats(pos, st.stage_name, backend=st.runs_on(backend), kind=st.kind,
                           params=st.params())
        for r in reports:
            for s in r.get("stages", []):
                if s["position"] == pos:
                    total = total + StageStats.from_json(s)
        merged.append(total)
    return merged


def format_table(summary: dict) -> str:
    """The per-stage table printed at the end of a run."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gpupipe run: {summary['pipeline']['name']}", title_justify="left")
    for col, just in (("stage", "left"), ("docs in", "right"), ("docs out", "right"),
                      ("kept", "right"), ("MB in", "right"), ("MB out", "right"),
                      ("seconds", "right"), ("drops / notes", "left")):
        table.add_column(col, justify=just)
    read = summary["read"]
    rejected = sum(read["rejected"].values())
    table.add_row("read", f"{read['docs'] + rejected:,}", f"{read['docs']:,}",
                  _pct(read["docs"], read["docs"] + rejected), f"{read['bytes'] / 1e6:.2f}",
                  f"{read['text_bytes'] / 1e6:.2f}", f"{read['seconds']:.2f}",
                  _reasons(read["rejected"], "rejected") or f"{read['files']} file(s)")
    for st in summary["stages"]:
        notes = _reasons(st["drops"], "") or _reasons(st.get("counters", {}), "")
        only = st.get("params", {}).get("source") if isinstance(st.get("params"), dict) else None
        label = f"{only}: {st['stage']}" if isinstance(only, str) else st["stage"]
        table.add_row(f"{st['position']}: {label}", f"{st['docs_in']:,}",
                      f"{st['docs_out']:,}", _pct(st["docs_out"], st["docs_in"]),
                      f"{st['bytes_in'] / 1e6:.2f}", f"{st['bytes_out'] / 1e6:.2f}",
                      f"{st['seconds']:.2f}", notes)
    buf = StringIO()
    Console(file=buf, width=120, force_terminal=False).print(table)
    return buf.getvalue()


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "-"


def _reasons(counts: dict, prefix: str) -> str:
    if not counts:
        return ""
    items = ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{prefix} {items}".strip()
