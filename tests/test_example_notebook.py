"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel),
so the notebook cannot rot: read → preview → explain a drop → tune a threshold → run (with the
notebook progress bar) → report → shards read back. Its numbers are checked against the run."""

from __future__ import annotations

import json
import re

import nbformat
from nbclient import NotebookClient

from gpupipe.shards.dataset import ShardSet
from tests.conftest import REPO

NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


def _outputs(cell) -> list[tuple[str, str, str]]:
    """(output type, text/plain or stream text, text/html) of every output of a cell."""
    out = []
    for o in cell.outputs:
        data = o.get("data", {})
        out.append((o.output_type, o.get("text", data.get("text/plain", "")),
                    data.get("text/html", "")))
    return out


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) == 11
    assert all(not c.outputs and c.execution_count is None for c in code)


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    out = tmp_path / "nb-run"
    monkeypatch.setenv("GPUPIPE_EXAMPLE_OUT", str(out))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    by_source = {c.source.splitlines()[0]: _outputs(c) for c in code}

    # preview: the default Gopher bound drops 124 of the 200 sampled documents for alpha words
    (_, counts, _), = by_source['pv = pipe.preview(n=200, seed=0)']
    assert re.search(r"gopher_quality: too_few_alpha_words\s+124\n", counts)
    # explain_document on the first such document: the verdict and the measure behind it
    (_, printed, _), (_, why, why_html) = by_source['doc = pv[pv["verdict"] == '
                                                   '"gopher_quality: too_few_alpha_words"].iloc[0]']
    assert printed.startswith("python-docs/howto/logging-cookbook.rst.txt#43\n")
    assert "alpha_words_ratio" in why and "0.582931" in why and "too_few_alpha_words" in why
    assert "<table" in why_html
    # tuning to 0.55 keeps 105 more of the sample
    (_, tuned, _), = by_source['tuned = gp.Pipeline.from_yaml("pipelines/english_web.yaml", '
                               'overrides=[']
    assert re.search(r"gopher_quality: too_few_alpha_words\s+124\s+19\n", tuned)

    # the run: progress lines in the cell (HTML <progress>, no ipywidgets), all tasks done
    run_outputs = by_source["result = tuned.run(workers=2)"]
    progress = [(text, markup) for kind, text, markup in run_outputs if kind == "display_data"]
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete"
    assert len(progress) >= 4
    assert all('class="gpupipe-progress"' in m and "<progress " in m for _, m in progress)
    assert all(re.search(r": (\d+)/\1 tasks \(100%", t) for t, _ in progress), progress
    assert progress[0][0].startswith("[0] read → normalize_text → language_id")
    assert progress[-1][0].startswith("[shards] write: ")
    docs = summary["output"]["docs"]
    assert run_outputs[-1][1] == (f"RunResult(output={str(out)!r}, docs={docs:,}, partitions=5, "
                                  f"seconds={summary['seconds']:.2f})")
    assert "<table" in run_outputs[-1][2]

    # the rejected documents of gopher_quality are exactly its drops
    (_, reasons, _), = by_source['rejected = pd.read_parquet(f"{OUT}/rejected/gopher_quality")']
    gq = next(s for s in summary["stages"] if s["stage"] == "gopher_quality")
    for reason, n in gq["drops"].items():
        assert re.search(rf"{reason}\s+{n}\n", reasons), (reason, n, reasons)

    # the report renders inline in an isolated frame
    (_, report_text, report_html), = by_source["result.report()"]
    assert report_text == f"report: {out / 'report.html'}"
    assert report_html.startswith('<iframe class="gpupipe-report"') and "srcdoc=" in report_html
    assert "fineweb_quality" in report_html

    # the shards read back: the notebook's counts are those of the shards on disk
    (_, shard_line, _), (_, window, _) = by_source["from tokenizers import Tokenizer"]
    train = ShardSet(str(out / "shards"), "train")
    assert shard_line.startswith(f"train: {len(train)} documents, {int(train.sizes.sum()):,} "
                                 f"tokens\n")
    assert "'input_ids': [" in window and "'loss_mask': [1.0" in window
