"""The tables `gpupipe.kernels.bpe` reads, built from a ``tokenizer.json`` (its parsed dict):
the byte-level alphabet, merges and vocabulary hashed for the kernel, the added tokens, and the
character classes of the pre-tokenizer regexes.

Character classes (letter, number, whitespace) are those of the regex engine inside the
installed ``tokenizers`` (Oniguruma, whose Unicode tables are newer than Python's
``unicodedata``): `class_table` reads them from `gpupipe.kernels.unicode_classes`, generated from
``tokenizers`` by ``python -m gpupipe.kernels.bpe_tables``, or, under another version of
``tokenizers``, asks its regex engine once per machine (about 4 s) and keeps the table in the
user's cache directory (``$XDG_CACHE_HOME/gpupipe``).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import zlib

import numpy as np

from gpupipe.kernels import catalog as kernel  # the modes and classes; the kernel when building

MODE_NAMES = {kernel.GPT2: "gpt2", kernel.LLAMA3: "llama3", kernel.QWEN2: "qwen2"}


# --------------------------------------------------------------------------- character classes

def build_class_table() -> np.ndarray:
    """uint8 per code point: `kernel.LETTER`, `kernel.NUMBER`, `kernel.SPACE`, `kernel.NEWLINE`,
    as the regex engine of the installed ``tokenizers`` matches ``\\p{L}``, ``\\p{N}``, ``\\s``."""
    from tokenizers import Regex, pre_tokenizers

    cps = np.array([c for c in range(0x110000) if not 0xD800 <= c < 0xE000], np.int64)
    text = "".join(map(chr, cps.tolist()))
    table = np.zeros(0x110000, np.uint8)
    for pattern, flag in ((r"\p{L}", kernel.LETTER), (r"\p{N}", kernel.NUMBER),
                          (r"\s", kernel.SPACE)):
        covered = np.zeros(len(cps), bool)
        split = pre_tokenizers.Split(Regex(pattern), behavior="removed")
        for _, (a, b) in split.pre_tokenize_str(text):  # the pieces between matches
            covered[a:b] = True
        table[cps[~covered]] |= flag
    table[[10, 13]] |= kernel.NEWLINE
    return table


def _encode_table(table: np.ndarray) -> str:
    change = np.flatnonzero(np.diff(table.astype(np.int16), prepend=-1))
    runs = np.stack([change, table[change]], axis=1).astype(np.int32)
    return base64.b64encode(zlib.compress(runs.tobytes(), 9)).decode()


def _decode_table(text: str) -> np.ndarray:
    runs = np.frombuffer(zlib.decompress(base64.b64decode(text)), np.int32).reshape(-1, 2)
    lens = np.diff(np.append(runs[:, 0], 0x110000))
    return np.repeat(runs[:, 1].astype(np.uint8), lens)


def _cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpupipe")


@functools.cache
def class_table() -> np.ndarray:
    """The character classes of the installed ``tokenizers`` (see the module docstring)."""
    import tokenizers

    from gpupipe.kernels import unicode_classes

    version = tokenizers.__version__
    if version == unicode_classes.TOKENIZERS:
        return _decode_table(unicode_classes.CLASSES)
    path = os.path.join(_cache_dir(), f"bpe-classes-tokenizers-{version}.txt")
    try:
        with open(path) as f:
            return _decode_table(f.read())
    except (OSError, ValueError, zlib.error):
        pass
    table = build_class_table()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(_encode_table(table))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the next process asks the regex engine again
    return table


# --------------------------------------------------------------------------- tables

@functools.cache
def _bytes_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character standing for each byte, inverted."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


@dataclasses.dataclass(frozen=True, eq=False)
class BpeTables:
    """What `gpupipe.kernels.bpe.encode_doc` reads, built from one tokenizer.json."""
    mode: int
    #: the normalizer, "NFC" or "NFKC", or None
    normal_form: str | None
    classes: np.ndarray
    sp_first: np.ndarray
    sp_bytes: np.ndarray
    sp_off: np.ndarray
    sp_ids: np.ndarray
    byte_id: np.ndarray
    mkeys: np.ndarray
    mvals: np.ndarray
    ignore_merges: bool
    vkeys: np.ndarray
    vrows: np.ndarray
    vbytes: np.ndarray
    voff: np.ndarray
    vids: np.ndarray

    def kernel_args(self) -> tuple:
        return (np.int64(self.mode), self.classes, self.sp_first, self.sp_bytes, self.sp_off,
                self.sp_ids, self.byte_id, self.mkeys, self.mvals, np.int64(len(self.mkeys) - 1),
                self.ignore_merges, self.vkeys, self.vrows, np.int64(len(self.vkeys) - 1),
                self.vbytes, self.voff, self.vids)

    def added_strings(self) -> list[str]:
        """The added tokens' texts."""
        return [bytes(self.sp_bytes[a:b]).decode() for a, b in zip(self.sp_off[:-1],
                                                                   self.sp_off[1:], strict=True)]

    @property
    def pretokenizer(self) -> str:
        return MODE_NAMES[self.mode]


def _strings(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(items) + 1, np.int64)
    np.cumsum([len(b) for b in items], out=off[1:])
    return off, np.frombuffer(b"".join(items), np.uint8).copy()


def _table(keys: np.ndarray, vals: np.ndarray, empty_val) -> tuple[np.ndarray, np.ndarray]:
    size = 16
    while size < 2 * len(keys):
        size <<= 1
    tkeys = np.full(size, np.uint64(0xFFFFFFFFFFFFFFFF), np.uint64)
    tvals = np.full(size, empty_val, vals.dtype)
    from gpupipe.kernels.bpe import insert

    insert(keys.astype(np.uint64), vals, tkeys, tvals, np.int64(size - 1))
    return tkeys, tvals


def pre_tokenizer_mode(pre: dict | None) -> int | None:
    """The kernel's mode for a tokenizer.json ``pre_tokenizer``, or None when it is none of
    byte-level GPT-2, Llama 3 or Qwen 2.5."""
    if pre is None:
        return None
    if pre.get("type") == "ByteLevel":
        ok = pre.get("use_regex", True) and not pre.get("add_prefix_space", False)
        return kernel.GPT2 if ok else None
    if pre.get("type") != "Sequence" or len(pre.get("pretokenizers", ())) != 2:
        return None
    split, level = pre["pretokenizers"]
    if (split.get("type") != "Split" or split.get("behavior") != "Isolated"
            or split.get("invert") or level.get("type") != "ByteLevel"
            or level.get("use_regex", True) or level.get("add_prefix_space", False)):
        return None
    regex = (split.get("pattern") or {}).get("Regex")
    return next((m for m, p in kernel.PATTERNS.items() if p == regex), None)


def build_tables(spec: dict) -> BpeTables:
    """The kernel's tables for a tokenizer.json that `unsupported` accepts."""
    model = spec["model"]
    chars = _bytes_of_char()
    vocab: dict[str, int] = model["vocab"]

    def to_bytes(token: str) -> bytes:
        return bytes(chars[c] for c in token)

    rows = sorted(vocab.items(), key=lambda kv: kv[1])
    try:
        tok_bytes = [to_bytes(t) for t, _ in rows]
    except KeyError as e:
        raise ValueError(f"vocabulary token with a character outside the byte-level alphabet "
                         f"({e})") from None
    ids = np.array([i for _, i in rows], np.int32)
    byte_id = np.full(256, -1, np.int32)
    for b, i in zip(tok_bytes, ids, strict=True):
        if len(b) == 1 and byte_id[b[0]] < 0:
            byte_id[b[0]] = i
    if (byte_id < 0).any():
        missing = np.flatnonzero(byte_id < 0)
        raise ValueError(f"no token for byte(s) {', '.join(hex(b) for b in missing[:8])}")
    merges = model.get("merges") or []
    pairs = [m.split(" ", 1) if isinstance(m, str) else m for m in merges]
    left = np.array([vocab[a] for a, _ in pairs], np.uint64)
    right = np.array([vocab[b] for _, b in pairs], np.uint64)
    new = np.array([vocab[a + b] for a, b in pairs], np.int64)
    ranks = np.arange(len(pairs), dtype=np.int64)
    mkeys, mvals = _table((left << np.uint64(32)) | right, (ranks << 32) | new, np.int64(-1))

    ignore = bool(model.get("ignore_merges", False))
    voff, vbytes = _strings(tok_bytes if ignore else [])
    vids = ids if ignore else np.zeros(0, np.int32)
    hashes = np.empty(len(vids), np.uint64)
    from gpupipe.kernels.bpe import hash_all

    hash_all(voff, vbytes, hashes)
    if len(np.unique(hashes)) != len(hashes):
        raise ValueError("two vocabulary tokens share a 64-bit hash")
    vkeys, vrows = _table(hashes, np.arange(len(vids), dtype=np.int64), np.int64(-1))

    added = sorted(spec.get("added_tokens") or (), key=lambda t: -len(t["content"].encode()))
    added = [t for t in added if t["content"]]
    sp_off, sp_bytes = _strings([t["content"].encode() for t in added])
    sp_first = np.zeros(256, np.bool_)
    for t in added:
        sp_first[t["content"].encode()[0]] = True
    return BpeTables(
        mode=pre_tokenizer_mode(spec["pre_tokenizer"]),
        normal_form=(spec.get("normalizer") or {}).get("type"),
        classes=class_table(), sp_first=sp_first, sp_bytes=sp_bytes, sp_off=sp_off,
        sp_ids=np.array([t["id"] for t in added], np.int32), byte_id=byte_id, mkeys=mkeys,
        mvals=mvals, ignore_merges=ignore, vkeys=vkeys, vrows=vrows, vbytes=vbytes, voff=voff,
        vids=vids)


#: the pre-tokenizer layouts `train_bpe` writes, as the models' own tokenizer.json files have
#: them: GPT-2 (ByteLevel with its regex), Llama 3 (digits in threes, ``ignore_merges``) and
#: Qwen 2.5 (single digits, NFC); the regexes are `gpupipe.kernels.bpe.PATTERNS`
STYLES = ("gpt2", "llama3", "qwen2")


def train_bpe(texts, *, vocab_size: int, min_frequency: int = 2,
              special_tokens: tuple[str, ...] = ("<|endoftext|>", "<|pad|>"),
              style: str = "gpt2"):
    """A byte-level BPE tokenizer trained on an iterator of texts, with the pre-tokenizer,
    normalizer and BPE options of ``style`` (one of `STYLES`)."""
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    if style not in STYLES:
        raise ValueError(f"style {style!r}: one of {', '.join(STYLES)}")
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        pattern = kernel.PATTERNS[kernel.LLAMA3 if style == "llama3" else kernel.QWEN2]
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _main() -> None:  # python -m gpupipe.kernels.bpe_tables: regenerate unicode_classes.py
    import tokenizers

    text = _encode_table(build_class_table())
    lines = [text[k: k + 96] for k in range(0, len(text), 96)]
    body = "\n".join(f'    "{line}"' for line in lines)
    path = os.path.join(os.path.dirname(__file__), "unicode_classes.py")
    with open(path, "w") as f:
        f.write(f'"""Character classes of the regex engine in tokenizers {tokenizers.__version__}'
                f' (generated by\n``python -m gpupipe.kernels.bpe_tables``; see `gpupipe.kernels.bpe_tables.class_table`)'
                f'."""\n\nTOKENIZERS = "{tokenizers.__version__}"\n\n'
                f'#: base64 of zlib of int32 (first code point, classes) runs\nCLASSES = (\n'
                f'{body}\n)\n')
    print(f"wrote {path}")


if __name__ == "__main__":
    _main()
