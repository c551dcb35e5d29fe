"""Jupyter: HTML views of a pipeline, a stage and a run; `Pipeline.preview` gives every
filter's verdict on a sample, and its ``verdict`` column is what a run does."""

from __future__ import annotations

import html.parser

import pytest

import gpupipe as gp


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.opened, self.closed, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.opened.append(tag)

    def handle_endtag(self, tag):
        self.closed.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def parse(markup: str) -> _Tags:
    t = _Tags()
    t.feed(markup)
    for tag in ("table", "tr", "td", "div", "pre"):
        assert t.opened.count(tag) == t.closed.count(tag), tag
    return t


def test_pipeline_and_stage_render_as_html():
    p = gp.Pipeline.from_yaml("pipelines/english_web.yaml")
    t = parse(p._repr_html_())
    text = "".join(t.text)
    for st in p.stages:
        assert st.describe() in text
    assert "data/sample/*.jsonl.gz" in text and "plan (each segment" in text
    s = gp.stages.LengthFilter(min_words=20)
    text = "".join(parse(s._repr_html_()).text)
    assert "min_words20set" in text.replace(" ", "") and "too_few_words" in text


@pytest.fixture(scope="module")
def web(client, tmp_path_factory):
    """english_web's row-local stages (a global stage such as dedup is not previewed)."""
    full = gp.Pipeline.from_yaml("pipelines/english_web.yaml")
    p = gp.Pipeline(input=full.input, output="unused",
                    stages=[s for s in full.stages if s.kind == "row" and s.stage_name != "tokenize"])
    res = p.run(output=str(tmp_path_factory.mktemp("web") / "o"), client=client,
                progress=False)
    return p, res


def test_a_run_renders_its_funnel(web):
    _, res = web
    t = parse(res._repr_html_())
    text = "|".join(t.text)
    for st in res.summary["stages"]:
        assert f"{st['position']}: {st['stage']}|{st['docs_in']:,}|{st['docs_out']:,}" in text
    assert f"kept {res.summary['output']['docs']:,}" in text


def test_preview_verdicts_are_what_the_run_does(web):
    p, res = web
    df = p.preview(n=150, seed=3)
    assert len(df) == 150 and len(set(df["id"])) == 150
    names = [s.stage_name for s in p.stages if s.reasons]
    assert [c for c in df.columns if c in names] == names
    kept = set(res.to_pandas()["id"])
    assert set(df.loc[df["verdict"] == "keep", "id"]) == set(df["id"]) & kept
    for name in names:    # every verdict is keep or one of that stage's reasons
        reasons = set(next(s for s in p.stages if s.stage_name == name).reasons)
        assert set(df[name]) <= reasons | {"keep"}
    again = p.preview(n=150, seed=3)
    assert again["id"].tolist() == df["id"].tolist()   # the draw is seeded


def test_explain_document_shows_measures_bounds_and_verdicts():
    p = gp.Pipeline(input="data/sample", output="unused", stages=[
        gp.stages.NormalizeText(), gp.stages.LengthFilter(min_words=5, max_chars=100),
        gp.stages.WordCountFilter(min_words=2)])
    got = gp.explain_document(p, "one two three \r\n")   # normalised to "one two three"
    assert got.to_dict("records") == [
        {"stage": "normalize_text", "measure": "text changed", "value": True, "bound": "",
         "verdict": "transform"},
        {"stage": "length_filter", "measure": "chars", "value": 13.0,
         "bound": "<= 100 (max_chars)", "verdict": "drop: too_few_words"},
        {"stage": "length_filter", "measure": "words", "value": 3.0,
         "bound": ">= 5 (min_words)", "verdict": "drop: too_few_words"},
        {"stage": "word_count_filter", "measure": "words", "value": 3.0,
         "bound": ">= 2 (min_words)", "verdict": "keep"},
    ]


def test_preview_measures_agree_with_the_verdicts(web):
    p, _ = web
    df = p.preview(n=150, seed=3)
    short = df["gopher_quality"] == "too_few_words"
    assert short.any()
    assert (df.loc[short, "gopher_quality.words"] < 50).all()
    assert (df.loc[df["gopher_quality"] == "keep", "gopher_quality.words"] >= 50).all()
    punct = df["fineweb_quality"] == "line_punct_ratio"
    assert (df.loc[punct, "fineweb_quality.line_punct_ratio"] < 0.12).all()


def test_report_view_without_a_report(tmp_path):
    from gpupipe.result import ReportView

    view = ReportView(str(tmp_path / "run" / "report.html"))
    assert repr(view) == f"report: {tmp_path / 'run' / 'report.html'}"
    assert view._repr_html_() == (f"<p>no report at {tmp_path / 'run' / 'report.html'} (No such "
                                  f"file or directory): <code>gpupipe report {tmp_path / 'run'}"
                                  f"</code> rebuilds it</p>")
