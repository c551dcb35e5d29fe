"""decontaminate: remove text that overlaps evaluation sets (n-grams of normalised words)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from gpupipe.backends import dispatch
from gpupipe.backends.dispatch import kernels_for, text_buffers
from gpupipe.errors import SpecError
from gpupipe.frame import ID, TEXT
from gpupipe.kernels.catalog import MAX_NGRAM
from gpupipe.stages.base import Filter, StageResult, stage

log = logging.getLogger("gpupipe")

MAX_EVAL_SETS = 64
_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".jsonl.zstd",
             ".parquet", ".txt", ".txt.gz", ".txt.zst")


class EvalSet(BaseModel):
    """One evaluation set: ``name``, ``path`` (a file, directory or glob of JSONL, Parquet or
    ``.txt`` with one sample per line) and ``text_column`` (JSONL / Parquet)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    path: Annotated[str, Field(min_length=1)]
    text_column: str = "text"
    #: fsspec options when ``path`` is a URL (``s3://``: endpoint_url, key, secret)
    storage_options: dict[str, Any] = Field(default_factory=dict)


@dataclasses.dataclass
class EvalIndex:
    """The hashed n-grams of every evaluation set, ready for `contamination_scan`."""

    keys: np.ndarray
    masks: np.ndarray
    bloom: np.ndarray
    lengths: np.ndarray
    #: per set: samples, samples too short to match, n-grams (before merging equal ones)
    samples: dict[str, int]
    too_short: dict[str, int]
    ngrams: dict[str, int]
    seconds: float

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.masks.nbytes + self.bloom.nbytes

    def describe(self) -> str:
        return (f"{len(self.keys):,} distinct n-grams from {sum(self.samples.values()):,} "
                f"samples ({self.nbytes / 2**20:.1f} MiB, built in {self.seconds:.2f} s)")


def _files(es: EvalSet) -> list[str]:
    from gpupipe.errors import InputError
    from gpupipe.io.files import expand_paths, is_url

    try:
        files = expand_paths(es.path, suffixes=_SUFFIXES, storage_options=es.storage_options)
    except InputError as e:
        if is_url(es.path):   # a remote store's own error (credentials, bucket) says more
            raise SpecError(f"decontaminate: eval set {es.name!r}: {e}") from None
        raise SpecError(f"decontaminate: eval set {es.name!r}: {es.path!r} matches no file "
                        f"(relative paths are resolved from {os.getcwd()})") from None
    bad = [f for f in files if not f.lower().endswith(_SUFFIXES)]
    if bad:
        raise SpecError(f"decontaminate: eval set {es.name!r}: {bad[0]} is not JSONL, Parquet "
                        f"or .txt (one sample per line)")
    return files


def load_samples(es: EvalSet) -> list[str]:
    """The texts of an evaluation set. A missing column, a line that is not JSON or a text that
    is not a string stops the run, naming the file and line."""
    from gpupipe.io.files import arrow_path, read_bytes

    out: list[str] = []
    where = f"decontaminate: eval set {es.name!r}"
    for path in _files(es):
        name = path.lower()
        if name.endswith(".parquet"):
            where_, fs = arrow_path(path, es.storage_options)
            try:
                schema = pq.read_schema(where_, filesystem=fs)
            except Exception as e:
                raise SpecError(f"{where}: {path} is not a readable Parquet file ({e})") from None
            if es.text_column not in schema.names:
                raise SpecError(f"{where}: {path} has no column {es.text_column!r} (columns: "
                                f"{', '.join(schema.names)}); set text_column")
            col = pq.read_table(where_, columns=[es.text_column],
                                filesystem=fs)[es.text_column]
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                raise SpecError(f"{where}: {path}: column {es.text_column!r} is {col.type}, not "
                                f"text")
            out.extend(t for t in col.to_pylist() if t)
            continue
        raw, damage = read_bytes(path, es.storage_options)
        if damage:
            raise SpecError(f"{where}: {path} is damaged ({damage})")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw[:e.start].count(b"\n") + 1
            raise SpecError(f"{where}: {path}:{line}: not valid UTF-8") from None
        if ".txt" in name:
            out.extend(line for line in text.splitlines() if line.strip())
            continue
        for k, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise SpecError(f"{where}: {path}:{k}: not a JSON line ({e})") from None
            if not isinstance(rec, dict) or es.text_column not in rec:
                keys = ", ".join(rec) if isinstance(rec, dict) else type(rec).__name__
                raise SpecError(f"{where}: {path}:{k}: no field {es.text_column!r} (has: "
                                f"{keys}); set text_column")
            value = rec[es.text_column]
            if value is None:
                continue
            if not isinstance(value, str):
                raise SpecError(f"{where}: {path}:{k}: {es.text_column!r} is "
                                f"{type(value).__name__}, not a string")
            out.append(value)
    return out


def build_eval_index(eval_sets, ngram: int, min_sample_words: int) -> EvalIndex:
    from gpupipe.kernels.contamination import build_index, sample_keys
    from gpupipe.kernels.utf8 import utf8_buffers

    t0 = time.perf_counter()
    keys, sets, lengths = [], [], {ngram}
    samples, too_short, ngrams = {}, {}, {}
    for k, es in enumerate(eval_sets):
        texts = load_samples(es)
        off, data = utf8_buffers(pa.array(texts, pa.large_string()))
        kk, rows, words = sample_keys(off, data, ngram, min_sample_words)
        keys.append(kk)
        sets.append(np.full(len(kk), k, np.int64))
        lengths.update(int(w) for w in np.unique(words[(words < ngram) & (words >= min_sample_words)]))
        samples[es.name], ngrams[es.name] = len(texts), len(kk)
        too_short[es.name] = int((words < min_sample_words).sum())
    ix = build_index(np.concatenate(keys), np.concatenate(sets))
    return EvalIndex(ix["keys"], ix["masks"], ix["bloom"], np.array(sorted(lengths), np.int64),
                     samples, too_short, ngrams, time.perf_counter() - t0)


def _char_spans(text: str, spans: np.ndarray) -> list[tuple[int, int]]:
    """Byte spans of ``text``'s UTF-8 as code point spans."""
    raw = text.encode("utf-8")
    return [(len(raw[:a].decode("utf-8")), len(raw[:b].decode("utf-8"))) for a, b in spans]


def cut_pieces(text: str, spans: np.ndarray, margin: int, min_chars: int) -> list[str]:
    """``text`` without the matched byte ``spans`` and ``margin`` characters on each side;
    pieces (stripped of surrounding whitespace) shorter than ``min_chars`` are left out."""
    cut: list[list[int]] = []
    for a, b in sorted(_char_spans(text, spans)):
        a, b = max(0, a - margin), min(len(text), b + margin)
        if cut and a <= cut[-1][1]:
            cut[-1][1] = max(cut[-1][1], b)
        else:
            cut.append([a, b])
    pieces, at = [], 0
    for a, b in cut + [[len(text), len(text)]]:
        piece = text[at:a].strip()
        if piece and len(piece) >= min_chars:
            pieces.append(piece)
        at = b
    return pieces


@stage("decontaminate")
class Decontaminate(Filter):
    """Remove text that overlaps evaluation sets: documents holding any ``ngram``-word sequence
    of an evaluation sample (words of normalised text: lower case, punctuation and accents
    stripped), or a whole sample shorter than ``ngram`` words (of at least
    ``min_sample_words``).

    ``policy: drop`` removes such documents (reason ``contaminated``). ``policy: cut`` removes
    each matched region with ``margin`` characters on each side and keeps the pieces of at
    least ``min_piece_chars`` as documents ``<id>#0``, ``<id>#1``, ...; a document with more than
    ``max_matches`` regions (runs of overlapping matched n-grams), or with no piece left, is
    dropped. With ``mode: annotate`` nothing is dropped or cut: ``decontaminate_reason`` and
    ``decontaminate_sets`` (the names of the sets matched) mark the documents.

    Counters per set: ``<set>:documents`` hit, ``<set>:ngrams`` matched, ``<set>:chars_removed``
    (of the documents it hit). The index is built once on the client (hashed n-grams, sorted,
    with a bitmap) and shipped to the workers once; the lookup is a compiled kernel on both
    targets.
    """

    reasons: ClassVar[tuple[str, ...]] = ("contaminated",)
    kernels: ClassVar[tuple[str, ...]] = ("contamination_scan",)

    eval_sets: Annotated[tuple[EvalSet, ...], Field(min_length=1, max_length=MAX_EVAL_SETS)]
    ngram: Annotated[int, Field(ge=1, le=MAX_NGRAM)] = 13
    min_sample_words: Annotated[int, Field(ge=1)] = 3
    policy: Literal["drop", "cut"] = "drop"
    margin: Annotated[int, Field(ge=0)] = 200
    min_piece_chars: Annotated[int, Field(ge=0)] = 200
    max_matches: Annotated[int, Field(ge=0)] = 10

    def __post_init__(self):
        names = [e.name for e in self.eval_sets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"eval set names must be unique; repeated: {', '.join(dup)}")

    def params(self) -> dict[str, Any]:
        out = super().params()
        out["eval_sets"] = [{k: v for k, v in e.model_dump().items()
                             if k != "text_column" or v != "text"} for e in self.eval_sets]
        return out

    def identity(self) -> dict:
        """Size and modification time (or ETag) of every evaluation file: an edited eval set
        reruns."""
        from gpupipe.io.files import file_identity

        out = {}
        for es in self.eval_sets:
            try:
                files = _files(es)
            except SpecError:
                files = []
            out[es.name] = [file_identity(f, es.storage_options) for f in files]
        return out

    def explain_notes(self) -> list[str]:
        sets = ", ".join(f"{e.name} ({e.path})" for e in self.eval_sets)
        how = ("drop the document" if self.policy == "drop" else
               f"cut matches with {self.margin} characters each side, keep pieces of "
               f">= {self.min_piece_chars}, drop above {self.max_matches} matches")
        return [f"{self.ngram}-grams of normalised words against {sets}; {how}"]

    def added_columns(self) -> dict[str, str]:
        extra = {"decontaminate_sets": "string"} if self.mode == "annotate" else {}
        return {**super().added_columns(), **extra}

    # ---------------------------------------------------------------- the index

    def prepare(self) -> str:
        """Build the index now (on the client, before the partitions run)."""
        return self.index().describe()

    def index(self) -> EvalIndex:
        ix = self.__dict__.get("_index")
        if ix is None:
            ix = build_eval_index(self.eval_sets, self.ngram, self.min_sample_words)
            object.__setattr__(self, "_index", ix)
        return ix

    # ---------------------------------------------------------------- per partition

    def _scan(self, df):
        ix = self.index()
        return kernels_for(df).contamination_scan(
            *text_buffers(df[TEXT]), ix.keys, ix.masks, ix.bloom, ix.lengths,
            len(self.eval_sets), self.max_matches + 1)

    def _counters(self, hit_sets, set_hits, removed) -> dict[str, int]:
        out = {}
        for k, es in enumerate(self.eval_sets):
            on = ((hit_sets >> np.uint64(k)) & np.uint64(1)).astype(bool)
            if on.any():
                out[f"{es.name}:documents"] = int(on.sum())
                out[f"{es.name}:ngrams"] = int(set_hits[:, k].sum())
                out[f"{es.name}:chars_removed"] = int(removed[on].sum())
        return out

    def _set_names(self, hit_sets) -> list[str | None]:
        return [",".join(e.name for k, e in enumerate(self.eval_sets) if (int(m) >> k) & 1)
                or None for m in hit_sets]

    def evaluate(self, df):
        hits, hit_sets, _, set_hits, _, _ = self._scan(df)
        hit = hits > 0
        removed = np.zeros(len(df), np.int64)
        if hit.any() and self.mode == "drop":
            removed[hit] = kernels_for(df).count_chars(*text_buffers(df[TEXT]))[hit]
        if self.mode == "annotate":
            names = self._set_names(hit_sets)
            labels = tuple(sorted({n for n in names if n is not None}))
            codes = np.array([0 if n is None else labels.index(n) + 1 for n in names], np.int64)
            df = df.assign(decontaminate_sets=dispatch.label_column(df, codes, labels))
        return hit.astype(np.uint8), df, self._counters(hit_sets, set_hits, removed)

    def process(self, df) -> StageResult:
        if self.policy == "drop" or self.mode == "annotate":
            return super().process(df)
        hits, hit_sets, nreg, set_hits, regions, _ = self._scan(df)
        hit = np.flatnonzero(hits > 0)
        removed = np.zeros(len(df), np.int64)
        codes = np.zeros(len(df), np.uint8)
        if len(hit) == 0:
            return StageResult(df, {}, {})
        host = dispatch.to_host(df.iloc[hit])
        texts = host[TEXT].tolist()
        pieces: dict[int, list[str]] = {}
        for j, row in enumerate(hit):
            if nreg[row] > self.max_matches:
                got = []
            else:
                got = cut_pieces(texts[j], regions[row, :nreg[row]], self.margin,
                                 self.min_piece_chars)
            removed[row] = len(texts[j]) - sum(len(p) for p in got)
            if got:
                pieces[row] = got
            else:
                codes[row] = 1
        counters = self._counters(hit_sets, set_hits, removed)
        counters["documents_cut"] = len(pieces)
        counters["pieces"] = sum(len(p) for p in pieces.values())
        counters["documents_added"] = counters["pieces"] - len(pieces)
        drop = codes != 0
        rejected = None
        if self.keep_rejected and drop.any():
            rejected = dispatch.filter_rows(df, drop)
            rejected = rejected.assign(reason=self.reason_labels(codes[drop], rejected))
        kept = dispatch.filter_rows(df, ~drop) if drop.any() else df
        if pieces:
            kept = dispatch.like(df, self._expand(dispatch.to_host(kept), np.flatnonzero(~drop),
                                              pieces))
        ndrop = int(drop.sum())
        return StageResult(kept, {"contaminated": ndrop} if ndrop else {}, counters, rejected)

    @staticmethod
    def _expand(frame: pd.DataFrame, rows: np.ndarray, pieces: dict[int, list[str]]):
        """``frame`` (the kept rows, original positions ``rows``) with each cut document
        replaced by its pieces, in place and in order."""
        counts = np.array([len(pieces.get(int(r), (None,))) for r in rows])
        out = frame.iloc[np.repeat(np.arange(len(frame)), counts)].reset_index(drop=True)
        texts = out[TEXT].tolist()
        ids = out[ID].tolist()
        at = 0
        for r, c in zip(rows, counts):
            got = pieces.get(int(r))
            if got is not None:
                for k, p in enumerate(got):
                    texts[at + k] = p
                    ids[at + k] = f"{ids[at + k]}#{k}"
            at += c
        return out.assign(**{TEXT: pd.array(texts, out[TEXT].dtype),
                             ID: pd.array(ids, out[ID].dtype)})
