"""py3langid's language identifier as one compiled pass: the byte n-gram automaton (DFA) counts
features, naive-Bayes scores them, a softmax picks the label. Same labels and probabilities as
``py3langid.langid.LanguageIdentifier(norm_probs=True).classify`` (tested).

The DFA walk and the scoring (`langid_scores_doc`) run on either target. Two details keep their
float32 scores bit-identical across targets: ``log1p`` of a count comes from a table built on the
host, and each product is rounded on its own (`target.mul_rn`), so a GPU cannot fuse it with the
following add. The softmax (`langid_pick`, a few ``exp`` per document) runs on
the host for both targets, since CPU and GPU ``exp`` may differ in the last bit.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpupipe.errors import BackendUnavailableError
from gpupipe.kernels.normalize import needs_normalization_doc, stable_table
from gpupipe.kernels.target import device, entry, max_len, mul_rn, table_mask, table_size

__all__ = ["LangidModel", "langid", "langid_model", "langid_needs_prepare", "langid_pick",
           "langid_scores", "log1p_table", "pick", "prepare"]


class LangidModel:
    """py3langid's model as arrays: ``nextmove`` (uint32), ``rowbase`` (int64), ``out_feat``
    (int32), ``ptc`` (float32[features, classes]), ``prior`` (float32[classes]), ``classes``
    and ``alias`` (pairs of class indices with the same code: the second adds to the first)."""

    def __init__(self, nextmove, rowbase, out_feat, ptc, prior, classes, alias):
        self.nextmove, self.rowbase, self.out_feat = nextmove, rowbase, out_feat
        self.ptc, self.prior, self.classes, self.alias = ptc, prior, classes, alias


@functools.cache
def langid_model() -> LangidModel:
    """py3langid's bundled model (shipped in the pip package), loaded once per process (~1 s)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:  # pragma: no cover - a dependency of gpupipe
        raise BackendUnavailableError(
            "language_id needs py3langid: pip install py3langid") from None
    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    first: dict[str, int] = {}
    pairs = []
    for i, c in enumerate(ident.nb_classes):
        if c in first:
            pairs.append((first[c], i))
        else:
            first[c] = i
    return LangidModel(
        nextmove=np.asarray(ident.tk_nextmove, dtype=np.uint32),
        rowbase=np.asarray(ident.tk_row, dtype=np.int64) << 8,
        out_feat=np.asarray(ident.tk_output, dtype=np.int32),
        ptc=np.ascontiguousarray(np.asarray(ident.nb_ptc, dtype=np.float32)),
        prior=np.asarray(ident.nb_pc, dtype=np.float32),
        classes=list(ident.nb_classes),
        alias=np.array(pairs, dtype=np.int64).reshape(-1, 2))


@entry
def _log1p_table(n):
    out = np.empty(n, np.float32)
    for i in range(n):
        out[i] = np.float32(np.log1p(np.float32(i)))
    return out


def log1p_table(maxlen: int) -> np.ndarray:
    """float32 ``log1p(i)`` for every feature count a document of ``maxlen`` bytes can have."""
    return _log1p_table(max(maxlen + 1, 2))


@device
def langid_scores_doc(data, start, end, nextmove, rowbase, out_feat, ptc, prior, log1p, keys,
                      cnt, touched, scores):
    """Naive-Bayes scores of ``data[start:end]`` into ``scores`` (already divided by the square
    root of the length, as py3langid does). ``keys``/``cnt``: a zeroed table of at least twice
    the document's bytes (a power of two, >= 16), left zeroed; ``touched``: one slot per byte."""
    n = end - start
    mask = table_mask(n)
    nt = 0
    state = 0
    for i in range(start, end):
        state = nextmove[rowbase[state] + data[i]]
        f = out_feat[state]
        if f >= 0:
            s = (np.int64(f) * np.int64(0x9E3779B1)) & mask
            while keys[s] != 0 and keys[s] != f + 1:
                s = (s + 1) & mask
            if keys[s] == 0:
                keys[s] = f + 1
                cnt[s] = 0
                touched[nt] = s
                nt += 1
            cnt[s] += 1
    nclass = prior.shape[0]
    if nt == 0:
        for c in range(nclass):
            scores[c] = 0.0
    else:
        for c in range(nclass):
            scores[c] = prior[c]
        for j in range(nt):
            s = touched[j]
            f = keys[s] - 1
            w = log1p[cnt[s]]
            keys[s] = 0
            for c in range(nclass):
                scores[c] += mul_rn(w, ptc[f, c])  # never fused with the add on a GPU
    scale = np.float32(1.0 / math.sqrt(n if n > 0 else 1))
    for c in range(nclass):
        scores[c] = mul_rn(scores[c], scale)


@entry
def langid_pick(scores, alias, best, conf):
    """Per row of ``scores``: the label (after merging aliased classes) and its probability,
    normalised exactly as py3langid does with ``norm_probs=True``. Host only."""
    nclass = scores.shape[1]
    p = np.empty(nclass, np.float32)
    for d in range(scores.shape[0]):
        top = scores[d].max()
        total = np.float32(0.0)
        for c in range(nclass):
            p[c] = np.exp(scores[d, c] - top)
            total += p[c]
        for c in range(nclass):
            p[c] /= total
        for a in range(alias.shape[0]):
            p[alias[a, 0]] += p[alias[a, 1]]
            p[alias[a, 1]] = 0.0
        k = 0
        for c in range(1, nclass):
            if p[c] > p[k]:
                k = c
        best[d] = k
        conf[d] = p[k]


@entry
def _langid_cpu(offsets, data, nextmove, rowbase, out_feat, ptc, prior, log1p, tsize):
    nd = offsets.shape[0] - 1
    scores = np.empty((nd, prior.shape[0]), np.float32)
    keys = np.zeros(tsize, np.int32)
    cnt = np.zeros(tsize, np.int32)
    touched = np.empty(tsize, np.int64)
    for d in range(nd):
        langid_scores_doc(data, offsets[d], offsets[d + 1], nextmove, rowbase, out_feat, ptc,
                          prior, log1p, keys, cnt, touched, scores[d])
    return scores


def langid_scores(offsets, data, model: LangidModel | None = None) -> np.ndarray:
    """float32[n, classes] scaled naive-Bayes scores of each (prepared) UTF-8 string."""
    m = model or langid_model()
    maxlen = max_len(offsets)
    return _langid_cpu(offsets, data, m.nextmove, m.rowbase, m.out_feat, m.ptc, m.prior,
                       log1p_table(maxlen), table_size(maxlen))


def pick(scores: np.ndarray, model: LangidModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(class index int32[n], probability float32[n]) from `langid_scores`."""
    m = model or langid_model()
    best = np.zeros(scores.shape[0], np.int32)
    conf = np.zeros(scores.shape[0], np.float32)
    langid_pick(scores, m.alias, best, conf)
    return best, conf


def langid(offsets, data, model: LangidModel | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(class index, probability) of each prepared UTF-8 string (see ``language_id``)."""
    return pick(langid_scores(offsets, data, model), model)


@device
def needs_prepare_doc(data, start, end, table):
    """Whether `prepare` might change ``data[start:end]``: the NFC quick check cannot clear it
    (``table``: `normalize.stable_table("NFC")`), or it has no ASCII lower-case letter (so it
    might be all upper case). A text with an ASCII lower-case letter is never all upper case."""
    if needs_normalization_doc(data, start, end, table):
        return True
    for i in range(start, end):  # usually stops at the first few bytes
        if 97 <= data[i] <= 122:
            return False
    return True


@entry
def _needs_prepare_cpu(offsets, data, table, out):
    for d in range(out.shape[0]):
        out[d] = needs_prepare_doc(data, offsets[d], offsets[d + 1], table)
    return out


def langid_needs_prepare(offsets, data) -> np.ndarray:
    """Per string: whether `prepare` might change it (never a false "no"). Only those strings
    go to the host; the scores of the rest are computed where the text is."""
    return _needs_prepare_cpu(offsets, data, stable_table("NFC"),
                              np.empty(len(offsets) - 1, dtype=np.bool_))


def prepare(arr):
    """py3langid's input: all-uppercase texts lowercased, then NFC (Arrow, on the host)."""
    import pyarrow.compute as pc

    from gpupipe.kernels.normalize import normalize

    upper = pc.utf8_is_upper(arr)
    if pc.any(upper).as_py():
        arr = pc.if_else(upper, pc.utf8_lower(arr), arr)
    return normalize(arr, "NFC")  # only the strings that are not NFC already
