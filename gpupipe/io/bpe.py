"""gpupipe's BPE engine for byte-level ``tokenizer.json`` files: what it can express, its tables,
and the check against Hugging Face ``tokenizers`` that decides whether a run may use it.

The contract is exactness: training data tokenized differently from the model's tokenizer is
silently wrong. So the engine takes a file only when every part of its configuration is one
`gpupipe.kernels.bpe` implements (`unsupported` says what is not), and then only after encoding
`CHECK_TEXTS` (contractions in both cases, digit and whitespace runs, CJK, emoji, combining
marks, the file's own added tokens inside text) with both engines gives the same ids
(`choose_engine`). Anything else runs on ``tokenizers`` itself, with the reason.

The tables the kernel reads are `gpupipe.kernels.bpe_tables`'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import threading

import numpy as np

from gpupipe.kernels.bpe_tables import BpeTables, build_tables, pre_tokenizer_mode

#: what `choose_engine` encodes with both engines before a run may use gpupipe's
CHECK_TEXTS = (
    "", " ", "a", "Hello, world! It's the end.\n\nSecond line [1] here!",
    "I'm sure you'll see they've gone; we'd said it's theirs. I'M SURE YOU'LL SEE THEY'VE GONE; "
    "WE'D SAID IT'S THEIRS. 'S 's 'ſ 'ſab 'ﬆab 'Kab 'x '' ''s",
    "digits 1 12 123 1234 12345 3.14159 1,000,000 ١٢٣٤ ४२ 二〇二四 ½ ⅷ",
    "  two spaces   three\t\ttabs \n\n\n  \r\n\r\n x  \n", "   ", "\n", "trailing   ",
    "東京は日本の首都です。中文没有空格分词。한국어 텍스트입니다.",
    "naïve café e\u0301 n\u0303 \u0301 Å Å \u212b ﬁ ß ẞ İ ı ｆｕｌｌ ² ㎏",
    "emoji 😀👍🏽 👩‍👩‍👧 🇫🇷 ❤️ ✈\ufe0f",
    "code: def f(x):\n    return x**2  # comment\n\tif a != b && c >= d: {y} [z] <tag/>",
    "ÀÉÎÕÜ àéîõü Ωμέγα Кириллица עִברִית عربي हिन्दी ไทย ქართული",
    "\u00a0nbsp\u2009thin\u3000ideographic\u2028line\u2029para\u0085nel\x0bvt\x0cff",
    "punctuation... !!! ??? --- *** ((( ))) \"quotes\" «guillemets» „low“ 'single'",
    "x" * 300 + " " + "ab" * 200, " " * 100 + "\n" * 5 + "\t" * 50,
    "URL https://example.com/a?b=c&d=e#f and e-mail someone@example.org",
)


def unsupported(spec: dict, add_special_tokens: bool = False) -> str | None:
    """Why gpupipe's engine cannot encode as the tokenizer.json ``spec`` does, or None."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return f"model type {model.get('type')!r} (the engine implements BPE)"
    for key, ok in (("dropout", (None,)), ("continuing_subword_prefix", (None, "")),
                    ("end_of_word_suffix", (None, "")), ("byte_fallback", (None, False))):
        if model.get(key) not in ok:
            return f"BPE {key}: {model.get(key)!r}"
    norm = spec.get("normalizer")
    if norm is not None and norm.get("type") not in ("NFC", "NFKC"):
        return f"normalizer {norm.get('type')!r} (the engine implements none, NFC or NFKC)"
    if pre_tokenizer_mode(spec.get("pre_tokenizer")) is None:
        return ("a pre-tokenizer other than byte-level GPT-2, Llama 3 or Qwen 2.5: "
                f"{json.dumps(spec.get('pre_tokenizer'))[:200]}")
    for tok in spec.get("added_tokens") or ():
        for flag in ("single_word", "lstrip", "rstrip"):
            if tok.get(flag):
                return f"added token {tok['content']!r} with {flag}: true"
        if tok.get("normalized") and norm is not None:
            return f"added token {tok['content']!r} matched after the normalizer"
    post = spec.get("post_processor")
    if add_special_tokens and post is not None and post.get("type") != "ByteLevel":
        return f"add_special_tokens with the {post.get('type')} post-processor"
    return None


# --------------------------------------------------------------------------- the engine

@dataclasses.dataclass(frozen=True)
class Engine:
    """Which engine encodes a tokenizer's text, and why."""
    name: str  # "gpupipe" or "huggingface"
    reason: str
    tables: BpeTables | None = dataclasses.field(default=None, repr=False)

    def describe(self) -> str:
        return f"{self.name} ({self.reason})"


def _hf_ids(tok, texts) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch_fast(list(texts), add_special_tokens=False)]


@functools.cache
def _assigned() -> np.ndarray:
    """True for the code points Python's Unicode tables assign."""
    import unicodedata

    return np.array([unicodedata.category(chr(c)) != "Cn" for c in range(0x110000)])


def encode_buffers(tables: BpeTables, offsets, data, tokenizer, *, bos: int = -1,
                   eod: int = -1, kernels=None,
                   texts_of=None) -> tuple[np.ndarray, np.ndarray, int]:
    """Token ids of the strings ``(offsets, data)``: (int32 ids flat, count per document, how
    many documents ``tokenizer``, the `tokenizers.Tokenizer`, encoded).

    ``kernels``: the launchers (`gpupipe.kernels.cpu`, the default, for host buffers;
    `gpupipe.kernels.gpu` for a cuDF column's device buffers, whose ids then leave the device
    alone). ``texts_of(rows)``: the strings at positions ``rows`` as Python strings, for the
    documents normalised on the host; by default decoded from ``data`` (host buffers).

    The kernel does not normalise. With an NFC or NFKC normalizer, a document the quick check
    flags (`gpupipe.kernels.normalize.stable_table`) is normalised here by `unicodedata` and
    then encoded by the kernel, when every character in it is assigned in Python's Unicode
    tables (Unicode's normalisation stability: then a newer version normalises it the same)
    and no added token occurs in it before or after normalising (``tokenizers`` matches them
    in the raw text and normalises the text between them on its own). Otherwise
    ``tokenizer`` encodes it whole."""
    if kernels is None:
        from gpupipe.kernels import cpu as kernels

    flat, lens = kernels.bpe_encode(offsets, data, tables, bos, eod)
    if tables.normal_form is None or len(lens) == 0:
        return flat, lens, 0
    import unicodedata

    redo = np.flatnonzero(kernels.needs_normalization(offsets, data, tables.normal_form))
    if len(redo) == 0:
        return flat, lens, 0
    if texts_of is None:
        texts = [bytes(data[offsets[d]: offsets[d + 1]]).decode() for d in redo]
    else:
        texts = list(texts_of(redo))
    assigned, specials = _assigned(), tables.added_strings()
    ours: list[tuple[int, str]] = []
    theirs: list[tuple[int, str]] = []
    for d, text in zip(redo, texts, strict=True):
        cps = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        if assigned[cps].all() and not any(t in text for t in specials):
            norm = unicodedata.normalize(tables.normal_form, text)
            if not any(t in norm for t in specials):
                ours.append((d, norm))
                continue
        theirs.append((d, text))
    docs = np.split(flat, np.cumsum(lens)[:-1])
    if ours:
        import pyarrow as pa

        from gpupipe.kernels.utf8 import utf8_buffers

        o, dat = utf8_buffers(pa.array([t for _, t in ours], pa.large_string()))
        ids, n = kernels.bpe_encode(o, dat, tables, bos, eod)
        for (d, _), part in zip(ours, np.split(ids, np.cumsum(n)[:-1]), strict=True):
            docs[d] = part
    if theirs:
        around = ([bos] if bos >= 0 else [], [eod] if eod >= 0 else [])
        for (d, _), ids in zip(theirs, _hf_ids(tokenizer, [t for _, t in theirs]), strict=True):
            docs[d] = np.array(around[0] + ids + around[1], np.int32)
    for d in redo:
        lens[d] = len(docs[d])
    return np.concatenate(docs), lens, len(theirs)


def encode_texts(tables: BpeTables, texts, tokenizer=None) -> list[list[int]]:
    """gpupipe's ids of a list of strings (no BOS / EOD), as lists: for checks and tests."""
    import pyarrow as pa

    from gpupipe.kernels.utf8 import utf8_buffers

    off, data = utf8_buffers(pa.array(list(texts), pa.large_string()))
    if tokenizer is None:
        from gpupipe.kernels.bpe import encode

        flat, lens = encode(off, data, tables)
    else:
        flat, lens, _ = encode_buffers(tables, off, data, tokenizer)
    ends = np.cumsum(lens)
    return [flat[e - n: e].tolist() for e, n in zip(ends, lens, strict=True)]


def _decide(path: str, add_special_tokens: bool) -> tuple[str | None, BpeTables | None, int]:
    """(why gpupipe's engine may not encode like ``path``, or None; its tables; how many check
    texts both engines encoded alike)."""
    from gpupipe.io.tokenizer import load_tokenizer

    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    why = unsupported(spec, add_special_tokens)
    tables = None
    if why is None:
        try:
            tables = build_tables(spec)
        except (ValueError, KeyError) as e:
            why = f"its tables: {e}"
    texts = list(CHECK_TEXTS)
    if why is None:
        texts += [f"before{t['content']}after {t['content']} x" for t in
                  (spec.get("added_tokens") or ())[:64]]
        tok = load_tokenizer(path)
        ours, theirs = encode_texts(tables, texts, tok), _hf_ids(tok, texts)
        bad = [k for k, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        if bad:
            why = (f"ids differ from tokenizers on {len(bad)} of {len(texts)} check texts, the "
                   f"first {texts[bad[0]][:40]!r}")
    return why, (tables if why is None else None), len(texts)


# --------------------------------------------------------------------------- the saved verdict

_TABLE_ARRAYS = ("sp_first", "sp_bytes", "sp_off", "sp_ids", "byte_id", "mkeys", "mvals",
                 "vkeys", "vrows", "vbytes", "voff", "vids")


def _verdict_key(sha256: str, add_special_tokens: bool) -> str:
    """What a verdict depends on: the file's bytes, the option, the versions of gpupipe and
    tokenizers, and the source of the engine (this module, the kernel, its tables)."""
    import importlib.util

    import tokenizers

    from gpupipe._version import __version__

    h = hashlib.sha256()
    for part in (sha256, str(add_special_tokens), __version__, tokenizers.__version__):
        h.update(part.encode() + b"\0")
    # read, not imported: the driver of a run never loads the kernel (nor numba)
    for module in ("gpupipe.kernels.bpe", "gpupipe.kernels.bpe_tables", "gpupipe.kernels.catalog",
                   "gpupipe.kernels.unicode_classes", __name__):
        with open(importlib.util.find_spec(module).origin, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:40]


def _verdict_path(key: str) -> str:
    from gpupipe.kernels.bpe_tables import _cache_dir

    return os.path.join(_cache_dir(), "bpe-engine", f"{key}.npz")


def _load_verdict(key: str):
    from gpupipe.kernels.bpe_tables import class_table

    try:
        with np.load(_verdict_path(key), allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            tables = None
            if meta["why"] is None:
                tables = BpeTables(mode=meta["mode"], normal_form=meta["normal_form"],
                                   classes=class_table(), ignore_merges=meta["ignore_merges"],
                                   **{k: z[k] for k in _TABLE_ARRAYS})
            return meta["why"], tables, meta["texts"]
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _save_verdict(key: str, verdict) -> None:
    why, tables, texts = verdict
    meta = {"why": why, "texts": texts}
    arrays = {}
    if tables is not None:
        meta.update(mode=tables.mode, normal_form=tables.normal_form,
                    ignore_merges=bool(tables.ignore_merges))
        arrays = {k: getattr(tables, k) for k in _TABLE_ARRAYS}
    path = _verdict_path(key)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.npz"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.savez(tmp, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)   # a read-only cache: the next process checks again


@functools.lru_cache(maxsize=8)
def _choose(path: str, sha256: str, requested: str, add_special_tokens: bool) -> Engine:
    """The engine, from the verdict saved in the user's cache directory when one was reached
    for the same file and engine (`_verdict_key`), else from `_decide` (and saved): the driver
    and every worker of a run, and later runs, then start without encoding the check texts
    and without compiling anything to build the tables."""
    if requested == "huggingface":
        return Engine("huggingface", "engine: huggingface")
    key = _verdict_key(sha256, add_special_tokens)
    verdict = _load_verdict(key)
    if verdict is None:
        verdict = _decide(path, add_special_tokens)
        _save_verdict(key, verdict)
    why, tables, texts = verdict
    if why is not None:
        if requested == "gpupipe":
            raise ValueError(f"engine: gpupipe cannot encode with {path!r}: {why}; "
                             f"use engine: auto or huggingface")
        return Engine("huggingface", f"gpupipe's engine declined: {why}")
    form = f", {tables.normal_form} on the host" if tables.normal_form else ""
    return Engine("gpupipe", f"byte-level BPE, {tables.pretokenizer} pre-tokenizer{form}; "
                  f"same ids as tokenizers on {texts} check texts", tables)


def choose_engine(path: str, requested: str = "auto", add_special_tokens: bool = False) -> Engine:
    """The engine a run encodes with (once per process and tokenizer content): gpupipe's when
    ``requested`` is ``auto`` or ``gpupipe`` and the tokenizer passes `unsupported` and the
    check; tokenizers' otherwise (``engine: gpupipe`` then raises ValueError)."""
    from gpupipe.io.tokenizer import file_sha256

    return _choose(os.path.abspath(path), file_sha256(path), requested, add_special_tokens)
