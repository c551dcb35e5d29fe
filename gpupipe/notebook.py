"""Jupyter: HTML views of a pipeline, a stage, a run and its report (`gpupipe.views.html`).

The HTML is plain tables (no script, no external style), so it renders the same in Jupyter,
VS Code and a static export. ``Pipeline.preview`` and `gpupipe.explain_document` are in
`gpupipe.preview`; progress bars in `gpupipe.runner.progress`.
"""

from __future__ import annotations

import dataclasses
import html
import os
from typing import Any

from gpupipe import views

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


def report_html(view) -> str:
    """A run's ``report.html`` (`gpupipe.result.ReportView`) in a notebook cell: the page goes
    into an ``<iframe srcdoc>``, so its styles stay out of the notebook, and nothing is
    fetched."""
    try:
        with open(view.path, encoding="utf-8") as f:
            page = f.read()
    except OSError as e:
        run_dir = os.path.dirname(os.path.abspath(view.path))
        why = html.escape(e.strerror or type(e).__name__)
        return (f"<p>no report at {html.escape(view.path)} ({why}): <code>gpupipe report "
                f"{html.escape(run_dir)}</code> rebuilds it</p>")
    return (f'<iframe class="gpupipe-report" title="gpupipe run report" '
            f'srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:'
            f'{view.height}px;border:1px solid #ddd"></iframe>')


def register() -> None:
    """Register these views as `gpupipe.views.html` (the package face does it lazily)."""
    from gpupipe.pipeline import Pipeline
    from gpupipe.result import ReportView, RunResult
    from gpupipe.stages.base import Stage

    for cls, fn in ((Stage, stage_html), (Pipeline, pipeline_html), (RunResult, result_html),
                    (ReportView, report_html)):
        views.html.register(cls, fn)
