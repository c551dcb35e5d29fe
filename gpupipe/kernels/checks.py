"""Every kernel run on both targets and compared bit for bit: what ``gpupipe check-gpu``
(`gpupipe.gpu_check`) and the simulator tests run.

A `Check` holds a kernel's CPU call and GPU call on the same `Sample` and the arrays they return;
a document is a mismatch when any of its results differs in any bit.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from gpupipe.kernels import (
    bpe,
    bpe_tables,
    clean,
    contamination,
    hashing,
    langid,
    normalize,
    pii,
    quality,
    repetition,
    spans,
    utf8,
    words,
)

STOP_WORDS = ["the", "be", "to", "of", "and", "that", "have", "with"]
POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
          "use cookies")
C4_OPTIONS = dict(max_word_length=1000, remove_citations=True, terminal_punct=True, min_words=3,
                  lorem=True, javascript=True, curly=True, policy=True,
                  policy_substrings=POLICY, min_sentences=5)
# the hashing of fuzzy_dedup's presets with fewer permutations: each one is
# the same arithmetic, and the simulator pays for every one
_RNG = np.random.default_rng(42)
A32, B32 = (_RNG.integers(lo, 2**32, 16, dtype=np.uint64) for lo in (1, 0))
A64, B64 = (_RNG.integers(lo, 2**61 - 1, 8, dtype=np.uint64) for lo in (1, 0))


@dataclasses.dataclass
class Sample:
    """Documents in the forms the kernels read: the UTF-8 view of the text, the shingle words
    of fuzzy dedup (list<string>) and the text as language id prepares it."""

    texts: pa.Array
    offsets: np.ndarray
    data: np.ndarray
    lists: tuple[np.ndarray, np.ndarray, np.ndarray]
    langid_offsets: np.ndarray
    langid_data: np.ndarray

    @classmethod
    def of(cls, texts) -> Sample:
        arr = texts if isinstance(texts, pa.Array) else pa.array(list(texts), pa.large_string())
        arr = arr.cast(pa.large_string()).fill_null("")
        offsets, data = utf8.utf8_buffers(arr)
        prepared = langid.prepare(arr)
        lo, ld = utf8.utf8_buffers(prepared)
        return cls(arr, offsets, data, hashing.list_buffers(utf8.split_words(arr)), lo, ld)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1] - self.offsets[0])


def synthetic_sample() -> Sample:
    """A few short texts that reach every branch the checks' types need (compile-only mode)."""
    return Sample.of(["", "a", "Hello, world... It's the end.\n\nSecond line [1] here!",
                      "東京は日本の首都です。", "naïve café 😀 e\u0301", "x" * 40])


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    #: what the kernel serves
    used_by: str
    cpu: Callable[[Sample], tuple]
    gpu: Callable[[Sample], tuple]

    def mismatches(self, sample: Sample) -> np.ndarray:
        """Per document: any of its results differs between the targets."""
        return _mismatches(self.cpu(sample), self.gpu(sample), len(sample))

    def compare(self, sample: Sample) -> dict:
        """Run both sides; documents compared, mismatching documents, docs/s and MB/s each."""
        self.cpu(_head(sample))  # compile outside the timing
        t0 = time.perf_counter()
        cpu = self.cpu(sample)
        t_cpu = time.perf_counter() - t0
        self.gpu(_head(sample))
        t0 = time.perf_counter()
        gpu = self.gpu(sample)
        t_gpu = time.perf_counter() - t0
        bad = _mismatches(cpu, gpu, len(sample))
        n, mb = len(sample), sample.nbytes / 1e6
        return {"kernel": self.name, "used_by": self.used_by, "docs": n,
                "mismatches": int(bad.sum()), "first_mismatch": int(np.argmax(bad))
                if bad.any() else None,
                "cpu_docs_per_s": n / t_cpu if t_cpu else None,
                "gpu_docs_per_s": n / t_gpu if t_gpu else None,
                "cpu_mb_per_s": mb / t_cpu if t_cpu else None,
                "gpu_mb_per_s": mb / t_gpu if t_gpu else None}


def _head(sample: Sample, k: int = 4) -> Sample:
    return Sample.of(sample.texts.slice(0, min(k, len(sample))))


def _rows_equal(x: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return np.zeros(n, bool)
    if x.dtype.kind == "f":  # bit for bit, NaNs included
        x = x.view(np.uint32 if x.itemsize == 4 else np.uint64)
        y = y.view(np.uint32 if y.itemsize == 4 else np.uint64)
    eq = x == y
    if eq.ndim == 1:
        return eq
    return eq.reshape(n, eq.size // n).all(axis=1) if n else np.zeros(0, bool)


def _mismatches(cpu: tuple, gpu: tuple, n: int) -> np.ndarray:
    """Per document: any result differs. A `Text` result compares each document's bytes."""
    bad = np.zeros(n, bool)
    for x, y in zip(cpu, gpu, strict=True):
        if isinstance(x, Text):
            bad |= ~x.equal(y)
        else:
            bad |= ~_rows_equal(x, y, n)
    return bad


@dataclasses.dataclass
class Text:
    """UTF-8 data with per-document offsets (C4's rewritten text), or any flat array with them
    (span dedup's units)."""

    data: np.ndarray
    offsets: np.ndarray

    def doc(self, i: int) -> bytes:
        return self.data[self.offsets[i] - self.offsets[0]: self.offsets[i + 1]
                         - self.offsets[0]].tobytes()

    def equal(self, other: Text) -> np.ndarray:
        return np.array([self.doc(i) == other.doc(i) for i in range(len(self.offsets) - 1)],
                        dtype=bool)


def _gpu():
    from gpupipe.kernels import gpu

    return gpu


def _c4(result) -> tuple:
    codes, text, offsets, counts = result
    return codes, Text(text, offsets), counts


SYMBOLS = ("#", "...", "…", "*")

CLEAN_OPTIONS = ({"newlines": True, "remove_control": True, "unicode_spaces": True,
                  "collapse_spaces": False, "strip_lines": True, "max_blank_lines": 2,
                  "strip": True},
                 {"newlines": True, "remove_control": True, "unicode_spaces": True,
                  "collapse_spaces": True, "strip_lines": False, "max_blank_lines": 0,
                  "strip": False})


def _clean(launcher, s: Sample) -> tuple:
    """Both option sets; every other document gets only the steps before normalisation."""
    out = []
    pre = np.arange(len(s)) % 2 == 1
    for options in CLEAN_OPTIONS:
        offsets, data, changed = launcher(s.offsets, s.data, pre, **options)
        out += [Text(data, offsets), changed]
    return tuple(out)


def _langid_cpu(s: Sample) -> tuple:
    scores = langid.langid_scores(s.langid_offsets, s.langid_data)
    return (scores, *langid.pick(scores))


def _langid_gpu(s: Sample) -> tuple:
    scores = _gpu().langid_scores(s.langid_offsets, s.langid_data)
    return (scores, *langid.pick(scores))


TOP, DUP = [2, 3, 4], [5, 6, 7, 8, 9, 10]


def _eval_index(s: Sample):
    """A decontamination index from every other document of the sample (two evaluation sets,
    13-grams and whole samples of 3 to 12 words), so the scan finds matches, partial and whole."""
    evals = s.texts.take(np.arange(0, len(s), 2))
    off, data = utf8.utf8_buffers(evals)
    keys, rows, words = contamination.sample_keys(off, data, 13, 3)
    ix = contamination.build_index(keys, rows % 2)
    lengths = sorted({13, *(int(w) for w in words if 3 <= w < 13)})
    return ix["keys"], ix["masks"], ix["bloom"], np.array(lengths, np.int64), 2, 4


def _contamination(launcher, s: Sample) -> tuple:
    return tuple(launcher(s.offsets, s.data, *_eval_index(s)))

#: (unit, span, normalisation options) of the span dedup checks
SPAN_OPTIONS = (("sentence", 3, (True, True, True, True)), ("line", 1, (False, False, False, False)),
                ("paragraph", 2, (True, True, True, True)))


def _ragged(values: np.ndarray, counts: np.ndarray) -> Text:
    """Per-document runs of a flat array (``counts[d]`` values each), compared per document."""
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Text(np.asarray(values), offsets)


def _spans(launcher, s: Sample) -> tuple:
    out = []
    for unit, span, norm in SPAN_OPTIONS:
        nunits, ends, nwin, wh = launcher(s.offsets, s.data, unit, span, spans.norm_table(*norm))
        out += [nunits, _ragged(ends, nunits), nwin, _ragged(wh, nwin)]
    return tuple(out)


def _span_cut(units, cut, s: Sample) -> tuple:
    """Every other unit (of the sentence units) cut out."""
    nunits, ends, _, _ = units(s.offsets, s.data, "sentence", 3, spans.norm_table())
    offsets, data, changed = cut(s.offsets, s.data, nunits, ends, np.arange(len(ends)) % 2 == 0)
    return Text(data, offsets), changed


#: the special tokens of the check tokenizers; one appears in every fourth document
BPE_SPECIALS = ("<|endoftext|>", "<|im_start|>")


@functools.lru_cache(maxsize=8)
def _bpe_tables(style: str, texts: tuple[str, ...]):
    """A byte-level BPE tokenizer of ``style`` trained on the texts themselves (so merges of
    every rank fire), as the kernel's tables."""
    import json

    tok = bpe_tables.train_bpe(texts, vocab_size=600, min_frequency=1,
                               special_tokens=BPE_SPECIALS, style=style)
    return bpe_tables.build_tables(json.loads(tok.to_str()))


def _bpe(launcher, s: Sample) -> tuple:
    """Document ``k`` encoded with the ``k % 3``-th pre-tokenizer (GPT-2, Llama 3, Qwen 2.5)
    and a BOS and an EOD id around it: every style, each document once."""
    texts = [t if k % 4 else t + BPE_SPECIALS[k % 8 // 4] + t[:20]
             for k, t in enumerate(s.texts.to_pylist())]
    per_doc: list = [None] * len(texts)
    for i, style in enumerate(bpe_tables.STYLES):
        rows = range(i, len(texts), len(bpe_tables.STYLES))
        mine = [texts[k] for k in rows]
        if not mine:
            continue
        off, data = utf8.utf8_buffers(pa.array(mine, pa.large_string()))
        ids, lens = launcher(off, data, _bpe_tables(style, tuple(mine)), 0, 1)
        for k, part in zip(rows, np.split(ids, np.cumsum(lens)[:-1]), strict=True):
            per_doc[k] = part
    lens = np.array([len(p) for p in per_doc], np.int64)
    ids = np.concatenate(per_doc) if per_doc else np.zeros(0, np.int32)
    return _ragged(ids, lens), lens


CHECKS: tuple[Check, ...] = (
    Check("count_chars_words", "length_filter, word_count_filter (whitespace)",
          lambda s: (utf8.count_chars(s.offsets, s.data), utf8.count_words(s.offsets, s.data)),
          lambda s: (_gpu().count_chars(s.offsets, s.data),
                     _gpu().count_words(s.offsets, s.data))),
    Check("normalize_quick_check", "normalize_text (NFC and NFKC)",
          lambda s: (normalize.needs_normalization(s.offsets, s.data, "NFC"),
                     normalize.needs_normalization(s.offsets, s.data, "NFKC")),
          lambda s: (_gpu().needs_normalization(s.offsets, s.data, "NFC"),
                     _gpu().needs_normalization(s.offsets, s.data, "NFKC"))),
    Check("text_cleanup", "normalize_text (line endings, controls, spaces, blank lines, trim)",
          lambda s: _clean(clean.clean_text, s), lambda s: _clean(_gpu().clean_text, s)),
    Check("substrings", "symbol_ratio_filter (occurrences of '#', '...', '…', '*')",
          lambda s: (utf8.count_substrings(s.offsets, s.data, SYMBOLS),),
          lambda s: (_gpu().count_substrings(s.offsets, s.data, SYMBOLS),)),
    Check("pii_prefilter", "pii_redact (documents that might hold an entity)",
          lambda s: (pii.pii_candidates(s.offsets, s.data),),
          lambda s: (_gpu().pii_candidates(s.offsets, s.data),)),
    Check("word_tokens", "word_count_filter (tokens, words)",
          lambda s: (words.count_tokens(s.offsets, s.data, False),
                     words.count_tokens(s.offsets, s.data, True)),
          lambda s: (_gpu().count_tokens(s.offsets, s.data, False),
                     _gpu().count_tokens(s.offsets, s.data, True))),
    Check("gopher_quality", "gopher_quality",
          lambda s: (quality.gopher_quality_features(s.offsets, s.data, STOP_WORDS),),
          lambda s: (_gpu().gopher_quality_features(s.offsets, s.data, STOP_WORDS),)),
    Check("gopher_repetition", "gopher_repetition",
          lambda s: repetition.gopher_repetition_features(s.offsets, s.data, TOP, DUP),
          lambda s: _gpu().gopher_repetition_features(s.offsets, s.data, TOP, DUP)),
    Check("fineweb_quality", "fineweb_quality",
          lambda s: (quality.fineweb_features(s.offsets, s.data, None, 30),
                     quality.fineweb_features(s.offsets, s.data, ".!?", 30)),
          lambda s: (_gpu().fineweb_features(s.offsets, s.data, None, 30),
                     _gpu().fineweb_features(s.offsets, s.data, ".!?", 30))),
    Check("c4_quality", "c4_quality (reason codes, rewritten text, line counts)",
          lambda s: _c4(quality.c4_rewrite(s.offsets, s.data, **C4_OPTIONS)),
          lambda s: _c4(_gpu().c4_rewrite(s.offsets, s.data, **C4_OPTIONS))),
    Check("xxh64", "exact_dedup (xxhash64, as cuDF's hash_values)",
          lambda s: (hashing.xxh64_strings(s.offsets, s.data), hashing.xxh64_strings(
              s.offsets, s.data, 2**63 + 7)),
          lambda s: (_gpu().xxh64_strings(s.offsets, s.data), _gpu().xxh64_strings(
              s.offsets, s.data, 2**63 + 7))),
    Check("minhash_chars", "fuzzy_dedup preset nemo (char shingles, 32 and 64 bit)",
          lambda s: (hashing.minhash(s.texts, seed=42, a=A32, b=B32, width=24),
                     hashing.minhash(s.texts, seed=42, a=A64, b=B64, width=24, bits=64)),
          lambda s: (_gpu().minhash(s.offsets, s.data, seed=42, a=A32, b=B32, width=24),
                     _gpu().minhash(s.offsets, s.data, seed=42, a=A64, b=B64, width=24,
                                    bits=64))),
    Check("minhash_words", "fuzzy_dedup preset datatrove (word 5-grams, 64 bit)",
          lambda s: (hashing.minhash_ngrams(
              pa.LargeListArray.from_arrays(
                  pa.array(s.lists[0]), pa.LargeStringArray.from_buffers(
                      len(s.lists[1]) - 1, pa.py_buffer(s.lists[1]), pa.py_buffer(s.lists[2]))),
              ngrams=4, seed=1, a=A64, b=B64, bits=64),),
          lambda s: (_gpu().minhash_ngrams(*s.lists, ngrams=4, seed=1, a=A64, b=B64,
                                           bits=64),)),
    Check("decontamination", "decontaminate (n-grams matched, sets, regions)",
          lambda s: _contamination(contamination.contamination_scan, s),
          lambda s: _contamination(_gpu().contamination_scan, s)),
    Check("span_units", "span_dedup (units, window hashes: sentence, line, paragraph)",
          lambda s: _spans(spans.span_units, s), lambda s: _spans(_gpu().span_units, s)),
    Check("span_cut", "span_dedup (the text without its repeated spans)",
          lambda s: _span_cut(spans.span_units, spans.cut_units, s),
          lambda s: _span_cut(_gpu().span_units, _gpu().cut_units, s)),
    Check("language_id", "language_id (scores, label, probability)", _langid_cpu, _langid_gpu),
    Check("bpe", "tokenize (byte-level BPE: GPT-2, Llama 3 and Qwen 2.5 pre-tokenizers)",
          lambda s: _bpe(bpe.encode, s), lambda s: _bpe(_gpu().bpe_encode, s)),
    Check("langid_prepare_check", "language_id (which texts are prepared on the host)",
          lambda s: (langid.langid_needs_prepare(s.offsets, s.data),),
          lambda s: (_gpu().langid_needs_prepare(s.offsets, s.data),)),
)


def run(texts, *, names: list[str] | None = None, progress=None) -> list[dict]:
    """Compare every kernel (or those named) on ``texts``; one result dict each."""
    sample = Sample.of(texts)
    out = []
    for check in CHECKS:
        if names and check.name not in names:
            continue
        if progress:
            progress(check.name)
        out.append(check.compare(sample))
    return out
