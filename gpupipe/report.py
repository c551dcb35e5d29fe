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


def pair_chart(title: str, items: list[tuple[str, float, float]],
               names: tuple[str, str] = ("before", "after")) -> str:
    """Two distributions side by side as inline SVG: per label, one bar each, as a share of its
    own total (so a distribution of 10^6 documents read compares with one of 10^5 kept), with the
    count and the share written beside it."""
    if not items:
        return f'<p class="note">{_e(title)}: nothing to show</p>'
    totals = [sum(x[1] for x in items) or 1, sum(x[2] for x in items) or 1]
    top = max(max(a / totals[0], b / totals[1]) for _, a, b in items) or 1
    colors = ("#9bb7d9", "#2f5f9e")
    h, label_w, bar_w = 30, 150, 420
    parts = [f'<svg class="plot" role="img" aria-label="{_e(title)}" width="{label_w + bar_w + 150}"'
             f' height="{h * len(items) + 40}">',
             f'<text x="0" y="12" font-size="12" font-weight="bold">{_e(title)}</text>']
    for j, (name, color) in enumerate(zip(names, colors)):
        x = label_w + j * 150
        parts.append(f'<rect x="{x}" y="20" width="10" height="10" fill="{color}"/>'
                     f'<text x="{x + 14}" y="29" font-size="11">{_e(name)}</text>')
    for k, (label, *values) in enumerate(items):
        y = 36 + k * h
        parts.append(f'<text x="0" y="{y + 14}" font-size="11">{_e(label[:24])}</text>')
        for j, (v, color) in enumerate(zip(values, colors)):
            share = v / totals[j]
            w = max(1.0, bar_w * share / top)
            yy = y + 2 + j * 12
            parts.append(f'<rect x="{label_w}" y="{yy}" width="{w:.1f}" height="11" '
                         f'fill="{color}"/><text x="{label_w + w + 4:.1f}" y="{yy + 9}" '
                         f'font-size="10">{v:,.0f} ({share:.1%})</text>')
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
    """Documents per text length bucket (characters) in the output (sampled partitions), for
    run directories whose run.json predates ``output.length_hist``; the buckets are run.json's."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gpupipe.runner.stats import LENGTH_EDGES, LENGTH_LABELS

    counts = np.zeros(len(LENGTH_LABELS), dtype=np.int64)
    for f in _sampled_outputs(run_dir)[0]:
        n = pc.utf8_length(pq.read_table(f, columns=["text"])["text"]).to_numpy(
            zero_copy_only=False)
        counts += np.bincount(np.searchsorted(np.asarray(LENGTH_EDGES[1:]), n, side="right"),
                              minlength=len(LENGTH_LABELS))
    return [(k, float(c)) for k, c in zip(LENGTH_LABELS, counts)]


def _languages(run_dir: str) -> list[tuple[str, float]]:
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    for f in _sampled_outputs(run_dir)[0]:
        if "language" not in pq.read_schema(f).names:
            return []
        for lang in pq.read_table(f, columns=["language"])["language"].to_pylist():
            counts[lang or "?"] = counts.get(lang or "?", 0) + 1
    return sorted(((k, float(v)) for k, v in counts.items()), key=lambda x: -x[1])[:15]


#: the texts of the largest clusters are looked up in the dedup stage's input checkpoint when
#: it has at most this many partitions
MAX_TEXT_FILES = 4096
#: cluster sizes (documents, the kept one included) of the component-size histogram
SIZE_BUCKETS = ((2, 2), (3, 3), (4, 5), (6, 10), (11, 100), (101, None))


def _clusters(run_dir: str) -> tuple[dict, list[list]] | None:
    """(cluster -> [documents, kept id, a removed id, stage], the 10 largest) from the dedup
    audit; a cluster is a fuzzy component, or for exact dedup the copies of one kept document.
    None when there is no audit or it is too large to read for a report."""
    import pyarrow.parquet as pq

    audit = os.path.join(run_dir, "dedup", "duplicates.parquet")
    files = sorted(glob.glob(os.path.join(audit, "*.parquet")))
    if not files or sum(pq.read_metadata(f).num_rows for f in files) > MAX_AUDIT_ROWS:
        return None   # summarised by the counters in run.json; the audit is there to query
    sizes: dict = {}
    for f in files:
        t = pq.read_table(f)
        kept_ids = t["duplicate_of"].to_pylist()
        comps = (t["component"].to_pylist() if "component" in t.column_names
                 else [None] * len(kept_ids))
        stages = t["stage"].to_pylist() if "stage" in t.column_names else [None] * len(kept_ids)
        for comp, kept, doc, stage in zip(comps, kept_ids, t["id"].to_pylist(), stages):
            key = ("c", comp) if comp is not None else ("k", kept)
            entry = sizes.setdefault((stage, key), [1, kept, doc, stage])
            entry[0] += 1
    top = sorted(sizes.values(), key=lambda x: (-x[0], str(x[1])))[:10]
    return sizes, top


def _texts(run_dir: str, s: dict, wanted: dict[str, set]) -> dict:
    """Texts of the documents ``wanted`` ({stage: ids}), from the input checkpoint of each
    stage's segment (skipped when it has more than MAX_TEXT_FILES partitions or is gone)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    segs = s.get("segments", [])
    found: dict = {}
    for k, seg in enumerate(segs[1:], start=1):
        ids = set().union(*(wanted.get(name, set()) for name in seg["stages"]))
        files = sorted(glob.glob(os.path.join(run_dir, segs[k - 1]["directory"],
                                              "part-*.parquet")))
        if not ids or len(files) > MAX_TEXT_FILES:
            continue
        values = pa.array(sorted(ids), type=pa.large_string())
        for f in files:
            try:
                mask = pc.is_in(pq.read_table(f, columns=["id"])["id"].cast(pa.large_string()),
                                value_set=values)
                if not pc.any(mask).as_py():
                    continue
                t = pq.read_table(f, columns=["id", "text"]).filter(mask)
            except (OSError, ValueError, KeyError, pa.ArrowException):
                continue
            for i, text in zip(t["id"].to_pylist(), t["text"].to_pylist()):
                found.setdefault(i, text)
    return found


def _snippet(text) -> str:
    if text is None:
        return "—"
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 160 else flat[:157] + "…"


def _dedup_section(run_dir: str, s: dict) -> list[str]:
    stages = s.get("stages", [])
    dedup = [st for st in stages if st["stage"] in ("fuzzy_dedup", "exact_dedup")]
    if not dedup:
        return []
    out = ["<h2>Duplicates</h2>"]
    for st in dedup:
        c = st.get("counters", {})
        if "components" in c:
            out.append(f"<p>{st['position']}: {st['stage']}: components {c['components']:,}; "
                       f"size p50 {c.get('component_size_p50')}, p90 "
                       f"{c.get('component_size_p90')}, p99 {c.get('component_size_p99')}, "
                       f"max {c.get('component_size_max')}</p>")
    got = _clusters(run_dir)
    if got is None:
        out.append('<p class="note">no duplicates removed, or the audit '
                   '(dedup/duplicates.parquet) is too large to summarise here</p>')
        return out
    sizes, top = got
    hist = []
    for lo, hi in SIZE_BUCKETS:
        n = sum(1 for v in sizes.values() if v[0] >= lo and (hi is None or v[0] <= hi))
        hist.append((f"{lo}" if lo == hi else f"{lo}+" if hi is None else f"{lo}–{hi}",
                     float(n)))
    out.append(bar_chart("clusters by size (documents, the kept one included)", hist))
    wanted: dict[str, set] = {}
    for _, kept, doc, stage in top:   # the audit names a stage "<position>:<name>"
        wanted.setdefault(str(stage).split(":")[-1], set()).update((kept, doc))
    texts = _texts(run_dir, s, wanted)
    out.append("<p>The largest clusters (texts from the dedup stage's input):</p>")
    out.append(_table(["documents", "kept", "its text", "a removed one", "its text"],
                      [[n, kept, _snippet(texts.get(kept)), doc, _snippet(texts.get(doc))]
                       for n, kept, doc, _ in top]))
    return out


#: rows of the span table of the report
TOP_SPANS = 20


def _top_spans(run_dir: str) -> tuple[object, dict] | None:
    """The ``TOP_SPANS`` spans cut from the most documents per span_dedup stage (a frame: stage,
    hash, count, documents cut, bytes removed, text), and the bytes each stage's audit
    attributes to spans; None when there is no span audit or it is too large to read."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    audit = os.path.join(run_dir, "dedup", "spans.parquet")
    files = sorted(glob.glob(os.path.join(audit, "*.parquet")))
    if not files or sum(pq.read_metadata(f).num_rows for f in files) > MAX_AUDIT_ROWS:
        return None
    frame = pq.ParquetDataset(files).read(columns=["stage", "hash", "count", "id",
                                                   "bytes"]).to_pandas()
    if frame.empty:
        return None
    totals = frame.groupby("stage")["bytes"].sum().to_dict()
    per = (frame.groupby(["stage", "hash"], sort=False)
           .agg(count=("count", "max"), cut_from=("id", "nunique"), bytes=("bytes", "sum"))
           .reset_index())
    # counting: bloom counts nothing (null counts): those rank by the documents cut from
    per = (per.assign(_rank=per["count"].fillna(per["cut_from"]))
           .sort_values(["stage", "_rank", "bytes", "hash"], ascending=[True, False, False, True],
                        kind="stable")
           .drop(columns="_rank"))
    top = per.groupby("stage", sort=True).head(TOP_SPANS)
    wanted = set(top["hash"].tolist())
    texts: dict = {}
    for f in files:
        t = pq.read_table(f, columns=["hash", "text"])
        t = t.filter(pc.is_in(t["hash"], value_set=pa.array(sorted(wanted), pa.uint64())))
        for h, text in zip(t["hash"].to_pylist(), t["text"].to_pylist()):
            texts.setdefault(h, text)
    return top.assign(text=[texts.get(h) for h in top["hash"].tolist()]), totals


def _count(count) -> str:
    """A span's document count, or "n/a" where the stage counted with a Bloom filter."""
    return "n/a" if count != count else f"{int(count):,}"


def _spans_section(run_dir: str, s: dict) -> list[str]:
    stages = [st for st in s.get("stages", []) if st["stage"] == "span_dedup"]
    if not stages:
        return []
    out = ["<h2>Repeated spans</h2>"]
    for st in stages:
        c = st.get("counters", {})
        out.append(f"<p>{st['position']}: span_dedup: {c.get('spans_cut', 0):,} spans cut from "
                   f"{c.get('documents_cut', 0):,} of {c.get('documents', 0):,} documents, "
                   f"{c.get('bytes_cut', 0) / 1e6:,.2f} MB; " + (
                       f"counted with a Bloom filter of {c['bloom_bytes'] / 2**20:,.1f} MiB over "
                       f"{c.get('bloom_keys', 0):,} spans: a span seen nowhere else was cut with "
                       f"probability at most {c.get('bloom_fp_rate_bound', 0):.1e}</p>"
                       if "bloom_bytes" in c else
                       f"{c.get('repeated_spans', 0):,} of {c.get('distinct_spans', 0):,} "
                       f"distinct spans repeated</p>"))
    got = _top_spans(run_dir)
    if got is None:
        out.append('<p class="note">no span cut, or the audit (dedup/spans.parquet) is too '
                   'large to summarise here</p>')
        return out
    top, totals = got
    for stage, rows in top.groupby("stage", sort=True):
        total = totals.get(stage, 0) or 1
        out.append(f"<p>{_e(stage)}: the {len(rows)} most repeated spans (documents that have "
                   f"them; share of the bytes the stage cut):</p>")
        out.append(_table(["documents", "cut from", "bytes cut", "share", "text"],
                          [[_count(r.count), f"{r.cut_from:,}", f"{r.bytes:,}",
                            f"{r.bytes / total:.1%}", _snippet(r.text)]
                           for r in rows.itertuples()]))
    return out


def _distributions(run_dir: str, s: dict) -> list[str]:
    """Text lengths and languages of the documents read and of the output. Runs record both in
    run.json (every document, counted as it is read and written); for run directories from
    before that, the output alone is read back from at most 16 partitions."""
    read, output = s.get("read", {}), s.get("output", {})
    out = ["<h2>Text lengths and languages, before and after</h2>"]
    if "length_hist" not in output:
        used, total = _sampled_outputs(run_dir)
        if len(used) < total:
            out.append(f'<p class="note">from {len(used)} of {total:,} output partitions, '
                       f'evenly spread</p>')
        out.append(bar_chart("output documents by length (characters)", _lengths(run_dir)))
        langs = _languages(run_dir)
        if langs:
            out.append(bar_chart("output documents by language", langs))
        return out
    before = read.get("length_hist", {})
    after = output["length_hist"]
    out.append(pair_chart("documents by length (characters)",
                          [(k, float(before.get(k, 0)), float(v)) for k, v in after.items()],
                          (f"read ({read.get('docs', 0):,})", f"output ({output['docs']:,})")))
    lid = next((st for st in s.get("stages", []) if st["stage"] == "language_id"), None)
    seen = {k.removeprefix("language:"): v for k, v in (lid or {}).get("counters", {}).items()
            if k.startswith("language:")}
    kept = output.get("languages", {})
    if seen or kept:
        top = sorted(set(seen) | set(kept), key=lambda k: (-seen.get(k, 0), -kept.get(k, 0), k))
        rows = [(k, float(seen.get(k, 0)), float(kept.get(k, 0))) for k in top[:15]]
        rest = top[15:]
        if rest:
            rows.append((f"{len(rest)} others", float(sum(seen.get(k, 0) for k in rest)),
                         float(sum(kept.get(k, 0) for k in rest))))
        out.append(pair_chart("documents by language",
                              rows, (f"at {lid['position']}: language_id" if lid else "before",
                                     "output")))
    return out


def _records_section(read: dict) -> list[str]:
    """What a WARC input held: records by WARC-Type, the responses not kept by content type,
    and how many bodies needed charset detection (nothing for other formats)."""
    records = read.get("records")
    if not records:
        return []
    out = ["<h2>Input records</h2>",
           bar_chart("WARC records by type", sorted(((k, float(v)) for k, v in records.items()),
                                                    key=lambda x: -x[1]))]
    if read.get("skipped"):
        out.append(bar_chart("responses not kept (not HTML or text), by content type",
                             sorted(((k, float(v)) for k, v in read["skipped"].items()),
                                    key=lambda x: -x[1])))
    out.append(f"<p>{read.get('docs', 0):,} responses read as documents; "
               f"{read.get('charset_detected', 0):,} decoded with a detected charset (the "
               f"declared one was missing or wrong); "
               f"{sum(read.get('rejected', {}).values()):,} set aside (below).</p>")
    return out


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
    out += _records_section(read)
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
    out += _distributions(run_dir, s)
    out += _dedup_section(run_dir, s)
    out += _spans_section(run_dir, s)
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


def register() -> None:
    """Register `write_report` as `gpupipe.views.report` (what a finished run calls; the package
    face does it lazily)."""
    from gpupipe import views
    from gpupipe.result import RunResult

    views.report.register(RunResult, lambda result: write_report(result.output))


def write_report(run_dir: str) -> str:
    """Write ``<run_dir>/report.html``; returns its path."""
    from gpupipe.io.writer import write_bytes

    path = os.path.join(run_dir, "report.html")
    write_bytes(render(run_dir).encode("utf-8"), path)
    return path
