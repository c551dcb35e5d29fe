"""Hugging Face ``tokenizers`` files: loading (once per process), special ids, training."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os

#: end-of-document tokens looked for, in order, when the pipeline names none
EOD_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "[CLS]")


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    path: str
    sha256: str
    vocab_size: int
    eod_id: int | None
    eod_token: str | None
    bos_id: int | None
    bos_token: str | None
    pad_id: int | None


def file_sha256(path: str) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in a process."""
    st = os.stat(path)
    return _sha256(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@functools.lru_cache(maxsize=8)
def _load(path: str, sha256: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def load_tokenizer(path: str):
    """The `tokenizers.Tokenizer` in ``path``, loaded once per process (keyed by content)."""
    try:
        return _load(os.path.abspath(path), file_sha256(path))
    except FileNotFoundError:
        raise FileNotFoundError(f"tokenizer file {path!r} does not exist") from None
    except Exception as e:
        raise ValueError(f"{path!r} is not a Hugging Face tokenizers JSON file ({e})") from None


PAD_CANDIDATES = ("<|pad|>", "<pad>", "[PAD]")


def _special(tok, path: str, kind: str, token: str | None, candidates) -> tuple[int | None, str | None]:
    """(id, token) of a special token: the one named (it must exist), else the first of
    ``candidates`` the tokenizer has, else (None, None)."""
    if token is not None:
        token_id = tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{kind}_token {token!r} is not in tokenizer {path!r}")
        return token_id, token
    for cand in candidates:
        if (token_id := tok.token_to_id(cand)) is not None:
            return token_id, cand
    return None, None


def describe_tokenizer(path: str, *, eod_token: str | None = None, eod_id: int | None = None,
                       bos_token: str | None = None) -> TokenizerInfo:
    """Resolve the special ids a pipeline needs; ValueError says what is missing and the fix."""
    tok = load_tokenizer(path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if eod_id is not None:
        if not 0 <= eod_id < vocab:
            raise ValueError(f"eod_id {eod_id} is outside the vocabulary (size {vocab})")
        eod_token = tok.id_to_token(eod_id)
    else:
        eod_id, eod_token = _special(tok, path, "eod", eod_token, EOD_CANDIDATES)
        if eod_id is None:
            raise ValueError(
                f"tokenizer {path!r} has no end-of-document token ({', '.join(EOD_CANDIDATES)}); "
                f"set eod_token or eod_id, or train one with `gpupipe train-tokenizer`")
    bos_id, bos_token = _special(tok, path, "bos", bos_token, BOS_CANDIDATES)
    pad_id, _ = _special(tok, path, "pad", None, PAD_CANDIDATES)
    return TokenizerInfo(path=path, sha256=file_sha256(path), vocab_size=vocab, eod_id=eod_id,
                         eod_token=eod_token, bos_id=bos_id, bos_token=bos_token, pad_id=pad_id)


def train_bpe(texts, **options):
    """`gpupipe.kernels.bpe_tables.train_bpe` (imported when called: it brings numba)."""
    from gpupipe.kernels.bpe_tables import train_bpe as train

    return train(texts, **options)
