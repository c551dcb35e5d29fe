"""Merging per-partition reports into the run summary (``run.json``) and the end-of-run table."""

from __future__ import annotations

from collections import Counter

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
        chars = dispatch.kernels_for(df).count_chars(*dispatch.text_buffers(df[TEXT]))
        chars = chars.get() if hasattr(chars, "get") else np.asarray(chars)
        bins = np.searchsorted(np.asarray(LENGTH_EDGES[1:]), chars, side="right")
        for k, n in enumerate(np.bincount(bins, minlength=len(LENGTH_LABELS))):
            out["length_hist"][LENGTH_LABELS[k]] = int(n)
    if "language" in df.columns:
        counts = df["language"].fillna("?").value_counts()
        counts = counts.to_pandas() if hasattr(counts, "to_pandas") else counts
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


def merge_read(reports: list[dict]) -> dict:
    total: dict = {"files": 0, "docs": 0, "bytes": 0, "compressed_bytes": 0, "blank_lines": 0,
                   "files_corrupt": 0, "text_bytes": 0, "rejected": {}, "seconds": 0.0}
    for r in reports:
        _add(total, r.get("read", {}))
    total["rejected"] = dict(sorted(total["rejected"].items()))
    return total


def merge_stages(reports: list[dict], stages: list, positions: tuple,
                 backend: str = "pandas") -> list[dict]:
    merged = []
    for pos, st in zip(positions, stages):
        entry = {"position": pos, "stage": st.stage_name, "kind": st.kind,
                 "params": st.params(), "docs_in": 0, "docs_out": 0, "bytes_in": 0,
                 "bytes_out": 0, "drops": Counter(), "counters": Counter(), "seconds": 0.0,
                 "backend": st.runs_on(backend), "device_seconds": 0.0}
        for r in reports:
            for s in r.get("stages", []):
                if s["position"] == pos:
                    for key in ("docs_in", "docs_out", "bytes_in", "bytes_out", "seconds"):
                        entry[key] += s[key]
                    entry["device_seconds"] += s.get("device_seconds", 0.0)
                    entry["drops"].update(s["drops"])
                    entry["counters"].update(s["counters"])
                    for k, (a, b) in s.get("by_source", {}).items():
                        got = entry.setdefault("by_source", {}).setdefault(k, [0, 0])
                        got[0] += a
                        got[1] += b
        if "by_source" in entry:
            entry["by_source"] = {k: {"docs_in": a, "docs_out": b}
                                  for k, (a, b) in sorted(entry["by_source"].items())}
        entry["drops"] = dict(sorted(entry["drops"].items()))
        entry["counters"] = dict(sorted(entry["counters"].items()))
        entry["seconds"] = round(entry["seconds"], 4)
        entry["device_seconds"] = round(entry["device_seconds"], 4)
        merged.append(entry)
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
