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

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from gpupipe.backends import dispatch
from gpupipe.errors import BackendUnavailableError
from gpupipe.frame import TEXT, string_series, text_array
from gpupipe.stages.base import Filter, first_failure, stage

LANGUAGE = "language"
LANGUAGE_SCORE = "language_score"


def identify(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(language codes, confidences) of a string array with py3langid's model."""
    from gpupipe.kernels.langid import langid, langid_model, prepare
    from gpupipe.kernels.utf8 import utf8_buffers

    model = langid_model()
    best, conf = langid(*utf8_buffers(prepare(arr)), model)
    return pa.array(model.classes, type=pa.large_string()).take(pa.array(best)), conf


def identify_partition(df) -> tuple[np.ndarray, np.ndarray]:
    """(class index, confidence) per row of a partition of either backend: the scores run where
    the text is (the kernels on the GPU for cuDF); only the texts `prepare` might change (not
    NFC, or without an ASCII lower-case letter) are prepared on the host first."""
    from gpupipe.kernels.langid import langid_model, prepare
    from gpupipe.kernels.utf8 import scatter_buffers

    kernels, (offsets, data) = dispatch.kernels_for(df), dispatch.text_buffers(df[TEXT])
    need = np.asarray(kernels.langid_needs_prepare(offsets, data))
    if need.any():  # only those rows leave the device, and come back prepared
        rows = np.flatnonzero(need)
        done = prepare(dispatch.take_text(df[TEXT], rows)).cast(pa.large_string())
        text = dispatch.string_column(df[TEXT], *scatter_buffers(len(df), rows, done), keep=need)
        offsets, data = dispatch.text_buffers(text)
    return kernels.langid_identify(offsets, data, langid_model())


@functools.cache
def _fasttext_model(path: str):
    try:
        import fasttext
    except ImportError:
        raise BackendUnavailableError(
            f"language_id.fasttext_model={path!r} needs the fasttext package: "
            f"pip install fasttext-wheel (or leave fasttext_model unset to use py3langid)"
        ) from None
    fasttext.FastText.eprint = lambda *args, **kwargs: None   # its load_model notice on stderr
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
    kernels: ClassVar[tuple[str, ...]] = ("langid_needs_prepare", "langid_identify")

    keep: tuple[str, ...] | None = None
    min_score: Annotated[float | None, Field(ge=0, le=1)] = None
    fasttext_model: str | None = None

    def __post_init__(self):
        from gpupipe.kernels.langid import langid_model

        if self.fasttext_model is not None and not os.path.isfile(self.fasttext_model):
            raise ValueError(f"fasttext_model {self.fasttext_model!r} is not a file")
        if self.keep is not None and self.fasttext_model is None:
            known = set(langid_model().classes)
            unknown = [c for c in self.keep if c not in known]
            if unknown:
                raise ValueError(f"keep: {unknown} are not languages of the py3langid model "
                                 f"(it knows {len(known)}: {', '.join(sorted(known))})")

    def added_columns(self) -> dict[str, str]:
        return {LANGUAGE: "string", LANGUAGE_SCORE: "float32", **super().added_columns()}

    def runs_on(self, backend: str) -> str:
        # a fastText model runs on the host; py3langid's runs as kernels on either backend
        return "pandas" if self.fasttext_model is not None else super().runs_on(backend)

    def evaluate(self, df):
        from gpupipe.kernels.langid import langid_model

        if self.fasttext_model is not None:
            return self._evaluate_fasttext(df)
        model = langid_model()
        best, conf = identify_partition(df)
        labels = dispatch.label_column(df, np.asarray(best, dtype=np.int64) + 1, model.classes)
        scores = dispatch.like(df, pd.DataFrame({LANGUAGE_SCORE: np.asarray(conf, np.float32)}))
        out = df.assign(**{LANGUAGE: labels, LANGUAGE_SCORE: scores[LANGUAGE_SCORE]})
        not_kept = None
        if self.keep is not None:
            kept = [i for i, c in enumerate(model.classes) if c in set(self.keep)]
            not_kept = ~np.isin(best, kept)
        low = conf < self.min_score if self.min_score is not None else None
        counts = np.bincount(best, minlength=len(model.classes))
        counters = {f"language:{model.classes[k]}": int(v) for k, v in enumerate(counts) if v}
        return first_failure([not_kept, low], len(df)), out, counters

    def _evaluate_fasttext(self, df):
        arr = text_array(df[TEXT]).fill_null("")
        langs, conf = identify_fasttext(self.fasttext_model, arr)
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
