"""span_dedup: cut spans of lines, paragraphs or sentences repeated across the corpus out of
every document but the first that has them (boilerplate: cookie banners, navigation, licence
footers), as datatrove's ``SentenceDedup`` and dolma's paragraph dedup."""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import Field, model_validator

from gpupipe.backends import dispatch
from gpupipe.frame import ID, TEXT, text_array
from gpupipe.stages.base import GlobalStage, stage
from gpupipe.stages.dedup.common import (
    OLD_BASE,
    OLD_RUN_SHIFT,
    POS,
    ROW,
    AgainstIndexes,
    Keep,
    doc_codes,
    group_losers,
    index_parts,
    is_old,
    old_part,
    rank_order,
    read_index_part,
    split_codes,
)
from gpupipe.stages.steps import Map, Output, Reduce

Norm = Literal["case", "whitespace", "digits", "punctuation"]
NORMS: tuple[Norm, ...] = ("case", "digits", "punctuation", "whitespace")

#: dedup/spans.parquet: one row per span cut out of a document (or that would be, annotating)
SPANS_SCHEMA = pa.schema([
    ("id", pa.string()),            # the document it was cut from
    ("start", pa.int64()),          # its character range in that document's text as it came in
    ("end", pa.int64()),
    ("hash", pa.uint64()),          # the span's hash (of its normalised units)
    ("count", pa.int64()),          # documents that have the span (earlier runs included)
    ("kept_by", pa.string()),       # the document that kept it
    ("kept_run", pa.string()),      # the earlier run that document is in (null: this run)
    ("stage", pa.string()),
    ("bytes", pa.int64()),          # bytes this span removed (not counted by an earlier span)
    ("text", pa.string()),          # the span's text as it was in the document
])

#: what the shuffle of span hashes moves: a row per (span, document)
#: (``n``: documents the row stands for, an earlier run's index row for all of its partition's
#: documents with the span; ``occ``: the span's occurrences in them)
_KEYS = pa.schema([("h", pa.int64()), ("doc", pa.int64()), ("length", pa.int64()),
                   ("id", pa.string()), ("n", pa.int64()), ("occ", pa.int64())])


class SpanKeys:
    """Step ``spans``: partition ``i`` -> its documents' units and windows (side files, for the
    cut) and one row per distinct window hash per document (what the shuffle moves)."""

    def __init__(self, unit: str, span: int, norms: tuple[str, ...], keyed: bool = True):
        self.unit, self.span, self.norms, self.keyed = unit, span, norms, keyed

    def __call__(self, ctx, i: int) -> Output:
        from gpupipe.kernels.spans import norm_table

        df = ctx.read(i)
        offsets, data = dispatch.text_buffers(df[TEXT])
        table = norm_table(*(n in self.norms for n in NORMS))
        nunits, ends, nwin, wh = dispatch.kernels_for(df).span_units(offsets, data, self.unit,
                                                                      self.span, table)
        host_off = _host(offsets)
        n = len(df)
        unit_doc = np.repeat(np.arange(n), nunits)
        rel_ends = ends - host_off[:-1][unit_doc]   # from each document's start
        files = {"nunits": nunits, "ends": rel_ends, "nwin": nwin, "wh": wh}
        counters = {"documents": n, "units": int(nunits.sum()), "spans": int(nwin.sum())}
        if not self.keyed:   # counting: bloom reads the window hashes alone
            return Output(None, files=files, counters=counters)
        win_doc = np.repeat(np.arange(n), nwin)
        keys = pd.DataFrame({"h": wh.view(np.int64), "row": win_doc})
        occ = keys.groupby(["h", "row"], sort=False).size()
        keys = keys.drop_duplicates(["h", "row"], keep="first")
        occ = occ.reindex(pd.MultiIndex.from_frame(keys[["h", "row"]])).to_numpy()
        rows = keys["row"].to_numpy()
        length = np.diff(host_off)
        ids = text_array(dispatch.to_host(df[[ID]])[ID]).cast(pa.string())
        out = pa.table({"h": keys["h"].to_numpy(), "doc": doc_codes(i, n)[rows],
                        "length": length[rows], "id": ids.take(pa.array(rows)),
                        "n": np.ones(len(rows), np.int64), "occ": occ.astype(np.int64)},
                       schema=_KEYS)
        return Output(out, files=files, counters=counters)


class EarlierSpans:
    """Step ``earlier``: partition ``i`` of the earlier runs' span indexes -> the same rows as
    `SpanKeys`, with the codes of earlier documents (they come first in keep order)."""

    def __init__(self, indexes: list[dict]):
        self.indexes = indexes

    def __call__(self, ctx, i: int) -> Output:
        k, p = index_parts(self.indexes)[i]
        t = read_index_part(self.indexes, k, p)
        doc = doc_codes(old_part(k, p), t.num_rows)
        return Output(pa.table({"h": t["h"], "doc": doc,
                                "length": np.zeros(t.num_rows, np.int64),
                                "id": t["id"].cast(pa.string()), "n": t["n"], "occ": t["n"]},
                               schema=_KEYS),
                      counters={"earlier_spans": t.num_rows})


class SpanLosers:
    """Step ``count``: one bucket of span hashes -> the (document, span) pairs to cut: every
    document of a span found in more than ``max_occurrences`` documents, but the first in keep
    order (earlier runs' documents first). ``within_document`` counts occurrences instead, and
    the first document loses its own repeats (a row with ``repeat``: all but the first)."""

    def __init__(self, keep: str, max_occurrences: int, within_document: bool):
        self.keep, self.max_occurrences = keep, max_occurrences
        self.within_document = within_document

    def __call__(self, ctx, table: pa.Table) -> Output:
        frame = table.to_pandas()
        old = is_old(frame["doc"].to_numpy())
        work = frame.assign(new=~old, old=old, new_occ=np.where(old, 0, frame["occ"]))
        by_hash = work.groupby("h", sort=False)
        count = by_hash["n"].transform("sum").to_numpy()
        seen_before = by_hash["old"].transform("any").to_numpy()
        found = by_hash["new_occ" if self.within_document else "new"].transform("sum")
        # a span an earlier run kept is cut everywhere here; others when found often enough
        hot = seen_before | (found.to_numpy() > self.max_occurrences)
        frequent = frame[hot].assign(count=count[hot])
        lost = group_losers(frequent, ["h"], self.keep).assign(repeat=False)
        if self.within_document:   # the first document of a span keeps its first occurrence
            ranked = frequent.iloc[rank_order(frequent, self.keep)]
            ranked = ranked.sort_values("h", kind="stable")
            first = ~ranked.duplicated("h").to_numpy()
            mine = ranked[first & ~is_old(ranked["doc"].to_numpy())
                          & (ranked["occ"].to_numpy() > 1)]
            lost = pd.concat([lost, mine.assign(kept=mine["doc"], duplicate_of=mine["id"],
                                                repeat=True)], ignore_index=True)
        part, row = split_codes(lost["doc"].to_numpy())
        out = pa.table({POS: part, ROW: row, "h": lost["h"].to_numpy(),
                        "count": lost["count"].to_numpy().astype(np.int64),
                        "kept": lost["kept"].to_numpy().astype(np.int64),
                        "kept_by": lost["duplicate_of"].astype(str).tolist(),
                        "repeat": lost["repeat"].to_numpy().astype(bool)})
        counters = {"distinct_spans": int(frame.loc[~old, "h"].nunique()),
                    "repeated_spans": int(frame.loc[hot & ~old, "h"].nunique())}
        return Output(out, counters=counters)


class BloomSeen:
    """Step ``bloom`` (``counting: bloom``), one task: every window of every partition, in
    input order, tested against and inserted into one Bloom filter (`gpupipe.kernels.bloom`),
    the earlier runs' spans inserted first. Writes a bit per window, set where the window was
    (probably) seen before: the windows to cut. The filter is sized for the number of windows
    (at least the distinct spans) so that no test is a false positive with more than
    ``rate`` probability."""

    def __init__(self, within_document: bool, rate: float, indexes: list[dict]):
        self.within_document, self.rate, self.indexes = within_document, rate, indexes

    def __call__(self, ctx, i: int) -> Output:
        import pyarrow.parquet as pq

        from gpupipe.kernels.bloom import (
            BLOCK_BITS,
            bloom_insert,
            bloom_scan,
            bloom_size,
            fill_fp_rate,
            fp_rate,
        )

        nparts = ctx.npartitions
        nwin = [np.load(ctx.side("spans", "nwin", p, "npy")) for p in range(nparts)]
        first = np.zeros(nparts + 1, np.int64)
        np.cumsum([int(x.sum()) for x in nwin], out=first[1:])
        earlier = [os.path.join(self.indexes[k]["dir"], f"part-{p:05d}.parquet")
                   for k, p in index_parts(self.indexes)]
        n_earlier = sum(pq.read_metadata(f).num_rows for f in earlier)
        nblocks, k = bloom_size(int(first[-1]) + n_earlier, self.rate)
        bits = np.zeros(nblocks * (BLOCK_BITS // 64), np.uint64)
        for f in earlier:
            bloom_insert(pq.read_table(f, columns=["h"])["h"].to_numpy().view(np.uint64),
                         bits, nblocks, k)
        # a bit per window, each partition's from a byte boundary: byte_first[p]
        packed, byte_first, nseen = [], np.zeros(nparts + 1, np.int64), 0
        for p in range(nparts):
            wh = np.ascontiguousarray(np.load(ctx.side("spans", "wh", p, "npy"), mmap_mode="r"))
            seen = np.zeros(len(wh), np.uint8)
            bloom_scan(wh, nwin[p].astype(np.int64), bits, nblocks, k, self.within_document,
                       seen)
            nseen += int(seen.sum())
            packed.append(np.packbits(seen))
            byte_first[p + 1] = byte_first[p] + len(packed[-1])
        counters = {"bloom_bytes": int(bits.nbytes), "bloom_hashes": k,
                    "bloom_keys": int(first[-1]) + n_earlier, "bloom_seen": nseen,
                    "bloom_fp_rate_bound": fp_rate(int(first[-1]) + n_earlier, nblocks, k),
                    "bloom_fp_rate_end": fill_fp_rate(bits, k)}
        return Output(None, files={"seen": np.concatenate(packed) if packed
                                   else np.zeros(0, np.uint8), "first": byte_first},
                      counters=counters)


def _bloom_hits(ctx, i: int, windows: pd.DataFrame) -> pd.DataFrame:
    """The windows of partition ``i`` the ``bloom`` step saw before, as `SpanCut` takes the
    count step's rows (no count, no keeping document: a Bloom filter knows neither)."""
    first = np.load(ctx.side("bloom", "first", 0, "npy"))
    packed = np.load(ctx.side("bloom", "seen", 0, "npy"), mmap_mode="r")
    bits = np.unpackbits(packed[first[i]:first[i + 1]])[:len(windows)].astype(bool)
    hits = windows[bits].reset_index(drop=True)
    return hits.assign(count=np.zeros(len(hits), np.int64), kept=np.zeros(len(hits), np.int64),
                       kept_by="")


class SpanCut:
    """The output step (``cut``): partition ``i`` without the units of its spans to cut, the
    documents left with fewer than ``min_words`` words dropped; ``annotate`` keeps the text and
    adds the share of characters that would go. Writes the span audit and this run's index."""

    def __init__(self, span: int, min_words: int, annotate: bool, label: str, runs: list[str],
                 bloom: bool = False):
        self.span, self.min_words, self.annotate = span, min_words, annotate
        self.label, self.runs, self.bloom = label, runs, bloom

    def __call__(self, ctx, i: int) -> Output:
        df = ctx.read(i)
        n = len(df)
        nunits = np.load(ctx.side("spans", "nunits", i, "npy"))
        rel_ends = np.load(ctx.side("spans", "ends", i, "npy"))
        nwin = np.load(ctx.side("spans", "nwin", i, "npy"))
        wh = np.load(ctx.side("spans", "wh", i, "npy"))
        win_doc = np.repeat(np.arange(n), nwin)
        win_first = np.zeros(n + 1, np.int64)
        np.cumsum(nwin, out=win_first[1:])
        unit_first = np.zeros(n + 1, np.int64)
        np.cumsum(nunits, out=unit_first[1:])

        windows = pd.DataFrame({"row": win_doc, "h": wh.view(np.int64),
                                "w": np.arange(len(wh))})
        lost = None if self.bloom else ctx.bucket("count", i)
        if self.bloom:
            hits = _bloom_hits(ctx, i, windows)
        elif lost is not None and lost.num_rows:
            hits = windows.merge(lost.to_pandas()[[ROW, "h", "count", "kept", "kept_by",
                                                   "repeat"]]
                                 .rename(columns={ROW: "row"}), on=["row", "h"])
            hits = hits.sort_values("w", kind="stable").reset_index(drop=True)
            # a document's own repeats: its first occurrence stays
            own_first = hits["repeat"].to_numpy() & ~hits.duplicated(["row", "h"]).to_numpy()
            hits = hits[~own_first].reset_index(drop=True)
        else:
            hits = windows.iloc[:0].assign(count=np.zeros(0, np.int64),
                                           kept=np.zeros(0, np.int64), kept_by="")
        cut_win = np.zeros(len(wh), bool)
        cut_win[hits["w"].to_numpy()] = True
        # window w of document d covers units unit_first[d] + (w - win_first[d]) + [0, span)
        first_unit = unit_first[win_doc] + np.arange(len(wh)) - win_first[win_doc]
        cover = np.zeros(len(rel_ends) + 1, np.int64)
        np.add.at(cover, first_unit[cut_win], 1)
        np.add.at(cover, first_unit[cut_win] + self.span, -1)
        cut = np.cumsum(cover[:-1]) > 0

        offsets, data = dispatch.text_buffers(df[TEXT])
        host_off = _host(offsets)
        unit_doc = np.repeat(np.arange(n), nunits)
        ends = rel_ends + host_off[:-1][unit_doc]
        kernels = dispatch.kernels_for(df)
        new_off, new_data, changed = kernels.cut_units(offsets, data, nunits, ends, cut)
        new_off, new_data, changed = _host(new_off), _host(new_data, np.uint8), _host(
            changed, bool)

        audit = self._audit(df, hits, host_off, ends, unit_first, first_unit, i)
        removed = int(np.diff(host_off).sum() - np.diff(new_off).sum())
        counters = {"documents_cut": int(changed.sum()), "spans_cut": int(len(hits)),
                    "units_cut": int(cut.sum()), "bytes_cut": removed}
        index = {"parquet": _index_table(df, wh, win_doc)}
        if self.annotate:
            before = kernels.count_chars(offsets, data)
            after = kernels.count_chars(new_off, new_data)
            before, after = _host(before, np.int64), _host(after, np.int64)
            share = np.where(before > 0, (before - after) / np.maximum(before, 1), 0.0)
            return Output(df.assign(span_dedup_fraction=share.astype(np.float64)),
                          counters=counters, audit={"spans": audit}, index=index)
        frame = df.assign(**{TEXT: dispatch.string_column(df[TEXT], new_off, new_data,
                                                          keep=changed)})
        drop = np.zeros(n, bool)
        if self.min_words > 0 and changed.any():
            words = _host(kernels.count_words(new_off, new_data), np.int64)
            drop = changed & (words < self.min_words)
        drops = {}
        if drop.any():
            frame = dispatch.filter_rows(frame, ~drop)
            drops = {"span_dedup_emptied": int(drop.sum())}
        return Output(frame, drops=drops, counters=counters, audit={"spans": audit},
                      index=index)

    def _audit(self, df, hits: pd.DataFrame, host_off, ends, unit_first, first_unit,
               i: int) -> pa.Table:
        """A row per cut window: its document, character range, hash, count, the document that
        kept it and the bytes it removed first."""
        from gpupipe.kernels.utf8 import utf8_buffers

        if hits.empty:
            return SPANS_SCHEMA.empty_table()
        w = hits["w"].to_numpy()
        rows = hits["row"].to_numpy()
        # the text and id of the documents that lost a span, on the host; ``local``: their rows
        lost_rows = np.zeros(len(df), bool)
        lost_rows[rows] = True
        texts = dispatch.to_host(dispatch.filter_rows(df[[TEXT, ID]], lost_rows))
        local = np.searchsorted(np.flatnonzero(lost_rows), rows)
        u0 = first_unit[w]
        u1 = u0 + self.span - 1
        start = np.where(u0 > unit_first[rows], ends[np.maximum(u0 - 1, 0)], host_off[rows])
        end = ends[u1]
        # bytes each window removes that no earlier cut window of its document did (windows
        # are in document order: the reach of the cuts before one is the running max of ends)
        same = np.zeros(len(w), bool)
        same[1:] = rows[1:] == rows[:-1]
        reach_before = np.roll(pd.Series(end).groupby(rows).cummax().to_numpy(), 1)
        reach = np.where(same, np.maximum(start, reach_before), start)
        removed = np.maximum(end - reach, 0)
        # byte positions in the host copy of the text, then characters from the document start
        hoff, data = utf8_buffers(text_array(texts[TEXT]))
        doc0 = hoff[local]
        a, b = doc0 + (start - host_off[rows]), doc0 + (end - host_off[rows])
        lead = np.zeros(len(data) + 1, np.int64)
        np.cumsum((data & 0xC0) != 0x80, out=lead[1:])
        chars_start = lead[a] - lead[doc0]
        chars_end = lead[b] - lead[doc0]
        span_text = [bytes(data[x:y]).decode("utf-8") for x, y in zip(a, b)]
        kept_part, _ = split_codes(hits["kept"].to_numpy())
        runs = [self.runs[(int(p) - OLD_BASE) >> OLD_RUN_SHIFT] if p >= OLD_BASE else None
                for p in kept_part]
        if self.bloom:   # a Bloom filter counts nothing and keeps no document
            count, kept_by = pa.nulls(len(w), pa.int64()), pa.nulls(len(w), pa.string())
        else:
            count = pa.array(hits["count"].to_numpy().astype(np.int64))
            kept_by = pa.array(hits["kept_by"].astype(str).tolist(), pa.string())
        ids = text_array(texts[ID]).cast(pa.string()).take(pa.array(local))
        return pa.table({"id": ids, "start": chars_start.astype(np.int64),
                         "end": chars_end.astype(np.int64),
                         "hash": hits["h"].to_numpy().view(np.uint64),
                         "count": count,
                         "kept_by": kept_by,
                         "kept_run": pa.array(runs, pa.string()),
                         "stage": pa.array([self.label] * len(w), pa.string()),
                         "bytes": removed.astype(np.int64),
                         "text": pa.array(span_text, pa.string())}, schema=SPANS_SCHEMA)


def _host(x, dtype=np.int64) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x.astype(dtype, copy=False)
    if hasattr(x, "copy_to_host"):
        return np.asarray(x.copy_to_host(), dtype)
    if hasattr(x, "get"):   # cupy
        return np.asarray(x.get(), dtype)
    return np.asarray(x, dtype)


def _index_table(df, hashes: np.ndarray, rows: np.ndarray) -> pa.Table:
    """This run's span index partition: each distinct span of its documents once (cut or not:
    an earlier run's document keeps every span it has first), with the first document that has
    it and how many do."""
    pairs = pd.DataFrame({"h": hashes.view(np.int64), "row": rows}).drop_duplicates()
    by = pairs.groupby("h", sort=False)["row"]
    first = pairs.drop_duplicates("h")
    n = by.size().reindex(first["h"]).to_numpy().astype(np.int64)
    ids = text_array(dispatch.to_host(df[[ID]])[ID]).cast(pa.string())
    return pa.table({"h": first["h"].to_numpy(), "id": ids.take(pa.array(first["row"].to_numpy())),
                     "n": n})


@stage("span_dedup")
class SpanDedup(AgainstIndexes, GlobalStage):
    """Cut spans repeated across the corpus out of documents: boilerplate lines, paragraphs or
    sentences (datatrove's ``SentenceDedup``, dolma's paragraph dedup).

    Each document is cut into ``unit``s (``line``, ``paragraph``: text between blank lines,
    ``sentence``), each unit normalised (``normalize``: ``case`` folds case and accents,
    ``digits`` makes every run of digits ``0``, ``punctuation`` and ``whitespace`` make them
    separators) and hashed, and every window of ``span`` consecutive units is a span. A span
    found in more than ``max_occurrences`` documents (default 1: seen before) is cut from every
    document but the first in ``keep`` order (``first`` in input order, ``longest``,
    ``shortest_id``); the first keeps all of its text. With ``within_document``, occurrences
    are counted instead of documents and the first document also loses its own repeats of the
    span, all but the first (datatrove's ``SentenceDedup`` does this). A document left with fewer than
    ``min_words`` whitespace words is dropped with reason ``span_dedup_emptied``.

    ``counting: exact`` (the default): span hashes (64-bit) are shuffled by hash through the
    step runner, so memory is bounded per bucket and no span is cut that was not seen.
    ``counting: bloom`` is dolma's approximate mode, for corpora too large to shuffle: one task
    reads every window hash in input order through one Bloom filter of a few bytes per window
    (about 22 bits at the default ``false_positive_rate`` of 1e-4), and a window that tests
    positive is cut. A span is never missed, but a span seen nowhere else is cut with
    probability at most ``false_positive_rate`` (the filter is sized for every window of the
    run; run.json has its size, the bound and the rate the filled filter has). It needs
    ``max_occurrences: 1`` and ``keep: first``, and its audit rows have no count and no
    keeping document. ``mode: annotate`` cuts nothing and adds
    ``span_dedup_fraction``, the share of each document's characters that would go. Every cut
    span is written to ``dedup/spans.parquet/`` (document, character range, hash, count, the
    document that kept it, its text). ``against``: earlier run directories whose spans count as
    already kept (their ``dedup/index/span_dedup/``, which every run writes; URLs of runs on
    object storage are read with ``storage_options`` as in exact_dedup). Splitting,
    hashing and cutting are kernels (`gpupipe.kernels.spans`) that run on the GPU on cuDF.
    """

    backends: ClassVar[tuple[str, ...]] = ("pandas", "cudf")
    reasons: ClassVar[tuple[str, ...]] = ("span_dedup_emptied",)
    host_steps: ClassVar[str] = "the count of each span and the audit on the host"

    unit: Literal["line", "paragraph", "sentence"] = "sentence"
    span: Annotated[int, Field(ge=1, le=64)] = 3
    normalize: tuple[Norm, ...] = NORMS
    max_occurrences: Annotated[int, Field(ge=1)] = 1
    keep: Keep = "first"
    within_document: bool = False
    min_words: Annotated[int, Field(ge=0)] = 50
    mode: Literal["remove", "annotate"] = "remove"
    against: tuple[str, ...] = ()
    storage_options: dict[str, Any] | None = None
    counting: Literal["exact", "bloom"] = "exact"
    false_positive_rate: Annotated[float, Field(gt=0, le=0.1)] = 1e-4

    @model_validator(mode="after")
    def _bloom_counts_first_sightings(self):
        if self.counting == "bloom" and (self.max_occurrences != 1 or self.keep != "first"):
            raise ValueError("counting: bloom tells only whether a span was seen before, in "
                             "input order: it needs max_occurrences: 1 and keep: first "
                             f"(got max_occurrences: {self.max_occurrences}, keep: {self.keep})")
        return self


    def index_params(self) -> dict:
        return {"unit": self.unit, "span": self.span, "normalize": sorted(set(self.normalize))}

    def added_columns(self) -> dict[str, str]:
        return {"span_dedup_fraction": "float64"} if self.mode == "annotate" else {}


    def steps(self, ctx):
        indexes = self.earlier_indexes(ctx.output_dir)
        cut = Map("cut", SpanCut(self.span, self.min_words, self.mode == "annotate", ctx.label,
                                 [ix["run"] for ix in indexes], self.counting == "bloom"),
                  output=True)
        if self.counting == "bloom":
            return [Map("spans", SpanKeys(self.unit, self.span, tuple(self.normalize), False)),
                    Map("bloom", BloomSeen(self.within_document, self.false_positive_rate,
                                           indexes), items=1),
                    cut]
        keyed = ("spans", "earlier") if indexes else "spans"
        return [
            Map("spans", SpanKeys(self.unit, self.span, tuple(self.normalize)),
                shuffle_on=("h",)),
            *([Map("earlier", EarlierSpans(indexes), items=len(index_parts(indexes)),
                   shuffle_on=("h",))] if indexes else []),
            Reduce("count", SpanLosers(self.keep, self.max_occurrences, self.within_document),
                   of=keyed, split_by=POS),
            cut,
        ]
