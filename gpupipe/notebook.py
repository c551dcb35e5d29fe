"""Jupyter: HTML views of a pipeline, a stage and a run, and ``Pipeline.preview``.

The HTML is plain tables (no script, no external style), so it renders the same in Jupyter,
VS Code and a static export.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any

_STYLE = ("border-collapse:collapse;font-family:monospace;font-size:12px",
          "border:1px solid #ccc;padding:2px 6px;text-align:left")


def _table(header: list[str], rows: list[list[Any]], caption: str = "") -> str:
    t, c = _STYLE
    head = "".join(f'<th style="{c}">{html.escape(str(h))}</th>' for h in header)
    body = "".join("<tr>" + "".join(f'<td style="{c}">{html.escape(str(v))}</td>' for v in r)
                   + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f'<table style="{t}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def stage_html(st) -> str:
    """A stage: its parameters (set ones marked), reason codes and summary."""
    from gpupipe.stages.base import field_default

    params = st.params()
    rows = []
    for f in dataclasses.fields(st):
        default = field_default(f)
        default = None if default is dataclasses.MISSING else default
        value = params.get(f.name)
        rows.append([f.name, value, "" if value == default else "set"])
    reasons = ", ".join(st.reasons) or "—"
    return (f"<div><b>{html.escape(st.stage_name)}</b> ({st.kind}) — "
            f"{html.escape(st.summary())}<br>drop reasons: {html.escape(reasons)}"
            + _table(["parameter", "value", ""], rows) + "</div>")


def pipeline_html(p) -> str:
    """A pipeline: its inputs, stages in order with the parameters set, output and plan."""
    inputs = [[name, spec.resolved_format(), ", ".join(spec.paths())]
              for name, spec in p.sources().items()]
    stages = [[k, st.describe()] for k, st in enumerate(p.all_stages())]
    plan = html.escape(p.explain())
    return (f"<div><b>pipeline {html.escape(p.name)}</b> → {html.escape(p.output.path)}"
            + _table(["input", "format", "path"], inputs)
            + _table(["#", "stage"], stages)
            + f"<details><summary>plan</summary><pre>{plan}</pre></details></div>")


def result_html(res) -> str:
    """A run: the document and byte funnel per stage, with the drops."""
    s = res.summary
    read = s["read"]
    rows = [["read", f"{read['docs'] + sum(read['rejected'].values()):,}", f"{read['docs']:,}",
             "", f"{read['bytes'] / 1e6:.2f}", f"{read['text_bytes'] / 1e6:.2f}",
             ", ".join(f"{k}={v}" for k, v in read["rejected"].items())]]
    for st in s["stages"]:
        kept = f"{st['docs_out'] / st['docs_in']:.1%}" if st["docs_in"] else ""
        rows.append([f"{st['position']}: {st['stage']}", f"{st['docs_in']:,}",
                     f"{st['docs_out']:,}", kept, f"{st['bytes_in'] / 1e6:.2f}",
                     f"{st['bytes_out'] / 1e6:.2f}",
                     ", ".join(f"{k}={v}" for k, v in st["drops"].items())])
    acc = s["accounting"]
    return (f"<div><b>run {html.escape(s['status'])}</b> in {s['seconds']:.1f} s → "
            f"{html.escape(res.data_path)}"
            + _table(["stage", "docs in", "docs out", "kept", "MB in", "MB out", "drops"], rows)
            + f"records in {acc['records_in']:,} = kept {acc['docs_out']:,} + dropped "
            f"{acc['dropped']:,} + rejected {acc['rejected']:,}</div>")


def preview(p, n: int = 200, seed: int = 0, path: str | None = None):
    """The row-local stages on a sample of ``n`` documents, in this process, without dropping
    anything: one column per filter with ``keep`` or the reason it would drop the document
    (stages see every document, as in annotate mode), the transforms' rewrites and the
    annotations (language, scores). Global stages (dedup, repartition) and tokenize are left
    out: they need the whole dataset. The draw is seeded; ``path`` previews other files."""
    import numpy as np
    import pandas as pd

    from gpupipe.runner.execute import make_pipeline_source, make_source
    from gpupipe.spec import InputSpec
    from gpupipe.stages.base import Filter

    source = make_source(InputSpec(path=path)) if path is not None else make_pipeline_source(p)
    rng = np.random.default_rng(seed)
    frames, seen = [], 0
    for i in rng.permutation(source.npartitions):
        frame = source.read(int(i)).frame
        frames.append(frame)
        seen += len(frame)
        if seen >= 4 * n:
            break
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(df) > n:
        df = df.iloc[np.sort(rng.choice(len(df), n, replace=False))].reset_index(drop=True)
    verdicts = {}
    names = [st.stage_name for st in p.all_stages()]
    for pos, st in enumerate(p.all_stages()):
        if st.kind != "row" or st.stage_name == "tokenize":
            continue
        inner = getattr(st, "inner", st)
        if isinstance(inner, Filter):
            look = dataclasses.replace(inner, mode="annotate") if inner.mode == "drop" else inner
            part = look.process(df).frame
            reason = part[look.reason_column]
            label = st.stage_name if names.count(st.stage_name) == 1 else f"{st.stage_name}-{pos}"
            verdicts[label] = reason.astype(object).where(reason.notna(), "keep")
            extra = [c for c in part.columns if c not in df.columns and c != look.reason_column]
            df = part.drop(columns=[look.reason_column]).assign(
                **{c: part[c] for c in extra}) if inner.mode == "drop" else part
        else:
            df = st.process(df).frame
    out = df.copy()
    for name, v in verdicts.items():
        out[name] = v.to_numpy()
    names = list(verdicts)
    if names:   # what the run does: the first filter that fails drops the document
        out["verdict"] = [next((f"{c}: {out[c].iloc[k]}" for c in names
                                if out[c].iloc[k] != "keep"), "keep")
                          for k in range(len(out))]
    return out
