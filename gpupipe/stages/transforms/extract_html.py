"""extract_html: HTML -> the page's main text, with Resiliparse, Trafilatura or jusText."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Annotated, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from gpupipe.frame import TEXT, string_series, text_array
from gpupipe.stages.base import TASK, Filter, stage
from gpupipe.stages.transforms import html_extract

log = logging.getLogger(__name__)

#: the suffix a task's mark gets when the next attempt finds it (`ExtractHtml._extract`)
ENDED = ".ended"
#: partitions of a row segment whose attempt ended with its worker, after which the segment's
#: other partitions extract in the helper: a crawl full of slow pages restarts few workers
ENDINGS = 2


@stage("extract_html")
class ExtractHtml(Filter):
    """Replace each document's HTML by its main text, as the extractor library returns it.

    ``resiliparse`` (the default) is Resiliparse's ``extract_plain_text``, a C++ DOM walk with
    main-content heuristics, tens of times faster than the others; ``trafilatura`` (FineWeb's
    choice, with ``favor_precision`` / ``favor_recall``) and ``justext`` (paragraphs that are not
    boilerplate for ``language``'s stop words) are the alternatives. The text is exactly what the
    library gives, character for character; clean it with ``normalize_text`` after.

    It runs on pandas partitions (on ``backend: cudf`` the partition is copied to the host
    for it, as for any library that reads Python strings).

    Documents the extractor returns no text for are dropped as ``no_main_text``, pages it fails
    on as ``extract_error``. With ``timeout`` (seconds per document) set, a page that takes
    longer is dropped as ``extract_timeout`` instead of holding its worker:

    * In the workers of the local CPU cluster a run starts, or of a cluster the pipeline says
      is ``dedicated`` to it (a ``gpupipe slurm`` CPU job's), one thread each under a nanny,
      extraction runs in the worker, each page under a real-time timer, when the scheduler's
      worker-ttl is at least twice the timeout (a page holds its worker silent while it runs).
      A page past ``timeout`` ends the worker process; its nanny starts a new one, and the
      partition's next attempt, finding the mark the first one left in the segment's directory
      (``.attempts/``), runs in a helper process as below, where the page is set aside. After
      two partitions of a segment ended their workers so, its other partitions extract in the
      helper too.
    * Elsewhere (another cluster the run attached to or was given, ``kind: cuda``, the cuDF
      backend, ``preview``, a stage called from Python), and for that second attempt,
      extraction runs in a helper process per thread: a page past the timeout, or one the
      helper dies on (out of memory), is set aside, the helper is killed, and a new one goes on
      with the next page.

    Which pages time out depends on the machine's speed, so a run is reproducible only when
    none does (run.json counts them). ``timeout: null`` extracts in the worker itself, without
    that protection.
    """

    reasons: ClassVar[tuple[str, ...]] = ("no_main_text", "extract_timeout", "extract_error")
    host_steps: ClassVar[str] = "HTML extraction (a CPU library)"

    extractor: Literal["resiliparse", "trafilatura", "justext"] = "resiliparse"
    #: resiliparse: keep only what its heuristics take for the main content
    main_content: bool = True
    #: resiliparse: keep line breaks and paragraphs
    preserve_formatting: bool = True
    #: resiliparse: bullets before list items
    list_bullets: bool = True
    #: resiliparse: images' alternative text
    alt_texts: bool = False
    #: resiliparse: link targets after link text
    links: bool = False
    #: trafilatura: fewer but cleaner extracts
    favor_precision: bool = False
    #: trafilatura: more text, more boilerplate
    favor_recall: bool = False
    #: trafilatura: include reader comments
    include_comments: bool = False
    #: trafilatura: include table contents
    include_tables: bool = True
    #: justext: the stop-word list (``justext.get_stoplists()``)
    language: str = "English"
    #: seconds one document may take; null extracts in the worker without a limit
    timeout: Annotated[float | None, Field(gt=0)] = 10.0

    def __post_init__(self):
        if self.favor_precision and self.favor_recall:
            raise ValueError("favor_precision and favor_recall exclude each other")
        if self.extractor == "justext":
            try:
                import justext
            except ImportError:
                return   # check() names the missing package
            if self.language not in justext.get_stoplists():
                from gpupipe.errors import did_you_mean

                raise ValueError(f"justext has no stop words for {self.language!r}"
                                 f"{did_you_mean(self.language, justext.get_stoplists())}")

    def options(self) -> dict:
        return {k: getattr(self, k) for k in html_extract.OPTIONS[self.extractor]}

    def check(self, ctx=None) -> str | None:
        module = {"resiliparse": "resiliparse", "trafilatura": "trafilatura",
                  "justext": "justext"}[self.extractor]
        try:
            __import__(module)
        except ImportError:
            raise ValueError(f"extract_html: extractor {self.extractor!r} needs the "
                             f"{module} package: pip install 'gpupipe[web]'") from None
        return None

    def explain_notes(self) -> list[str]:
        where = ("in the worker, no time limit" if self.timeout is None else
                 f"{self.timeout:g} s per document: in the workers of the run's own local "
                 f"CPU cluster or a dedicated one, else in a helper process per worker thread")
        return [f"{self.extractor} {self.options()}, {where}"]

    def _extract(self, df) -> list[tuple[str | None, str | None]]:
        htmls, options = df[TEXT].tolist(), self.options()
        if self.timeout is None:
            return html_extract.extract_all(html_extract.extractor(self.extractor, options),
                                            htmls)
        task = TASK.get()
        if task is None or task.expendable_for < self.timeout or \
                not html_extract.alarm_usable():
            return self._in_helper(htmls, options)
        mark = f"{task.path}.{self.stage_name}"
        if os.path.exists(mark):   # the last attempt ended with its worker
            os.replace(mark, mark + ENDED)
            with open(mark + ENDED, encoding="utf-8") as f:
                log.warning("extract_html: %s; this attempt extracts in a helper process",
                            f.read().strip())
            return self._in_helper(htmls, options)
        folder = os.path.dirname(mark)
        if os.path.exists(mark + ENDED) or os.path.isdir(folder) and sum(
                f.endswith(f".{self.stage_name}{ENDED}") for f in os.listdir(folder)) >= ENDINGS:
            return self._in_helper(htmls, options)
        fn = html_extract.extractor(self.extractor, options)
        os.makedirs(folder, exist_ok=True)
        with open(mark, "w", encoding="utf-8") as f:
            f.write(f"the last attempt at {os.path.basename(task.path)} ended with its worker "
                    f"(pid {os.getpid()} on {socket.gethostname()}) before its {len(htmls)} "
                    f"pages were extracted, each within {self.timeout:g} s: a page ran past "
                    f"that time, or the worker or the run stopped\n")
        try:
            return html_extract.extract_all(fn, htmls, alarm=self.timeout)
        finally:   # not reached when the alarm, or anything else, ends the process
            with contextlib.suppress(FileNotFoundError):   # the segment is over (cancelled)
                os.remove(mark)

    def _in_helper(self, htmls, options):
        return html_extract.extract_with_timeout(self.extractor, options, htmls, self.timeout)

    def evaluate(self, df):
        results = self._extract(df)
        texts = [text or "" for text, _ in results]
        codes = np.array([1 if error is None and (not text or text.isspace()) else
                          2 if error == "timeout" else 3 if error is not None else 0
                          for text, error in results], dtype=np.uint8)
        out = string_series(pa.array(texts, pa.large_string()), df.index)
        return codes, df.assign(**{TEXT: out}), {}

    def measures(self, df):
        html = text_array(df[TEXT])
        texts = [text or "" for text, _ in self._extract(df)]
        return {"html_chars": pc.utf8_length(html).to_numpy(zero_copy_only=False),
                "text_chars": np.array([len(t) for t in texts], dtype=np.int64)}
