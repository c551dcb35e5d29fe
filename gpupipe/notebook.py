"""Jupyter: HTML views of a pipeline, a stage and a run, and ``Pipeline.preview``.

The HTML is plain tables (no script, no external style), so it renders the same in Jupyter,
VS Code and a static export.
"""

from __future__ import annotations

import dataclasses
import html
import os
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
    df, verdicts, measured = _walk(p, df)
    out = df.copy()
    for name, v in verdicts.items():
        out[name] = v.to_numpy()
        for m, values in measured.get(name, {}).items():
            out[f"{name}.{m}"] = np.asarray(values)
    names = list(verdicts)
    if names:   # what the run does: the first filter that fails drops the document
        out["verdict"] = [next((f"{c}: {out[c].iloc[k]}" for c in names
                                if out[c].iloc[k] != "keep"), "keep")
                          for k in range(len(out))]
    return out


def _walk(p, df):
    """Every row-local stage of ``p`` on ``df`` in order, filters in annotate mode: (the frame
    after them, each filter's verdicts, each filter's measures)."""
    from gpupipe.stages.base import Filter

    verdicts, measured = {}, {}
    stages = p.all_stages()
    names = [st.stage_name for st in stages]
    for pos, st in enumerate(stages):
        if st.kind != "row" or st.stage_name == "tokenize":
            continue
        inner = getattr(st, "inner", st)
        if not isinstance(inner, Filter):
            df = st.process(df).frame
            continue
        label = st.stage_name if names.count(st.stage_name) == 1 else f"{st.stage_name}-{pos}"
        if st is not inner:   # a source's own stage: its verdicts count for that source only
            label = f"{st.source}: {label}"
        measured[label] = inner.measures(df)
        look = dataclasses.replace(inner, mode="annotate") if inner.mode == "drop" else inner
        part = look.process(df).frame
        reason = part[look.reason_column]
        if st is not inner:
            reason = reason.where(df["source"].to_numpy() == st.source, None)
        verdicts[label] = reason.astype(object).where(reason.notna(), "keep")
        df = part.drop(columns=[look.reason_column]) if inner.mode == "drop" else part
    return df, verdicts, measured


def explain_document(p, text: str, id: str = "doc"):
    """For one text, stage by stage: every measure a filter computes, the parameters that
    bound it and the verdict; transforms show whether they changed the text. A pandas
    DataFrame with columns stage, measure, value, bound, verdict."""
    import pandas as pd

    from gpupipe.frame import STRING
    from gpupipe.stages.base import Filter

    df = pd.DataFrame({"id": pd.array([id], dtype=STRING), "text": pd.array([text], dtype=STRING)})
    rows = []
    stages = p.all_stages()
    names = [st.stage_name for st in stages]
    for pos, st in enumerate(stages):
        if st.kind != "row" or st.stage_name == "tokenize":
            rows.append([st.stage_name, "", None, "", "not previewed (needs the whole dataset)"
                         if st.kind != "row" else "not previewed"])
            continue
        inner = getattr(st, "inner", st)   # a source's own stage: as if the text were its
        if not isinstance(inner, Filter):
            before = df["text"].iloc[0]
            df = inner.process(df).frame
            rows.append([st.stage_name, "text changed", df["text"].iloc[0] != before, "",
                         "transform"])
            continue
        label = st.stage_name if names.count(st.stage_name) == 1 else f"{st.stage_name}-{pos}"
        look = dataclasses.replace(inner, mode="annotate") if inner.mode == "drop" else inner
        measures = inner.measures(df)
        part = look.process(df).frame
        reason = part[look.reason_column].iloc[0]
        verdict = "keep" if pd.isna(reason) else f"drop: {reason}"
        params = inner.params()
        for m, values in measures.items():
            bound = ", ".join(f"{'>=' if kind == 'min' else '<='} {params.get(name)} ({name})"
                              for name, kind in inner.bounds.get(m, ())
                              if params.get(name) is not None)
            rows.append([label, m, float(values[0]), bound, verdict])
        if not measures:
            rows.append([label, "", None, "", verdict])
        df = part.drop(columns=[look.reason_column]) if inner.mode == "drop" else part
    return pd.DataFrame(rows, columns=["stage", "measure", "value", "bound", "verdict"])


class ReportView:
    """A run's ``report.html`` shown in a notebook cell: the page goes into an ``<iframe
    srcdoc>``, so its styles stay out of the notebook, and nothing is fetched."""

    def __init__(self, path: str, height: int = 720):
        self.path, self.height = path, height

    def __repr__(self) -> str:
        return f"report: {os.path.abspath(self.path)}"

    def _repr_html_(self) -> str:
        try:
            with open(self.path, encoding="utf-8") as f:
                page = f.read()
        except OSError as e:
            run_dir = os.path.dirname(os.path.abspath(self.path))
            why = html.escape(e.strerror or type(e).__name__)
            return (f"<p>no report at {html.escape(self.path)} ({why}): <code>gpupipe report "
                    f"{html.escape(run_dir)}</code> rebuilds it</p>")
        return (f'<iframe class="gpupipe-report" title="gpupipe run report" '
                f'srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:'
                f'{self.height}px;border:1px solid #ddd"></iframe>')
