"""url_dedup: keep one record per normalised URL."""

from __future__ import annotations

import datetime
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa

from gpupipe.backends import dispatch
from gpupipe.frame import ID, TEXT, text_array
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import POS, DropLosers, doc_codes
from gpupipe.stages.dedup.exact import ExactLosers, text_hashes
from gpupipe.stages.filters.url import normalize_url, require_columns
from gpupipe.stages.steps import Map, Output, Reduce


def _epoch(date: str | None) -> int:
    """Seconds since 1970 of a WARC date (ISO 8601), 0 when there is none."""
    if not date:
        return 0
    try:
        return int(datetime.datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


class UrlKeys:
    """Step ``keys``: partition ``i`` -> the hash of each row's normalised URL, its document
    code, what ``keep`` ranks by (as ``length``) and its id."""

    def __init__(self, keep: str, url_column: str, date_column: str):
        self.keep, self.url_column, self.date_column = keep, url_column, date_column

    def __call__(self, ctx, i: int) -> Output:
        df = ctx.read(i)
        host = dispatch.to_host(df[[c for c in (ID, self.url_column, self.date_column)
                                    if c in df.columns]])
        urls = host[self.url_column].tolist()
        # a row without a URL keys on its id, so it never meets another
        keys = [normalize_url(u) if isinstance(u, str) and u else f"\0{d}"
                for u, d in zip(urls, host[ID].tolist())]
        h1, h2 = text_hashes(keys, "md5")
        if self.keep == "latest":
            rank = np.array([_epoch(d) for d in host[self.date_column].tolist()], np.int64)
        else:
            rank = np.asarray(dispatch.kernels_for(df).count_chars(
                *dispatch.text_buffers(df[TEXT])), dtype=np.int64)
        table = pa.table({"h1": h1, "h2": h2, "doc": doc_codes(i, len(df)), "length": rank,
                          "id": text_array(host[ID]).cast(pa.string())})
        return Output(table, counters={"documents": len(df),
                                       "no_url": sum(not (isinstance(u, str) and u)
                                                     for u in urls)})


@stage("url_dedup")
class UrlDedup(GlobalStage):
    """Keep one record per URL, compared normalised (http and https, ``www.``, the fragment,
    a trailing ``/`` and the order of query parameters do not matter): the ``latest`` by
    ``warc_date`` (a page crawled twice: its newest copy), or the ``longest`` text. Ties go to
    the first in input order, so the choice never depends on the number of workers. Removed
    records are written to ``dedup/duplicates.parquet/`` with the id they lost to. Records
    without a URL are all kept (counter ``no_url``).
    """

    reasons: ClassVar[tuple[str, ...]] = ("url_duplicate",)
    host_steps: ClassVar[str] = "URL normalisation and the groups on the host"
    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")

    keep: Literal["latest", "longest"] = "latest"
    url_column: str = "url"
    #: the column ``keep: latest`` compares (ISO 8601 dates, as WARC-Date)
    date_column: str = "warc_date"

    def check(self, ctx=None) -> None:
        require_columns(self.stage_name, ctx, [self.url_column] + (
            [self.date_column] if self.keep == "latest" else []))

    def steps(self, ctx):
        label = f"{ctx.position}:{self.stage_name}"
        return [
            Map("keys", UrlKeys(self.keep, self.url_column, self.date_column),
                shuffle_on=("h1", "h2")),
            Reduce("losers", ExactLosers("longest"), of="keys", split_by=POS),
            Map("drop", DropLosers("url_duplicate", "losers", label, []), output=True),
        ]
