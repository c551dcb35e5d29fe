"""language_id: ISO 639-1 language and confidence per document, optionally keeping some languages.

The default model is py3langid's (140 labels, shipped inside the pip package: no download):
ISO 639-1 codes, ISO 639-3 for the languages without one (``yue``, ``pcm``, ...) and ``zxx`` for
text without linguistic content (markup, numbers). Its byte n-gram automaton and naive-Bayes
scoring run here as one compiled pass over the partition's UTF-8 buffer, giving the same labels
and probabilities as ``py3langid.langid.LanguageIdentifier(norm_probs=True).classify`` (tested),
several times faster.
A fastText model file (e.g. lid.176.bin, GlotLID) can be used instead with ``fasttext_model``.
"""

from __future__ import annotations

import functools
import os
from typing import Annotated, ClassVar

import numba
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from gpupipe.errors import BackendUnavailableError
from gpupipe.frame import TEXT, string_series, text_array
from gpupipe.kernels import utf8_buffers
from gpupipe.stages.base import Filter, first_failure, stage

LANGUAGE = "language"
LANGUAGE_SCORE = "language_score"


@functools.cache
def _langid_model():
    """(nextmove uint32, rowbase int64, out_feat int32, ptc float32[f, c], pc float32[c],
    classes, alias pairs) of py3langid's bundled model (loaded once per process, ~1 s)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:  # pragma: no cover - a dependency of gpupipe
        raise BackendUnavailableError(
            "language_id needs py3langid: pip install py3langid") from None
    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    nextmove = np.asarray(ident.tk_nextmove, dtype=np.uint32)
    rowbase = np.asarray(ident.tk_row, dtype=np.int64) << 8
    out_feat = np.asarray(ident.tk_output, dtype=np.int32)
    ptc = np.ascontiguousarray(np.asarray(ident.nb_ptc, dtype=np.float32))
    prior = np.asarray(ident.nb_pc, dtype=np.float32)
    first: dict[str, int] = {}
    pairs = []
    for i, c in enumerate(ident.nb_classes):
        if c in first:
            pairs.append((first[c], i))
        else:
            first[c] = i
    alias = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return nextmove, rowbase, out_feat, ptc, prior, list(ident.nb_classes), alias


@numba.njit(cache=True, nogil=True)
def _langid(offsets, data, nextmove, rowbase, out_feat, ptc, prior, alias):
    nd = offsets.shape[0] - 1
    nclass = prior.shape[0]
    best = np.zeros(nd, np.int32)
    conf = np.zeros(nd, np.float32)
    counts = np.zeros(ptc.shape[0], np.int32)
    touched = np.empty(ptc.shape[0], np.int64)
    scores = np.empty(nclass, np.float32)
    for d in range(nd):
        nt = 0
        state = 0
        for i in range(offsets[d], offsets[d + 1]):
            state = nextmove[rowbase[state] + data[i]]
            f = out_feat[state]
            if f >= 0:
                if counts[f] == 0:
                    touched[nt] = f
                    nt += 1
                counts[f] += 1
        n = offsets[d + 1] - offsets[d]
        if nt == 0:
            scores[:] = 0.0
        else:
            scores[:] = prior
            for j in range(nt):
                f = touched[j]
                w = np.float32(np.log1p(np.float32(counts[f])))
                counts[f] = 0
                for c in range(nclass):
                    scores[c] += w * ptc[f, c]
        # normalise to probabilities exactly as py3langid does with norm_probs=True
        scale = np.float32(1.0 / np.sqrt(n if n > 0 else 1))
        for c in range(nclass):
            scores[c] *= scale
        top = scores.max()
        total = np.float32(0.0)
        for c in range(nclass):
            scores[c] = np.exp(scores[c] - top)
            total += scores[c]
        for c in range(nclass):
            scores[c] /= total
        for a in range(alias.shape[0]):
            scores[alias[a, 0]] += scores[alias[a, 1]]
            scores[alias[a, 1]] = 0.0
        k = 0
        for c in range(1, nclass):
            if scores[c] > scores[k]:
                k = c
        best[d] = k
        conf[d] = scores[k]
    return best, conf


def _prepare(arr: pa.Array) -> pa.Array:
    """py3langid's input: all-uppercase texts lowercased, then NFC."""
    upper = pc.utf8_is_upper(arr)
    if pc.any(upper).as_py():
        arr = pc.if_else(upper, pc.utf8_lower(arr), arr)
    return pc.utf8_normalize(arr, form="NFC")


def identify(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(language codes, confidences) of a string array with py3langid's model."""
    nextmove, rowbase, out_feat, ptc, prior, classes, alias = _langid_model()
    offsets, data = utf8_buffers(_prepare(arr))
    best, conf = _langid(offsets, data, nextmove, rowbase, out_feat, ptc, prior, alias)
    return pa.array(classes, type=pa.large_string()).take(pa.array(best)), conf


@functools.cache
def _fasttext_model(path: str):
    try:
        import fasttext
    except ImportError:
        raise BackendUnavailableError(
            f"language_id.fasttext_model={path!r} needs the fasttext package: "
            f"pip install fasttext-wheel (or leave fasttext_model unset to use py3langid)"
        ) from None
    return fasttext.load_model(path)


def identify_fasttext(path: str, texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(labels without ``__label__``, probabilities) from a fastText model, newlines replaced by
    spaces as fastText requires (what datatrove does)."""
    model = _fasttext_model(path)
    flat = pc.replace_substring(texts, "\n", " ").to_pylist()
    labels, probs = model.predict([t or "" for t in flat], k=1)
    langs = [lab[0].removeprefix("__label__") if lab else "und" for lab in labels]
    conf = np.array([p[0] if len(p) else 0.0 for p in probs], dtype=np.float32)
    return pa.array(langs, type=pa.large_string()), np.minimum(conf, 1.0)


@stage("language_id")
class LanguageId(Filter):
    """Add ``language`` (ISO 639-1 code) and ``language_score`` (probability); optionally drop
    documents not in ``keep`` or scoring below ``min_score``.

    Model: py3langid's bundled model (140 labels: ISO 639-1, ISO 639-3 where a language has no
    two-letter code, ``zxx`` for no linguistic content; offline), or a fastText model
    file given as ``fasttext_model`` (its labels are used as they are, e.g. ``en`` for lid.176,
    ``eng_Latn`` for GlotLID).
    """

    reasons: ClassVar[tuple[str, ...]] = ("language_not_kept", "low_language_score")

    keep: tuple[str, ...] | None = None
    min_score: Annotated[float | None, Field(ge=0, le=1)] = None
    fasttext_model: str | None = None

    def __post_init__(self):
        if self.fasttext_model is not None and not os.path.isfile(self.fasttext_model):
            raise ValueError(f"fasttext_model {self.fasttext_model!r} is not a file")
        if self.keep is not None and self.fasttext_model is None:
            known = set(_langid_model()[5])
            unknown = [c for c in self.keep if c not in known]
            if unknown:
                raise ValueError(f"keep: {unknown} are not languages of the py3langid model "
                                 f"(it knows {len(known)}: {', '.join(sorted(known))})")

    def added_columns(self) -> dict[str, str]:
        return {LANGUAGE: "string", LANGUAGE_SCORE: "float32", **super().added_columns()}

    def evaluate(self, df):
        arr = text_array(df[TEXT]).fill_null("")
        if self.fasttext_model is not None:
            langs, conf = identify_fasttext(self.fasttext_model, arr)
        else:
            langs, conf = identify(arr)
        out = df.assign(**{LANGUAGE: string_series(langs, df.index),
                           LANGUAGE_SCORE: pd.Series(conf, index=df.index, dtype="float32")})
        not_kept = None
        if self.keep is not None:
            not_kept = ~pc.is_in(langs, value_set=pa.array(list(self.keep))).to_numpy(
                zero_copy_only=False)
        low = conf < self.min_score if self.min_score is not None else None
        counts = pd.Series(langs.to_numpy(zero_copy_only=False)).value_counts()
        counters = {f"language:{k}": int(v) for k, v in counts.items()}
        return first_failure([not_kept, low], len(df)), out, counters
