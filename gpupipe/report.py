"""The run report: ``<run>/report.html``, one self-contained page (inline SVG, no script, no
network) built from ``run.json``, the per-partition stats, the dedup audit and the shard
manifest. Every run writes it; ``gpupipe report RUN_DIR`` rebuilds it.

It summarises rather than lists, so it stays readable for 10^5 partitions: the slowest
partitions are the top 10, the dedup components the largest 10.
"""

from __future__ import annotations

import glob
import html
import json
import os

import yaml

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:2px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}pre{background:#f6f6f6;
padding:.6em;font-size:12px;overflow:auto}.note{color:#666;font-size:12px}"""


def _e(x) -> str:
    return html.escape(str(x))


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def bar_chart(title: str, items: list[tuple[str, float]], unit: str = "") -> str:
    """Horizontal bars as inline SVG (one ``rect`` per item)."""
    if not items:
        return f'<p class="note">{_e(title)}: nothing to show</p>'
    top = max(v for _, v in items) or 1
    h, label_w, bar_w = 18, 230, 420
    parts = [f'<svg class="plot" role="img" aria-label="{_e(title)}" width="{label_w + bar_w + 120}"'
             f' height="{h * len(items) + 24}">',
             f'<text x="0" y="12" font-size="12" font-weight="bold">{_e(title)}</text>']
    for k, (name, v) in enumerate(items):
        y = 20 + k * h
        w = max(1.0, bar_w * v / top)
        parts.append(f'<text x="0" y="{y + 12}" font-size="11">{_e(name[:34])}</text>'
                     f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{h - 5}" '
                     f'fill="#4a7ebb"/><text x="{label_w + w + 4:.1f}" y="{y + 12}" '
                     f'font-size="11">{v:,.4g}{_e(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _stats_seconds(run_dir: str) -> list[tuple[str, float]]:
    out = []
    for f in glob.glob(os.path.join(run_dir, "stats", "*", "part-*.json")):
        try:
            with open(f, encoding="utf-8") as fh:
                r = json.load(fh)
        except (OSError, ValueError):
            continue
        seg = os.path.basename(os.path.dirname(f))
        out.append((f"{seg} #{r.get('partition', '?')}", float(r.get("seconds", 0.0))))
    return sorted(out, key=lambda x: -x[1])[:10]


#: partitions of the output read for the length and language charts (evenly spread): a
#: report of a 10^5-partition run must not re-read the whole output
SAMPLE_PARTITIONS = 16
#: dedup audits larger than this are not read for the cluster table
MAX_AUDIT_ROWS = 2_000_000


def _sampled_outputs(run_dir: str) -> tuple[list[str], int]:
    files = sorted(glob.glob(os.path.join(run_dir, "data", "part-*.parquet")))
    if len(files) <= SAMPLE_PARTITIONS:
        return files, len(files)
    step = len(files) / SAMPLE_PARTITIONS
    return [files[int(k * step)] for k in range(SAMPLE_PARTITIONS)], len(files)


def _lengths(run_dir: str) -> list[tuple[str, float]]:
    """Documents per text length bucket (characters) in the output (sampled partitions)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    edges = [0, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, float("inf")]
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for f in _sampled_outputs(run_dir)[0]:
        n = pc.utf8_length(pq.read_table(f, columns=["text"])["text"]).to_numpy(
            zero_copy_only=False)
        counts += np.histogram(n, bins=edges)[0]
    names = [f"{int(a):,}–{int(b):,}" if b != float("inf") else f"{int(a):,}+"
             for a, b in zip(edges[:-1], edges[1:])]
    return [(k, float(c)) for k, c in zip(names, counts)]


def _languages(run_dir: str) -> list[tuple[str, float]]:
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    for f in _sampled_outputs(run_dir)[0]:
        if "language" not in pq.read_schema(f).names:
            return []
        for lang in pq.read_table(f, columns=["language"])["language"].to_pylist():
            counts[lang or "?"] = counts.get(lang or "?", 0) + 1
    return sorted(((k, float(v)) for k, v in counts.items()), key=lambda x: -x[1])[:15]


def _components(run_dir: str) -> list[list]:
    import pyarrow.parquet as pq

    audit = os.path.join(run_dir, "dedup", "duplicates.parquet")
    if not os.path.isdir(audit):
        return []
    files = sorted(glob.glob(os.path.join(audit, "*.parquet")))
    if sum(pq.read_metadata(f).num_rows for f in files) > MAX_AUDIT_ROWS:
        return []   # summarised by the counters in run.json; the audit is there to query
    sizes: dict = {}
    for f in files:
        t = pq.read_table(f, columns=["id", "duplicate_of", "component"]) \
            if "component" in pq.read_schema(f).names else pq.read_table(f)
        if "component" not in t.column_names:
            continue
        for comp, kept, doc in zip(t["component"].to_pylist(), t["duplicate_of"].to_pylist(),
                                   t["id"].to_pylist()):
            entry = sizes.setdefault(comp, [0, kept, doc])
            entry[0] += 1
    top = sorted(sizes.items(), key=lambda x: (-x[1][0], str(x[0])))[:10]
    return [[n + 1, kept, doc] for _, (n, kept, doc) in top]


def render(run_dir: str) -> str:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        s = json.load(f)
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>gpupipe run "
           f"{_e(s.get('pipeline', {}).get('name', ''))}</title><style>{_CSS}</style></head><body>",
           f"<h1>gpupipe run: {_e(s.get('pipeline', {}).get('name', ''))}</h1>",
           f"<p>{_e(s.get('status'))} · {_e(s.get('started'))} → {_e(s.get('finished', ''))} · "
           f"{s.get('seconds', 0):,.1f} s · backend {_e((s.get('backend') or {}).get('used'))}"
           f"</p>"]
    stages = s.get("stages", [])
    read = s.get("read", {})
    acc = s.get("accounting", {})
    out.append("<h2>Documents and bytes per stage</h2>")
    funnel = [("read", float(read.get("docs", 0)))] + [
        (f"{st['position']}: {st['stage']}", float(st["docs_out"])) for st in stages]
    out.append(bar_chart("documents after each stage", funnel))
    out.append(bar_chart("MB after each stage", [("read", read.get("text_bytes", 0) / 1e6)] + [
        (f"{st['position']}: {st['stage']}", st["bytes_out"] / 1e6) for st in stages], " MB"))
    out.append(_table(["stage", "docs in", "docs out", "kept", "MB out", "seconds"],
                      [[f"{st['position']}: {st['stage']}", f"{st['docs_in']:,}",
                        f"{st['docs_out']:,}", f"{st['docs_out'] / st['docs_in']:.1%}"
                        if st["docs_in"] else "", f"{st['bytes_out'] / 1e6:.2f}",
                        f"{st['seconds']:.2f}"] for st in stages]))
    out.append(f"<p>records in {acc.get('records_in', 0):,} = kept {acc.get('docs_out', 0):,} + "
               f"dropped {acc.get('dropped', 0):,} + rejected {acc.get('rejected', 0):,} "
               f"({'balanced' if acc.get('balanced') else 'NOT balanced'})</p>")
    out.append("<h2>Drop reasons</h2>")
    for st in stages:
        if st.get("drops"):
            out.append(bar_chart(f"{st['position']}: {st['stage']}",
                                 sorted(((k, float(v)) for k, v in st["drops"].items()),
                                        key=lambda x: -x[1])))
    if read.get("rejected"):
        out.append(bar_chart("read: set aside", [(k, float(v)) for k, v in
                                                 read["rejected"].items()]))
    used, total = _sampled_outputs(run_dir)
    out.append("<h2>Output: text lengths and languages</h2>")
    if len(used) < total:
        out.append(f'<p class="note">from {len(used)} of {total:,} output partitions, evenly '
                   f'spread</p>')
    out.append(bar_chart("documents by length (characters)", _lengths(run_dir)))
    langs = _languages(run_dir)
    if langs:
        out.append(bar_chart("documents by language", langs))
    comps = _components(run_dir)
    if comps:
        out.append("<h2>Largest duplicate clusters</h2>")
        fuzzy = next((st for st in stages if st["stage"] == "fuzzy_dedup"), None)
        if fuzzy:
            c = fuzzy.get("counters", {})
            out.append(f"<p>components {c.get('components', 0):,}; size p50 "
                       f"{c.get('component_size_p50')}, p90 {c.get('component_size_p90')}, "
                       f"p99 {c.get('component_size_p99')}, max {c.get('component_size_max')}"
                       f"</p>")
        out.append(_table(["documents", "kept", "a removed one"], comps))
    shards = s.get("shards")
    if shards:
        out.append("<h2>Shards</h2>")
        out.append(bar_chart("tokens per split", [(k, float(v["tokens"])) for k, v in
                                                  shards.get("totals", {}).items()]))
        try:
            with open(os.path.join(shards["directory"], "manifest.json"), encoding="utf-8") as f:
                man = json.load(f)
            per = [(x["prefix"], float(x["tokens"])) for x in man["shards"]]
            out.append(bar_chart("tokens per shard (largest 20)",
                                 sorted(per, key=lambda x: -x[1])[:20]))
        except (OSError, ValueError, KeyError):
            pass
    out.append("<h2>Time</h2>")
    out.append(bar_chart("seconds per stage", [(f"{st['position']}: {st['stage']}",
                                                float(st["seconds"])) for st in stages], " s"))
    out.append(bar_chart("slowest partitions", _stats_seconds(run_dir), " s"))
    out.append("<h2>Pipeline and versions</h2>")
    out.append(f"<pre>{_e(yaml.safe_dump(s.get('pipeline', {}), sort_keys=False))}</pre>")
    out.append(_table(["package", "version"], sorted((s.get("versions") or {}).items())))
    out.append("</body></html>")
    return "\n".join(out)


def write_report(run_dir: str) -> str:
    """Write ``<run_dir>/report.html``; returns its path."""
    from gpupipe.io.writer import write_bytes

    path = os.path.join(run_dir, "report.html")
    write_bytes(render(run_dir).encode("utf-8"), path)
    return path
