"""Seeing what a pipeline does before running it: `preview` (every filter's verdict and its
measures on a sample, in this process) and `explain_document` (one text, stage by stage). Both
walk the row-local stages as a run's tasks do (`gpupipe.runner.walk`), dropping nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpupipe.frame import ID, STRING, TEXT
from gpupipe.runner.walk import walk
from gpupipe.stages.sources import ForSource


def _previewed(p) -> list[tuple[int, object]]:
    """The stages a preview runs: the row-local ones, without the sink (tokenize)."""
    return [(pos, st) for pos, st in enumerate(p.all_stages())
            if st.kind == "row" and not st.is_sink]


def _label(st, pos: int, names: list[str]) -> str:
    label = st.stage_name if names.count(st.stage_name) == 1 else f"{st.stage_name}-{pos}"
    return f"{st.source}: {label}" if isinstance(st, ForSource) else label


def preview(p, n: int = 200, seed: int = 0, path: str | None = None) -> pd.DataFrame:
    """The row-local stages on a sample of ``n`` documents, in this process, without dropping
    anything: one column per filter with ``keep`` or the reason it would drop the document
    (stages see every document, as in annotate mode), the transforms' rewrites and the
    annotations (language, scores). Global stages (dedup, repartition) and the sink (tokenize)
    are left out: they need the whole dataset. The draw is seeded; ``path`` previews other
    files."""
    from gpupipe.runner.sources import make_pipeline_source, make_source
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
    names = [st.stage_name for st in p.all_stages()]
    verdicts, measured = {}, {}
    for v in walk(_previewed(p), df, look=True):
        if v.look is not None:
            label = _label(v.stage, v.position, names)
            measured[label] = v.look.measures(v.frame_in)
            reason = v.result.frame[v.look.reason_column]
            verdicts[label] = reason.astype(object).where(reason.notna(), "keep")
        df = v.frame_out
    out = df.copy()
    for name, verdict in verdicts.items():
        out[name] = verdict.to_numpy()
        for m, values in measured.get(name, {}).items():
            out[f"{name}.{m}"] = np.asarray(values)
    labels = list(verdicts)
    if labels:   # what the run does: the first filter that fails drops the document
        out["verdict"] = [next((f"{c}: {out[c].iloc[k]}" for c in labels
                                if out[c].iloc[k] != "keep"), "keep")
                          for k in range(len(out))]
    return out


def explain_document(p, text: str, id: str = "doc") -> pd.DataFrame:
    """For one text, stage by stage: every measure a filter computes, the parameters that
    bound it and the verdict; transforms show whether they changed the text. A pandas
    DataFrame with columns stage, measure, value, bound, verdict. A source's own stage treats
    the text as its source's."""
    df = pd.DataFrame({ID: pd.array([id], dtype=STRING), TEXT: pd.array([text], dtype=STRING)})
    stages = p.all_stages()
    names = [st.stage_name for st in stages]
    visits = {v.position: v for v in walk(
        [(pos, getattr(st, "inner", st)) for pos, st in _previewed(p)], df, look=True)}
    rows = []
    for pos, st in enumerate(stages):
        v = visits.get(pos)
        if v is None:
            rows.append([st.stage_name, "", None, "", "not previewed (needs the whole dataset)"
                         if st.kind != "row" else "not previewed"])
            continue
        if v.look is None:
            rows.append([st.stage_name, "text changed",
                         v.frame_out[TEXT].iloc[0] != v.frame_in[TEXT].iloc[0], "", "transform"])
            continue
        label = _label(v.stage, pos, names)   # the inner stage: no source prefix
        reason = v.result.frame[v.look.reason_column].iloc[0]
        verdict = "keep" if pd.isna(reason) else f"drop: {reason}"
        measures = v.look.measures(v.frame_in)
        params = v.look.params()
        for m, values in measures.items():
            bound = ", ".join(f"{'>=' if kind == 'min' else '<='} {params.get(name)} ({name})"
                              for name, kind in v.look.bounds.get(m, ())
                              if params.get(name) is not None)
            rows.append([label, m, float(values[0]), bound, verdict])
        if not measures:
            rows.append([label, "", None, "", verdict])
    return pd.DataFrame(rows, columns=["stage", "measure", "value", "bound", "verdict"])
