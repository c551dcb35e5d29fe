"""extract_html: character for character what the extractor library gives when called directly,
in the worker (``timeout: null``), in the helper process, and in the worker under the alarm
timer; drops by reason; a page that runs past the timeout is dropped without holding the others,
and its helper process is reaped, or it ends a worker that may end, and the partition's next
attempt sets it aside (a whole ``gpupipe run``)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pandas as pd
import psutil
import pytest

from gpupipe.frame import STRING
from gpupipe.runner.sources import make_source
from gpupipe.spec import InputSpec
from gpupipe.stages import ExtractHtml
from gpupipe.stages.base import TASK, TaskPlace
from gpupipe.stages.transforms import html_extract
from tests.cluster.common import scheduler_and_worker
from tests.conftest import REPO

CRAWL = REPO / "data" / "web" / "docs-crawl.warc.gz"


def frame(texts) -> pd.DataFrame:
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                         "text": pd.array(texts, dtype=STRING)})


def run(texts, **params):
    res = ExtractHtml(**params).process(frame(texts))
    return res.frame["id"].tolist(), res.frame["text"].tolist(), res.drops


@pytest.fixture(scope="module")
def htmls() -> list[str]:
    """The 113 HTML pages of the committed crawl."""
    df = make_source(InputSpec(path=str(CRAWL))).read(0).frame
    assert len(df) == 113
    return df["text"].tolist()


def resiliparse_text(html: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=True, preserve_formatting=True, list_bullets=True,
                              alt_texts=False, links=False)


def trafilatura_text(html: str) -> str:
    import trafilatura

    return trafilatura.extract(html, favor_precision=False, favor_recall=False,
                               include_comments=False, include_tables=True) or ""


def justext_text(html: str) -> str:
    import justext

    return "\n\n".join(p.text for p in justext.justext(html, justext.get_stoplist("English"))
                       if not p.is_boilerplate)


def helpers_running() -> set[int]:
    """This process's children that run the extraction helper (its own helpers: those of a Dask
    worker that another test started are grandchildren)."""
    out = set()
    for p in psutil.Process().children(recursive=False):
        try:
            if any(a.endswith("html_extract.py") for a in p.cmdline()):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def pooled() -> dict:
    """This thread's helper processes, by extractor configuration."""
    return getattr(html_extract._helpers, "pool", {})


#: the pool's key of the stage's default Resiliparse options
RESILIPARSE = ("resiliparse", tuple(sorted(ExtractHtml().options().items())))


def resiliparse_helper() -> int | None:
    """The pid of the helper this thread keeps for the stage's default Resiliparse options."""
    helper = pooled().get(RESILIPARSE)
    return helper.proc.pid if helper is not None and helper.alive() else None


def started_helper(htmls, timeout: float) -> html_extract.Helper:
    """The Resiliparse helper this thread keeps, started by extracting one page."""
    run(htmls[:1], timeout=timeout)
    return pooled()[RESILIPARSE]


@pytest.fixture(autouse=True)
def own_helpers():
    """Each test starts without helpers in this thread and ends by closing the ones it started:
    every one is then gone, none left a zombie. Yields: the helper processes running now that
    were not running before the test (another thread's are left alone)."""
    for key in list(pooled()):
        pooled().pop(key).close()
    others = helpers_running()
    yield lambda: helpers_running() - others
    pids = [h.proc.pid for h in pooled().values()]
    for key in list(pooled()):
        pooled().pop(key).close()
    assert helpers_running() - others == set()
    assert not any(psutil.pid_exists(pid) for pid in pids)


@pytest.fixture(params=["in_worker", "helper", "alarm"])
def timeout(request, tmp_path, own_helpers):
    """The stage's ``timeout`` for each place extraction runs: in the worker (``null``); in the
    helper process (30 s, outside a run's task, as in preview); in the worker under the alarm
    timer (30 s, in a task that may end its process, as in a run's one-thread workers), where
    no helper starts and no mark or timer is left."""
    if request.param != "alarm":
        yield None if request.param == "in_worker" else 30.0
        return
    token = TASK.set(TaskPlace(str(tmp_path / ".attempts" / "part-00000"), expendable_for=60.0))
    try:
        yield 30.0
    finally:
        TASK.reset(token)
    assert own_helpers() == set() and pooled() == {}
    assert not (tmp_path / ".attempts" / "part-00000.extract_html").exists()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


# -- equality with the library ------------------------------------------------------------------

def test_resiliparse_equals_the_library_on_every_page(htmls, timeout):
    expected = [resiliparse_text(h) for h in htmls]
    assert all(t.strip() for t in expected)   # every page has main text: none is dropped
    ids, texts, drops = run(htmls, timeout=timeout)
    assert ids == [str(i) for i in range(113)] and drops == {}
    assert texts == expected
    assert sum(len(t) for t in texts) < sum(len(h) for h in htmls) // 4   # markup is gone


def test_trafilatura_equals_the_library(htmls, timeout):
    subset = htmls[::8]   # 15 pages (trafilatura is slow)
    assert len(subset) == 15
    expected = [trafilatura_text(h) for h in subset]
    assert all(t.strip() for t in expected)
    ids, texts, drops = run(subset, extractor="trafilatura", timeout=timeout)
    assert ids == [str(i) for i in range(15)] and drops == {}
    assert texts == expected


def test_justext_equals_the_library(htmls, timeout):
    subset = htmls[3::8]   # 14 pages
    expected = [justext_text(h) for h in subset]
    kept = [i for i, t in enumerate(expected) if t.strip()]
    ids, texts, drops = run(subset, extractor="justext", timeout=timeout)
    assert ids == [str(i) for i in kept] and texts == [expected[i] for i in kept]
    # jusText takes every paragraph of one page for boilerplate: dropped as no_main_text
    assert (len(subset), len(kept)) == (14, 13) and drops == {"no_main_text": 1}


# -- drops ---------------------------------------------------------------------------------------

EMPTY = ["", "   \n", "<html><body><script>var x = 1;</script></body></html>",
         "<html><head><style>p {color: red}</style></head><body></body></html>"]


@pytest.mark.parametrize("extractor", ["resiliparse", "trafilatura", "justext"])
def test_no_main_text(htmls, extractor, timeout):
    docs = [EMPTY[0], htmls[0], EMPTY[1], EMPTY[2], htmls[1], EMPTY[3]]
    ids, texts, drops = run(docs, extractor=extractor, timeout=timeout)
    assert ids == ["1", "4"] and drops == {"no_main_text": 4}
    fn = {"resiliparse": resiliparse_text, "trafilatura": trafilatura_text,
          "justext": justext_text}[extractor]
    assert texts == [fn(htmls[0]), fn(htmls[1])]


def test_a_page_the_library_fails_on_is_an_extract_error(htmls, timeout):
    """jusText (lxml) raises "Document is empty" on a page of only a comment; that page is
    dropped as extract_error and the others are extracted."""
    import justext
    import lxml.etree

    with pytest.raises(lxml.etree.ParserError, match="Document is empty"):
        justext.justext("<!-- nothing but a comment -->", justext.get_stoplist("English"))
    docs = [htmls[0], "<!-- nothing but a comment -->", htmls[1]]
    res = ExtractHtml(extractor="justext", timeout=timeout, keep_rejected=True).process(
        frame(docs))
    assert res.frame["id"].tolist() == ["0", "2"] and res.drops == {"extract_error": 1}
    assert res.frame["text"].tolist() == [justext_text(htmls[0]), justext_text(htmls[1])]
    assert res.rejected["id"].tolist() == ["1"]
    assert res.rejected["reason"].tolist() == ["extract_error"]


def test_annotate_mode_keeps_every_row(htmls):
    res = ExtractHtml(timeout=None, mode="annotate").process(frame([htmls[0], "", htmls[1]]))
    assert res.frame["id"].tolist() == ["0", "1", "2"]
    assert res.frame["extract_html_reason"].isna().tolist() == [True, False, True]
    assert res.frame["extract_html_reason"][1] == "no_main_text"
    assert res.counters == {"flagged:no_main_text": 1}
    assert res.frame["text"].tolist() == [resiliparse_text(htmls[0]), "", resiliparse_text(htmls[1])]


# -- the timeout ----------------------------------------------------------------------------------

#: 20,000 nested <div>s: Resiliparse's main-content pass is quadratic in the depth and takes
#: 8.4 s here on this page (10,000: 1.9 s; without main_content: 0.02 s), the crawl's pages
#: at most 8 ms each; a timeout of 0.8 s leaves a margin of 10x on either side.
SLOW = "<html><body>" + "<div>" * 20_000 + "x" + "</div>" * 20_000 + "</body></html>"
TIMEOUT = 0.8


def test_a_page_past_the_timeout_is_dropped_and_its_helper_reaped(htmls, own_helpers):
    normal = htmls[:6]
    run(normal[:1], timeout=TIMEOUT)   # the helper this configuration keeps
    first = resiliparse_helper()
    assert first is not None and own_helpers() == {first}
    docs = htmls[:3] + [SLOW] + htmls[3:6]
    start = time.monotonic()
    ids, texts, drops = run(docs, timeout=TIMEOUT)
    elapsed = time.monotonic() - start
    assert ids == ["0", "1", "2", "4", "5", "6"] and drops == {"extract_timeout": 1}
    assert texts == [resiliparse_text(h) for h in normal]   # before and after it, as the library
    assert TIMEOUT < elapsed < 30
    # the helper that ran past the timeout was killed and waited for (no zombie); the one
    # that went on with the pages after it is kept for the next partition
    second = resiliparse_helper()
    assert second not in (None, first) and not psutil.pid_exists(first)
    assert own_helpers() == {second}
    assert run(htmls[6:8], timeout=TIMEOUT)[1] == [resiliparse_text(h) for h in htmls[6:8]]
    assert resiliparse_helper() == second and own_helpers() == {second}


def test_timeouts_in_a_row_and_at_the_ends(htmls, own_helpers):
    """Slow pages first, last and back to back: each is dropped on its own, every other page is
    extracted."""
    docs = [SLOW, htmls[0], SLOW, SLOW, htmls[1], SLOW]
    start = time.monotonic()
    ids, texts, drops = run(docs, timeout=TIMEOUT)
    assert time.monotonic() - start < 30
    assert ids == ["1", "4"] and drops == {"extract_timeout": 4}
    assert texts == [resiliparse_text(htmls[0]), resiliparse_text(htmls[1])]
    # every helper a slow page held was killed; at most the one that went on is left (the
    # pages a killed helper extracted after its last reply are extracted again by a new one)
    assert own_helpers() == {resiliparse_helper()} - {None}


def test_a_helper_killed_on_a_page_sets_that_page_aside(htmls, own_helpers):
    """A helper that dies on a page (the kernel's OOM killer) costs that page alone: it is an
    ``extract_error`` naming the death, and a new helper extracts the rest."""
    helper = started_helper(htmls, 30.0)
    target = helper._started() + 4   # SLOW, the fourth page

    def kill_on_slow():
        end = time.monotonic() + 30
        while helper._started() < target and time.monotonic() < end:
            time.sleep(0.002)
        os.kill(helper.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_on_slow)
    killer.start()
    docs = htmls[:3] + [SLOW] + htmls[3:5]
    res = ExtractHtml(timeout=30.0, keep_rejected=True).process(frame(docs))
    killer.join()
    assert res.frame["id"].tolist() == ["0", "1", "2", "4", "5"]
    assert res.frame["text"].tolist() == [resiliparse_text(h) for h in htmls[:5]]
    assert res.drops == {"extract_error": 1}
    assert not psutil.pid_exists(helper.proc.pid) and resiliparse_helper() not in (None,
                                                                                   helper.proc.pid)


def test_a_helper_paused_before_a_partition_is_no_timeout(htmls, own_helpers):
    """The clock of a page starts when the helper starts it: a helper that takes longer than
    the timeout to take the partition in (a big one, a loaded machine; here SIGSTOPped) times
    nothing out, and every page is extracted by it."""
    helper = started_helper(htmls, 0.3)
    os.kill(helper.proc.pid, signal.SIGSTOP)
    waker = threading.Timer(1.5, os.kill, (helper.proc.pid, signal.SIGCONT))
    waker.start()
    try:
        ids, texts, drops = run(htmls[1:3], timeout=0.3)   # 33 KB: the pipe takes it all
    finally:
        waker.join()
    assert ids == ["0", "1"] and drops == {}
    assert texts == [resiliparse_text(h) for h in htmls[1:3]]
    assert resiliparse_helper() == helper.proc.pid and own_helpers() == {helper.proc.pid}


def test_a_helper_killed_while_the_partition_is_sent_costs_nothing(htmls, own_helpers):
    """A helper that dies before it starts a page of the partition (killed while the worker
    writes the partition to it) costs no page: a new helper extracts them all."""
    helper = started_helper(htmls, 30.0)
    first = helper.proc.pid
    os.kill(first, signal.SIGSTOP)   # its pipe fills: the worker's write blocks
    killer = threading.Timer(1.0, os.kill, (first, signal.SIGKILL))
    killer.start()
    docs = htmls[:6] * 4   # far beyond a pipe's 64 KiB
    try:
        ids, texts, drops = run(docs, timeout=30.0)
    finally:
        killer.join()
    assert ids == [str(i) for i in range(len(docs))] and drops == {}
    assert texts == [resiliparse_text(h) for h in docs]
    assert not psutil.pid_exists(first) and resiliparse_helper() not in (None, first)


# -- in a worker that may end: the alarm ---------------------------------------------------------

#: a partition's HTML given to the stage in a task whose process may end (argv: a pickle of the
#: pages, the task's path, the timeout)
IN_A_TASK = textwrap.dedent("""
    import pickle, sys
    import pandas as pd
    from gpupipe.frame import STRING
    from gpupipe.stages import ExtractHtml
    from gpupipe.stages.base import TASK, TaskPlace
    with open(sys.argv[1], "rb") as f:
        docs = pickle.load(f)
    TASK.set(TaskPlace(sys.argv[2], expendable_for=60.0))
    df = pd.DataFrame({"id": pd.array([str(i) for i in range(len(docs))], dtype=STRING),
                       "text": pd.array(docs, dtype=STRING)})
    print(ExtractHtml(timeout=float(sys.argv[3])).process(df).frame["id"].tolist())
""")


def in_a_task(tmp_path, docs, task, timeout) -> subprocess.CompletedProcess:
    """`IN_A_TASK` in a new process."""
    import pickle

    (tmp_path / "docs.pkl").write_bytes(pickle.dumps(docs))
    return subprocess.run([sys.executable, "-c", IN_A_TASK, str(tmp_path / "docs.pkl"),
                           str(task), str(timeout)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


#: what a mark says (a regex), for partition 7 of 7 pages
SAID = (r"the last attempt at part-00007 ended with its worker \(pid \d+ on \S+\) before its "
        r"7 pages were extracted, each within 0.8 s: a page ran past that time, or the worker "
        r"or the run stopped")


def test_a_page_past_the_alarm_ends_the_process_and_the_next_attempt_sets_it_aside(
        htmls, tmp_path, own_helpers, caplog):
    """In a task whose process may end, a page past the timeout ends the process by SIGALRM,
    even while Resiliparse holds the GIL, and leaves the mark of the attempt; the next attempt
    at the partition finds it, extracts in a helper process, which sets the page aside, says
    so once, and keeps the mark as ended: a third attempt uses the helper too."""
    docs = htmls[:3] + [SLOW] + htmls[3:6]
    task = tmp_path / ".attempts" / "part-00007"
    ended = in_a_task(tmp_path, docs, task, TIMEOUT)
    assert ended.returncode == -signal.SIGALRM, ended.stderr
    assert ended.stdout == ""
    mark = tmp_path / ".attempts" / "part-00007.extract_html"
    said = mark.read_text()
    assert re.fullmatch(SAID + "\n", said), said
    token = TASK.set(TaskPlace(str(task), expendable_for=60.0))
    try:
        with caplog.at_level(logging.WARNING, logger="gpupipe.stages.transforms.extract_html"):
            ids, texts, drops = run(docs, timeout=TIMEOUT)
            assert own_helpers() == {resiliparse_helper()} != {None}
            assert run(htmls[:2], timeout=TIMEOUT)[1] == [resiliparse_text(h) for h in htmls[:2]]
    finally:
        TASK.reset(token)
    assert ids == ["0", "1", "2", "4", "5", "6"] and drops == {"extract_timeout": 1}
    assert texts == [resiliparse_text(h) for h in htmls[:6]]
    assert caplog.messages == [f"extract_html: {said.strip()}; this attempt extracts in a "
                               f"helper process"]
    assert sorted(os.listdir(task.parent)) == ["part-00007.extract_html.ended"]
    assert (task.parent / "part-00007.extract_html.ended").read_text() == said


def test_the_alarm_is_set_for_each_page(tmp_path):
    """Pages of about a tenth of a second each, twice the timeout (0.8 s) in all: each page gets
    its own 0.8 s, so none ends the process (a timer set once per partition would)."""
    page = "<html><body>" + "<div>" * 2_500 + "x" + "</div>" * 2_500 + "</body></html>"
    resiliparse_text(page)
    start = time.monotonic()
    resiliparse_text(page)
    once = time.monotonic() - start
    assert once < TIMEOUT / 3, once   # each page far below the timeout, even twice as slow
    n = int(2 * TIMEOUT / once) + 1
    done = in_a_task(tmp_path, [page] * n, tmp_path / ".attempts" / "part-00000", TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{[str(i) for i in range(n)]}\n"
    assert list((tmp_path / ".attempts").iterdir()) == []


@pytest.mark.parametrize("case", ["lease_shorter_than_timeout", "alarm_in_use", "alarm_blocked",
                                  "two_partitions_ended"])
def test_where_the_process_may_not_end_a_helper_extracts(htmls, tmp_path, own_helpers, case):
    """A task that may hold its worker for less than the timeout (a short worker-ttl), one
    whose process handles SIGALRM already or whose thread blocks it, and the partitions of a
    segment where two attempts ended with their workers, extract in the helper; they leave no
    mark."""
    attempts = tmp_path / ".attempts"
    attempts.mkdir()
    if case == "two_partitions_ended":
        for name in ("part-00003.extract_html.ended", "part-00005.extract_html.ended"):
            (attempts / name).write_text("ended\n")
    token = TASK.set(TaskPlace(str(attempts / "part-00000"),
                               expendable_for=10.0 if case == "lease_shorter_than_timeout"
                               else 60.0))
    old = signal.signal(signal.SIGALRM, lambda *_: None) if case == "alarm_in_use" else None
    if case == "alarm_blocked":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    try:
        assert run(htmls[:2], timeout=30.0)[1] == [resiliparse_text(h) for h in htmls[:2]]
    finally:
        TASK.reset(token)
        if old is not None:
            signal.signal(signal.SIGALRM, old)
        if case == "alarm_blocked":
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGALRM])
    assert own_helpers() == {resiliparse_helper()} != {None}
    assert len([f for f in attempts.iterdir() if not f.name.endswith(".ended")]) == 0
    if case == "two_partitions_ended":   # one ended is not enough
        (attempts / "part-00005.extract_html.ended").unlink()
        token = TASK.set(TaskPlace(str(attempts / "part-00000"), expendable_for=60.0))
        try:
            pooled().pop(RESILIPARSE).close()
            assert run(htmls[:2], timeout=30.0)[1] == [resiliparse_text(h) for h in htmls[:2]]
        finally:
            TASK.reset(token)
        assert pooled() == {}


def slow_pages(tmp_path, htmls, files: int) -> None:
    """``tmp_path/p.yaml``: extract_html (timeout `TIMEOUT`) over ``files`` files of three
    pages, a slow one between two of ``htmls``, into ``tmp_path/run``."""
    inputs = []
    for k in range(files):
        docs = [htmls[2 * k], SLOW, htmls[2 * k + 1]]
        (tmp_path / f"in-{k}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n"
                                                        for d in docs))
        inputs.append(str(tmp_path / f"in-{k}.jsonl"))
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""\
        version: 1
        name: slow-pages
        input: {{path: {inputs}}}
        stages: [{{stage: extract_html, timeout: {TIMEOUT}}}]
        output: {{path: {tmp_path / "run"}}}
        """))


def test_a_run_sets_aside_the_pages_that_ended_its_workers(htmls, tmp_path):
    """``gpupipe run`` on its local cluster (one-thread workers under nannies), three files with
    a slow page each: a slow page ends its worker, the nanny starts another, and the partition's
    second attempt, in a helper process, sets the page aside (after two such partitions the
    third may go to the helper at once); every other page is the library's text, each ended
    attempt is said once, and the run directory keeps no mark. Finished partitions are not
    computed again when a worker ends."""
    slow_pages(tmp_path, htmls, 3)
    done = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run", str(tmp_path / "p.yaml"),
                           "--workers", "2", "--no-progress"], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "GPUPIPE_SERVER": "off"})
    assert done.returncode == 0, done.stderr
    said = re.findall(r"extract_html: the last attempt at (part-0000\d) ended with its worker "
                      r"\(pid \d+ on \S+\) before its 3 pages were extracted, each within "
                      r"0.8 s: a page ran past that time, or the worker or the run stopped; this "
                      r"attempt extracts in a helper process", done.stderr)
    assert len(said) == len(set(said)) and 2 <= len(said) <= 3, done.stderr
    run_json = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_json["stages"][0]["drops"] == {"extract_timeout": 3}
    for k in range(3):
        out = pd.read_parquet(tmp_path / "run" / "data" / f"part-0000{k}.parquet")
        assert out["id"].tolist() == [f"in-{k}.jsonl:1", f"in-{k}.jsonl:3"]
        assert out["text"].tolist() == [resiliparse_text(h) for h in htmls[2 * k:2 * k + 2]]
    assert sorted(os.listdir(tmp_path / "run" / "data")) == [
        "_done", "_segment.json", "part-00000.parquet", "part-00001.parquet",
        "part-00002.parquet"]
    # a run killed while partition 1 was in a worker, with the marks it left: the resumed run
    # starts from clean marks (its partition 1 ends a worker again, and is said once again)
    first = (tmp_path / "run" / "data" / "part-00001.parquet").read_bytes()
    (tmp_path / "run" / "data" / "_done" / "part-00001").unlink()
    (tmp_path / "run" / "data" / "part-00001.parquet").unlink()
    attempts = tmp_path / "run" / "data" / ".attempts"
    attempts.mkdir()
    for name in ("part-00001.extract_html", "part-00000.extract_html.ended",
                 "part-00002.extract_html.ended"):
        (attempts / name).write_text("planted\n")
    (tmp_path / "run" / "data" / ".stages.tmp-killed").write_bytes(b"the killed run's stages")
    again = subprocess.run([sys.executable, "-m", "gpupipe.cli", "run",
                            str(tmp_path / "p.yaml"), "--workers", "2", "--no-progress"],
                           capture_output=True, text=True, timeout=300, cwd=REPO,
                           env={**os.environ, "GPUPIPE_SERVER": "off"})
    assert again.returncode == 0, again.stderr
    assert "planted" not in again.stderr
    assert re.findall(r"extract_html: the last attempt at (part-0000\d) ended", again.stderr) \
        == ["part-00001"], again.stderr
    assert (tmp_path / "run" / "data" / "part-00001.parquet").read_bytes() == first
    assert not attempts.exists()
    assert sorted(os.listdir(tmp_path / "run" / "data")) == [
        "_done", "_segment.json", "part-00000.parquet", "part-00001.parquet",
        "part-00002.parquet"]


def test_a_dedicated_cluster_s_workers_end_on_a_slow_page_another_s_do_not(htmls, tmp_path):
    """A scheduler and a worker of their own (``dask scheduler`` / ``dask worker``, one thread
    under a nanny, as a ``gpupipe slurm`` CPU job starts them): with ``--dedicated`` a slow page
    ends the worker, whose nanny starts another, and the next attempt sets the page aside;
    without it, the cluster may hold other work, so a helper process sets the pages aside and
    no worker ends. The same pages are kept either way."""
    slow_pages(tmp_path, htmls, 2)
    env = {**os.environ, "GPUPIPE_SERVER": "off"}
    log = tmp_path / "worker.log"   # the worker says why it extracts in a helper
    with scheduler_and_worker(tmp_path, log) as sched_file:
        said = {}
        for how in ("dedicated", "shared"):
            out = tmp_path / how
            done = subprocess.run(
                [sys.executable, "-m", "gpupipe.cli", "run", str(tmp_path / "p.yaml"),
                 "--scheduler-file", str(sched_file), "--timeout", "60", "--no-progress",
                 *(["--dedicated"] if how == "dedicated" else []), "-o", str(out)],
                capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
            assert done.returncode == 0, done.stderr
            said[how] = re.findall(r"extract_html: the last attempt at (part-0000\d) ended "
                                   r"with its worker", log.read_text())
            run_json = json.loads((out / "run.json").read_text())
            assert run_json["cluster"]["kind"] == "scheduler_file"
            assert run_json["stages"][0]["drops"] == {"extract_timeout": 2}
            for k in range(2):
                kept = pd.read_parquet(out / "data" / f"part-0000{k}.parquet")
                assert kept["text"].tolist() == [resiliparse_text(h)
                                                 for h in htmls[2 * k:2 * k + 2]]
        assert sorted(said["dedicated"]) == ["part-00000", "part-00001"]
        assert said["shared"] == said["dedicated"]   # nothing more


# -- measures and parameters ----------------------------------------------------------------------

def test_measures_count_characters(htmls):
    small = "<html><body><main><p>Café — naïve façade, 東京.</p></main></body></html>"
    docs = [htmls[0], htmls[1], small]
    m = ExtractHtml(timeout=None).measures(frame(docs))
    assert set(m) == {"html_chars", "text_chars"}
    assert m["html_chars"].tolist() == [22_554, 15_097, 70] == [len(h) for h in docs]
    assert len(small.encode("utf-8")) == 79   # characters, not bytes
    assert m["text_chars"].tolist() == [len(resiliparse_text(h)) for h in docs]
    assert m["text_chars"][2] == len("Café — naïve façade, 東京.") == 24
    assert m["html_chars"].dtype.kind == m["text_chars"].dtype.kind == "i"
    helper = ExtractHtml(timeout=30.0).measures(frame(docs))
    assert all(np.array_equal(helper[k], m[k]) for k in m)


def test_bad_parameters():
    with pytest.raises(ValueError, match="favor_precision and favor_recall exclude each other"):
        ExtractHtml(extractor="trafilatura", favor_precision=True, favor_recall=True)
    with pytest.raises(ValueError, match="justext has no stop words for 'Klingon'"):
        ExtractHtml(extractor="justext", language="Klingon")
    with pytest.raises(ValueError, match="'english' — did you mean 'English'"):
        ExtractHtml(extractor="justext", language="english")
    with pytest.raises(ValueError, match="greater than 0"):
        ExtractHtml(timeout=0)
    with pytest.raises(ValueError, match="'resiliparse', 'trafilatura' or 'justext'"):
        ExtractHtml(extractor="boilerpipe")
    assert ExtractHtml(extractor="justext", language="German").options() == {"language": "German"}
    assert ExtractHtml(extractor="trafilatura", favor_precision=True).options() == {
        "favor_precision": True, "favor_recall": False, "include_comments": False,
        "include_tables": True}
