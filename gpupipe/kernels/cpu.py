"""The CPU launchers under the names and signatures of `gpupipe.kernels.gpu`'s: what
`gpupipe.backends.dispatch.kernels_for` hands a stage for a pandas partition (Arrow buffers in host memory).
A stage computes with ``kernels_for(df).<name>(...)`` and runs on either target unchanged."""

from __future__ import annotations

from gpupipe.kernels import catalog
from gpupipe.kernels.bpe import encode as bpe_encode
from gpupipe.kernels.clean import clean_text
from gpupipe.kernels.contamination import contamination_scan
from gpupipe.kernels.hashing import minhash_buffers as minhash
from gpupipe.kernels.hashing import minhash_ngrams_buffers as minhash_ngrams
from gpupipe.kernels.hashing import xxh64_strings
from gpupipe.kernels.langid import langid as langid_identify
from gpupipe.kernels.langid import langid_needs_prepare, langid_scores
from gpupipe.kernels.normalize import needs_normalization
from gpupipe.kernels.pii import pii_candidates
from gpupipe.kernels.quality import c4_rewrite, fineweb_features, gopher_quality_features
from gpupipe.kernels.repetition import gopher_repetition_features
from gpupipe.kernels.spans import cut_units, span_units
from gpupipe.kernels.utf8 import count_chars, count_substrings, count_words
from gpupipe.kernels.words import count_tokens

#: every launcher
__all__ = ["bpe_encode", "c4_rewrite", "clean_text", "contamination_scan", "count_chars", "count_substrings", "count_tokens",
           "count_words", "cut_units", "fineweb_features",
           "gopher_quality_features", "gopher_repetition_features", "langid_identify",
           "langid_needs_prepare",
           "langid_scores", "minhash", "minhash_ngrams", "needs_normalization",
           "pii_candidates", "span_units", "xxh64_strings"]

#: the launchers `gpupipe.kernels.gpu` has too (`gpupipe.kernels.catalog`, which the stages read
#: without importing numba; tests/kernels/test_seam.py checks both lists)
ON_GPU = catalog.ON_GPU
