"""url_filter: drop documents by their URL (block lists of domains and URLs, banned words), and
the URL normalisation url_dedup shares."""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from gpupipe.backends import dispatch
from gpupipe.stages.base import Filter, stage

_WORDS = re.compile(r"[^\W_]+")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def normalize_url(url: str) -> str:
    """The form two URLs of one page share: no scheme (http and https are one page), host
    lower-cased without ``www.`` and the default port, no fragment, no trailing ``/`` on the
    path, query parameters sorted.

    >>> normalize_url("HTTPS://WWW.Example.com:443/a/b/?z=1&a=2#top")
    'example.com/a/b?a=2&z=1'
    >>> normalize_url("http://example.com")
    'example.com/'
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:   # not a URL (a bad port, brackets): compare it as it is
        return url.strip()
    host = (parts.hostname or "").removeprefix("www.")
    if port is not None and str(port) != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    path = parts.path.rstrip("/") or "/"
    query = "&".join(sorted(q for q in parts.query.split("&") if q))
    return f"{host}{path}" + (f"?{query}" if query else "")


def url_host(url: str) -> str:
    """The lower-cased host of a URL (or of ``host/path`` without a scheme), '' if none."""
    if "://" not in url:
        url = "//" + url
    try:
        return (urllib.parse.urlsplit(url.strip()).hostname or "").rstrip(".")
    except ValueError:
        return ""


def read_list(path: str) -> tuple[list[str], list[str]]:
    """``(domains, urls)`` of a block list: a text file with one domain or URL per line (a line
    with a ``/`` is a URL), or a directory in the UT1 layout (``domains`` and ``urls`` files; a
    directory of such categories is read whole). ``#`` starts a comment."""
    def lines(p: str) -> list[str]:
        with open(p, encoding="utf-8", errors="replace") as f:
            return [s for s in (line.split("#", 1)[0].strip() for line in f) if s]

    if os.path.isdir(path):
        domains, urls = [], []
        for root, _, files in sorted(os.walk(path)):
            if "domains" in files:
                domains += lines(os.path.join(root, "domains"))
            if "urls" in files:
                urls += lines(os.path.join(root, "urls"))
        if not domains and not urls:
            raise ValueError(f"url_filter: {path} is a directory without UT1 'domains' or "
                             f"'urls' files")
        return domains, urls
    entries = lines(path)
    return [e for e in entries if "/" not in e], [e for e in entries if "/" in e]


def require_columns(name: str, ctx, columns: list[str]) -> None:
    """``ValueError`` when a column a URL stage reads is neither carried by the input nor added
    by an earlier stage (nothing is checked without a context)."""
    if ctx is None:
        return
    have = set(ctx.input_columns) | {c for st in ctx.earlier for c in st.added_columns()}
    missing = [c for c in columns if c not in have]
    if missing:
        raise ValueError(f"{name}: no column {missing[0]!r} in the input (WARC input carries "
                         f"url and warc_date; Parquet input: list it in input.columns)")


@stage("url_filter")
class UrlFilter(Filter):
    """Drop documents whose URL is blocked: its host or any parent domain is on a domain list
    (``ads.example.com`` is blocked by ``example.com``), the URL itself is on a URL list
    (compared normalised: scheme, ``www.``, fragment and trailing ``/`` do not matter), a word
    of the URL is banned, at least ``soft_banned_threshold`` words are soft-banned, or a banned
    sub-word occurs anywhere in it (datatrove's ``URLFilter`` rules).

    ``lists`` maps a reason to block lists: text files (one domain or URL per line, ``#``
    comments) or directories in the UT1 blacklist layout (``adult/domains``, ``adult/urls``).
    A dropped document's reason is the name of the list that blocked it, so run.json counts
    drops per list. Documents without a URL are kept (counter ``no_url``).
    """

    #: the reasons of the rules; a pipeline's ``lists`` come first, under their own names
    reasons: ClassVar[tuple[str, ...]] = ("blocked_domain", "blocked_url", "banned_word",
                                          "soft_banned_words", "banned_subword")

    lists: dict[str, list[str]] = Field(default_factory=dict)
    #: domains blocked with their subdomains (reason ``blocked_domain``)
    domains: list[str] = Field(default_factory=list)
    #: URLs blocked (reason ``blocked_url``)
    urls: list[str] = Field(default_factory=list)
    #: a URL with one of these words is dropped (``banned_word``)
    banned_words: list[str] = Field(default_factory=list)
    #: a URL with ``soft_banned_threshold`` or more of these words is dropped
    soft_banned_words: list[str] = Field(default_factory=list)
    soft_banned_threshold: Annotated[int, Field(ge=1)] = 2
    #: substrings anywhere in the lower-cased URL (``banned_subword``)
    banned_subwords: list[str] = Field(default_factory=list)
    url_column: str = "url"

    def __post_init__(self):
        bad = [r for r in self.lists if not re.fullmatch(r"[a-z0-9_]+", r)]
        if bad:
            raise ValueError(f"url_filter: list names are reasons, in snake_case: {bad}")
        clash = [r for r in self.lists if r in type(self).reasons]
        if clash:
            raise ValueError(f"url_filter: list names {clash} are reasons of other rules")
        object.__setattr__(self, "reasons", (*self.lists, *type(self).reasons))

    def check(self, ctx=None) -> str | None:
        for name, paths in self.lists.items():
            for p in paths:
                if not os.path.exists(p):
                    raise ValueError(f"url_filter: block list {p!r} ({name}) does not exist")
        require_columns(self.stage_name, ctx, [self.url_column])
        return None

    def prepare(self) -> str | None:
        """Read the block lists once, on the client; the stage then travels with them."""
        def table(name: str, domains, urls) -> tuple:
            return (name, frozenset(d.lower().strip(".").removeprefix("www.") for d in domains),
                    frozenset(normalize_url(u if "://" in u else "http://" + u) for u in urls))

        tables = []
        for name, paths in self.lists.items():
            read = [read_list(p) for p in paths]
            tables.append(table(name, [d for ds, _ in read for d in ds],
                                [u for _, us in read for u in us]))
        tables += [table("blocked_domain", self.domains, ()), table("blocked_url", (), self.urls)]
        object.__setattr__(self, "_tables", tuple(tables))
        n = sum(len(d) + len(u) for _, d, u in tables)
        return f"url_filter: {n:,} blocked domains and URLs"

    def _lookup(self):
        if getattr(self, "_tables", None) is None:
            self.prepare()
        return self._tables

    def _urls(self, df):
        if self.url_column not in df.columns:
            raise ValueError(f"url_filter: the partition has no column {self.url_column!r}")
        return dispatch.to_host(df[[self.url_column]])[self.url_column]

    def reason_codes(self, df):
        return self._codes(self._urls(df))

    def _codes(self, urls):
        tables = self._lookup()
        code_of = {r: k for k, r in enumerate(self.reasons, 1)}
        banned = frozenset(w.lower() for w in self.banned_words)
        soft = frozenset(w.lower() for w in self.soft_banned_words)
        subwords = tuple(w.lower() for w in self.banned_subwords)
        codes = np.zeros(len(urls), dtype=np.uint8)
        for k, url in enumerate(urls.tolist()):
            if not isinstance(url, str) or not url:
                continue
            codes[k] = self._code(url, tables, code_of, banned, soft, subwords)
        return codes

    def _code(self, url, tables, code_of, banned, soft, subwords) -> int:
        host = url_host(url).removeprefix("www.")
        parents = [".".join(host.split(".")[i:]) for i in range(host.count(".") + 1)]
        norm = None
        for name, domains, urls in tables:
            if domains and any(p in domains for p in parents):
                return code_of[name]
            if urls:
                norm = norm or normalize_url(url)
                if norm in urls:
                    return code_of[name]
        low = url.lower()
        if banned or soft:
            words = set(_WORDS.findall(low))
            if words & banned:
                return code_of["banned_word"]
            if len(words & soft) >= self.soft_banned_threshold:
                return code_of["soft_banned_words"]
        if any(s in low for s in subwords):
            return code_of["banned_subword"]
        return 0

    def evaluate(self, df):
        urls = self._urls(df)
        codes = self._codes(urls)
        missing = int(urls.isna().sum() + (urls == "").sum())
        return codes, df, {"no_url": missing} if missing else {}
