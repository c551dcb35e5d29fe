#!/usr/bin/env python
"""Quality filters, language id and PII redaction: gpupipe vs datatrove 0.10 on the same
documents, in one process. Prints JSON.

    python benchmarks/bench_filters.py [--scale 2] [--partition 2000]

Documents: the sample corpus (``data/sample``), repeated ``--scale`` times. For each filter pair:

* ``agreement``: share of documents where both keep or both drop; ``same_reason``: share where
  the decision and the reason match; for c4 also ``same_text`` (kept documents rewritten to the
  same text);
* ``docs_per_s`` / ``mb_per_s`` for both, one thread each (gpupipe's stage on pandas partitions of
  ``--partition`` documents, datatrove's ``filter`` one document at a time);
  ``ratio`` = datatrove seconds / gpupipe seconds.
* ``word_tokenizer``: gpupipe's compiled word tokenizer vs spaCy's (what datatrove uses): tokens
  identical per document and throughput ratio.
* ``language_id``: gpupipe's compiled py3langid vs ``py3langid`` classify per document (same
  model): agreement, speed ratio, and accuracy of both against the ``lang`` labels of the
  multilingual documents (Debian history in ten languages, release dedications).
* ``pii_redact``: docs/s with all nine kinds, and with e-mail + IPv4 only against datatrove's
  ``PIIFormatter`` (which looks for those two) where installed.

``--whole-run`` instead times what a user runs: ``gpupipe run`` (CLI, embedded cluster of
``--workers`` workers) of gopher_repetition + gopher_quality against datatrove's
``LocalPipelineExecutor`` (JsonlReader, the same two filters, JsonlWriter; ``--workers`` tasks)
on the same JSONL files, each in a new process, wall time from start to exit. It reports both
times, MB/s and docs/s, the ratio and the keep/drop agreement of the two outputs.

datatrove is optional: ``pip install "datatrove==0.10.1" "xxhash<4" spacy regex orjson``; without
it only gpupipe's throughput is reported.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# datatrove reason -> gpupipe reason (gopher_quality); the others use the same names
GOPHER_QUALITY_REASONS = {
    "gopher_short_doc": "too_few_words", "gopher_long_doc": "too_many_words",
    "gopher_below_avg_threshold": "short_mean_word_length",
    "gopher_above_avg_threshold": "long_mean_word_length",
    "gopher_too_many_hashes": "too_many_hashes", "gopher_too_many_ellipsis": "too_many_ellipses",
    "gopher_too_many_bullets": "too_many_bullet_lines",
    "gopher_too_many_end_ellipsis": "too_many_ellipsis_lines",
    "gopher_below_alpha_threshold": "too_few_alpha_words",
    "gopher_enough_stop_words": "too_few_stop_words",
}


def load(scale: int) -> list[dict]:
    recs = [json.loads(line) for f in sorted(glob.glob(str(REPO / "data/sample/*.jsonl.gz")))
            for line in gzip.open(f, "rt", encoding="utf-8")]
    return [{**r, "id": f"{r['id']}#{k}"} for k in range(scale) for r in recs]


def frames(records, size: int):
    import pandas as pd

    from gpupipe.frame import STRING

    out = []
    for a in range(0, len(records), size):
        part = records[a: a + size]
        out.append(pd.DataFrame({"id": pd.array([r["id"] for r in part], dtype=STRING),
                                 "text": pd.array([r["text"] for r in part], dtype=STRING)}))
    return out


def run_ours(stage, parts):
    """(reasons per document or None, rewritten texts, seconds) with mode=annotate."""
    import pandas as pd

    annotate = stage.__class__(**{**stage.params(), "mode": "annotate"})
    annotate.process(parts[0].head(8))  # compile the kernels outside the timing
    t0 = time.perf_counter()
    results = [annotate.process(p) for p in parts]
    seconds = time.perf_counter() - t0
    col = annotate.reason_column
    reasons = [None if pd.isna(v) else v for r in results for v in r.frame[col]]
    texts = [t for r in results for t in r.frame["text"]]
    return reasons, texts, seconds


def run_datatrove(flt, texts, rename=None):
    from datatrove.data import Document

    reasons, out = [], []
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        r = flt.filter(doc)
        reasons.append(None if r is True else (rename or {}).get(r[1], r[1]) if isinstance(
            r, tuple) else "dropped")
        out.append(doc.text)
    return reasons, out, time.perf_counter() - t0


def compare(name, stage, dt_filter, parts, texts, mb, rename=None, check_text=False):
    ours, our_texts, t_ours = run_ours(stage, parts)
    entry = {"docs": len(texts), "gpupipe": {"seconds": round(t_ours, 4),
                                             "docs_per_s": round(len(texts) / t_ours),
                                             "mb_per_s": round(mb / t_ours, 2)},
             "kept": {"gpupipe": sum(r is None for r in ours)}}
    if dt_filter is None:
        return entry
    theirs, their_texts, t_dt = run_datatrove(dt_filter, texts, rename)
    n = len(texts)
    entry["datatrove"] = {"seconds": round(t_dt, 3), "docs_per_s": round(n / t_dt),
                          "mb_per_s": round(mb / t_dt, 3)}
    entry["kept"]["datatrove"] = sum(r is None for r in theirs)
    entry["agreement"] = round(sum((a is None) == (b is None) for a, b in zip(ours, theirs)) / n, 4)
    entry["same_reason"] = round(sum(a == b for a, b in zip(ours, theirs)) / n, 4)
    entry["ratio"] = round(t_dt / t_ours, 1)
    if check_text:
        both = [(a, b) for a, b, ra, rb in zip(our_texts, their_texts, ours, theirs)
                if ra is None and rb is None]
        entry["same_text"] = round(sum(a == b for a, b in both) / max(len(both), 1), 4)
    return entry


def bench_tokenizer(texts, mb):
    from gpupipe.kernels.words import tokenize_texts

    tokenize_texts(texts[:8])
    t0 = time.perf_counter()
    ours = tokenize_texts(texts)
    t_ours = time.perf_counter() - t0
    entry = {"gpupipe_mb_per_s": round(mb / t_ours, 2)}
    try:
        from datatrove.utils.word_tokenizers import load_word_tokenizer
    except ImportError:
        return entry
    tok = load_word_tokenizer("en")
    tok.word_tokenize("warm up")
    t0 = time.perf_counter()
    theirs = [tok.word_tokenize(t) for t in texts]
    t_sp = time.perf_counter() - t0
    entry.update({
        "spacy_mb_per_s": round(mb / t_sp, 3), "ratio": round(t_sp / t_ours, 1),
        "same_tokens_docs": round(sum(a == b for a, b in zip(ours, theirs)) / len(texts), 4),
        "token_count_ratio": round(sum(map(len, ours)) / max(sum(map(len, theirs)), 1), 4)})
    return entry


def bench_language(records, parts, mb):
    import py3langid.langid as pl

    from gpupipe.stages import LanguageId

    stage = LanguageId()
    stage.process(parts[0].head(8))
    t0 = time.perf_counter()
    ours = [lang for p in parts for lang in stage.process(p).frame["language"]]
    t_ours = time.perf_counter() - t0
    ident = pl.LanguageIdentifier.from_model_file(pl.MODEL_FILE, norm_probs=True)
    t0 = time.perf_counter()
    theirs = [ident.classify(r["text"])[0] for r in records]
    t_ref = time.perf_counter() - t0
    gold = [r["lang"].split("_")[0] for r in records]
    multi = [i for i, g in enumerate(gold) if g != "en"]

    def acc(pred, idx):
        return round(sum(pred[i] == gold[i] for i in idx) / len(idx), 4)

    everything = range(len(records))
    return {"docs": len(records), "gpupipe": {"seconds": round(t_ours, 3),
                                              "docs_per_s": round(len(records) / t_ours),
                                              "mb_per_s": round(mb / t_ours, 2)},
            "py3langid": {"seconds": round(t_ref, 3), "docs_per_s": round(len(records) / t_ref)},
            "ratio": round(t_ref / t_ours, 1),
            "agreement": round(sum(a == b for a, b in zip(ours, theirs)) / len(records), 4),
            "accuracy": {"gpupipe_all": acc(ours, everything), "gpupipe_non_english": acc(ours, multi),
                         "py3langid_all": acc(theirs, everything),
                         "non_english_docs": len(multi),
                         "languages": len({gold[i] for i in everything})}}


def bench_pii(parts, texts, mb):
    from gpupipe.stages import PiiRedact

    stage = PiiRedact()
    stage.process(parts[0].head(8))
    t0 = time.perf_counter()
    counters: dict = {}
    for p in parts:
        for k, v in stage.process(p).counters.items():
            counters[k] = counters.get(k, 0) + v
    t_ours = time.perf_counter() - t0
    entry = {"gpupipe": {"seconds": round(t_ours, 3), "docs_per_s": round(len(texts) / t_ours),
                         "mb_per_s": round(mb / t_ours, 2)}, "counters": counters}
    try:
        from datatrove.pipeline.formatters import PIIFormatter
    except ImportError:
        return entry
    fmt = PIIFormatter()
    t0 = time.perf_counter()
    for t in texts:
        fmt.format(t)
    t_dt = time.perf_counter() - t0
    same = PiiRedact(entities=("email", "ipv4"))  # what the formatter looks for
    t0 = time.perf_counter()
    for p in parts:
        same.process(p)
    t_same = time.perf_counter() - t0
    entry["datatrove_pii_formatter"] = {"seconds": round(t_dt, 3),
                                        "docs_per_s": round(len(texts) / t_dt),
                                        "entities": "email, ipv4"}
    entry["gpupipe_email_ipv4"] = {"seconds": round(t_same, 3),
                                   "docs_per_s": round(len(texts) / t_same)}
    entry["ratio_vs_formatter_all_kinds"] = round(t_dt / t_ours, 1)
    entry["ratio_vs_formatter_same_kinds"] = round(t_dt / t_same, 1)
    return entry


def write_corpus(records, directory: Path, files: int = 8) -> float:
    """The records as ``files`` JSONL files; MB written."""
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        with open(directory / f"part-{k:03d}.jsonl", "w", encoding="utf-8") as f:
            for r in records[k::files]:
                f.write(json.dumps({"id": r["id"], "text": r["text"]}, ensure_ascii=False) + "\n")
    return sum(p.stat().st_size for p in directory.iterdir()) / 1e6


DATATROVE_RUN = """
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
LocalPipelineExecutor(pipeline=[JsonlReader({src!r}), GopherRepetitionFilter(),
                                GopherQualityFilter(), JsonlWriter({out!r})],
                      tasks={n}, workers={n}, logging_dir={logs!r}).run()
"""


def bench_whole_run(records, workers: int, have_dt: bool) -> dict:
    """`gpupipe run` of the Gopher pair vs datatrove's executor, on the same files."""
    import shutil
    import subprocess
    import tempfile

    import pyarrow.parquet as pq

    root = Path(tempfile.mkdtemp(prefix="gpupipe-wholerun-"))
    try:
        mb = write_corpus(records, root / "in")
        (root / "p.yaml").write_text(
            "version: 1\nname: gopher_pair\n"
            f"input: {{format: jsonl, path: {root / 'in'}, id_column: id}}\n"
            "stages:\n  - stage: gopher_repetition\n  - stage: gopher_quality\n"
            f"output: {{path: {root / 'gp'}}}\n")
        gpupipe = [sys.executable, "-m", "gpupipe.cli", "run", str(root / "p.yaml"),
                   "--workers", str(workers), "--overwrite", "--no-progress"]
        t0 = time.perf_counter()
        r = subprocess.run(gpupipe, capture_output=True, text=True, cwd=REPO)
        t_gp = time.perf_counter() - t0
        if r.returncode:
            raise SystemExit(f"gpupipe run failed:\n{r.stderr[-3000:]}")
        ours = set(pq.read_table(root / "gp" / "data", columns=["id"])["id"].to_pylist())
        n = len(records)
        entry = {"docs": n, "mb": round(mb, 1), "workers": workers,
                 "gpupipe": {"seconds": round(t_gp, 2), "mb_per_s": round(mb / t_gp, 2),
                             "docs_per_s": round(n / t_gp), "kept": len(ours)}}
        if not have_dt:
            return entry
        code = DATATROVE_RUN.format(src=str(root / "in"), out=str(root / "dt"), n=workers,
                                    logs=str(root / "dt-logs"))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        t_dt = time.perf_counter() - t0
        if r.returncode:
            raise SystemExit(f"datatrove failed:\n{r.stderr[-3000:]}")
        theirs = {json.loads(line)["id"] for f in (root / "dt").glob("*.jsonl.gz")
                  for line in gzip.open(f, "rt", encoding="utf-8")}
        entry["datatrove"] = {"seconds": round(t_dt, 2), "mb_per_s": round(mb / t_dt, 3),
                              "docs_per_s": round(n / t_dt), "kept": len(theirs)}
        entry["ratio"] = round(t_dt / t_gp, 1)
        entry["agreement"] = round(1 - len(ours ^ theirs) / n, 4)
        return entry
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--partition", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=None,
                    help="--whole-run: workers of gpupipe and tasks of datatrove (default 2); "
                         "otherwise unused (one thread each)")
    ap.add_argument("--whole-run", action="store_true",
                    help="time gpupipe run against datatrove's executor on the Gopher pair")
    args = ap.parse_args()

    from gpupipe.stages import C4Quality, FineWebQuality, GopherQuality, GopherRepetition

    records = load(args.scale)
    texts = [r["text"] for r in records]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    parts = frames(records, args.partition)
    try:
        from datatrove.pipeline.filters import (
            C4QualityFilter,
            FineWebQualityFilter,
            GopherQualityFilter,
            GopherRepetitionFilter,
        )
        have_dt = True
    except ImportError:
        have_dt = False

    if args.whole_run:
        report = {"whole_run": bench_whole_run(records, args.workers or 2, have_dt)}
        print(json.dumps(report, indent=2))
        return 0
    report = {"documents": len(texts), "mb": round(mb, 2), "datatrove": have_dt, "filters": {}}
    pairs = [
        ("gopher_quality", GopherQuality(), have_dt and GopherQualityFilter(),
         GOPHER_QUALITY_REASONS, False),
        ("gopher_repetition", GopherRepetition(), have_dt and GopherRepetitionFilter(), None,
         False),
        ("fineweb_quality", FineWebQuality(), have_dt and FineWebQualityFilter(), None, False),
        ("c4_quality", C4Quality(), have_dt and C4QualityFilter(), None, True),
    ]
    for name, stage, dt_filter, rename, check_text in pairs:
        report["filters"][name] = compare(name, stage, dt_filter or None, parts, texts, mb,
                                          rename, check_text)
    report["word_tokenizer"] = bench_tokenizer(texts, mb)
    report["language_id"] = bench_language(records, parts, mb)
    report["pii_redact"] = bench_pii(parts, texts, mb)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
