"""gpupipe's BPE engine against Hugging Face ``tokenizers``: the same ids, or a fallback.

The test tokenizers are trained here on the sample corpus with the exact pre-tokenizer,
normalizer and added-token layouts of GPT-2, Llama 3 and Qwen 2.5 (`train_bpe` styles), and
``data/tokenizer.json`` is the committed GPT-2 style one."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupipe.io import bpe
from gpupipe.io.tokenizer import load_tokenizer, train_bpe
from gpupipe.kernels import bpe_tables

SPECIALS = {
    "gpt2": ("<|endoftext|>", "<|pad|>"),
    "llama3": ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
               *(f"<|reserved_special_token_{k}|>" for k in range(4))),
    "qwen2": ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
}


@pytest.fixture(scope="session")
def tokenizers_by_style(tmp_path_factory, sample_records) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bpe")
    texts = [r["text"] for r in sample_records]
    paths = {"committed": "data/tokenizer.json"}
    for style, specials in SPECIALS.items():
        path = root / f"{style}.json"
        train_bpe(texts, vocab_size=3000, special_tokens=specials, style=style).save(str(path))
        paths[style] = str(path)
    return paths


def hf_ids(path, texts):
    return [e.ids for e in load_tokenizer(path).encode_batch_fast(texts, add_special_tokens=False)]


def our_ids(path, texts):
    engine = bpe.choose_engine(path)
    assert engine.name == "gpupipe", engine.reason
    return bpe.encode_texts(engine.tables, texts, load_tokenizer(path))


@pytest.mark.parametrize("style", ["committed", "gpt2", "llama3", "qwen2"])
def test_same_ids_on_the_sample(style, tokenizers_by_style, sample_records):
    path = tokenizers_by_style[style]
    texts = [r["text"] for r in sample_records]
    ours, theirs = our_ids(path, texts), hf_ids(path, texts)
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) == len(texts) == 1808
    assert sum(map(len, ours)) == sum(map(len, theirs))


def test_configuration_read(tokenizers_by_style):
    expect = {"committed": ("gpt2", False, None), "gpt2": ("gpt2", False, None),
              "llama3": ("llama3", True, None), "qwen2": ("qwen2", False, "NFC")}
    for style, (mode, ignore, form) in expect.items():
        tables = bpe.choose_engine(tokenizers_by_style[style]).tables
        assert (tables.pretokenizer, tables.ignore_merges, tables.normal_form) == (mode, ignore,
                                                                                    form)
    assert bpe.choose_engine(tokenizers_by_style["llama3"]).describe() == (
        "gpupipe (byte-level BPE, llama3 pre-tokenizer; same ids as tokenizers on 27 check "
        "texts)")


# what the hypothesis text is made of: the classes every pre-tokenizer branch looks at
CHARS = ("abcXYZ st'’ÀéĳſKﬆİıßΣσς東京中文한국😀👍🏽\u200d🇫🇷\u0301\u0303\u0338\u09bc"
         "0123٣४½Ⅷ²一"
         " \t\n\r\x0b\x0c\xa0\x85\u2028\u2029\u3000\u200b\u1680\u202f"
         ".,;:!?-_()[]{}<>|/\\\"#$%&*+=@^`~«»„“।。、"
         "\u1c89\ua7cb\U000105c0\U00010d40")  # letters and digits newer than Python's Unicode 14
PIECES = ("'s", "'S", "'ſa", "'ﬆa", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL",
          "'d", "'D", "'ſ", "''", "don't", "DON'T", "12345678", "1234", "   ", "\n\n", "\r\n",
          " \n ", "\t\t", "  x", " 1", " .", ".\n\n", "https://a.b/c?d=e", "Hello", " world",
          "<|", "|>", "<|endoftext|", *(s for group in SPECIALS.values() for s in group))
TEXT = st.lists(st.one_of(st.text(alphabet=CHARS, max_size=6), st.sampled_from(PIECES),
                          st.text(max_size=3)), max_size=24).map("".join)


@pytest.mark.parametrize("style", ["gpt2", "llama3", "qwen2"])
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXT, min_size=1, max_size=8))
def test_same_ids_on_hypothesis_text(style, tokenizers_by_style, texts):
    path = tokenizers_by_style[style]
    assert our_ids(path, texts) == hf_ids(path, texts)


def hf_pieces(path, text) -> list[int]:
    """Byte lengths of the pieces of ``tokenizers``' own pre-tokenizer."""
    chars = bpe_tables._bytes_of_char()
    pre = load_tokenizer(path).pre_tokenizer
    return [len(piece) for piece, _ in pre.pre_tokenize_str(text)
            if all(c in chars for c in piece)]


def our_pieces(path, text) -> list[int]:
    import numpy as np

    from gpupipe.kernels.bpe import pretokens

    data = np.frombuffer(text.encode(), np.uint8)
    ends, _ = pretokens(np.array([0, len(data)]), data, bpe.choose_engine(path).tables.mode,
                        bpe_tables.class_table())
    return np.diff(ends, prepend=0).tolist()


@pytest.mark.parametrize("style", ["gpt2", "llama3", "qwen2"])
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TEXT)
def test_same_pieces_as_the_pre_tokenizer(style, tokenizers_by_style, text):
    """Piece by piece against the regex itself: a wrong boundary need not change the ids of a
    small vocabulary, whose merges seldom cross it."""
    import unicodedata

    path = tokenizers_by_style[style]
    if style == "qwen2":
        text = unicodedata.normalize("NFC", text)  # the pre-tokenizer sees normalised text
    assert our_pieces(path, text) == hf_pieces(path, text)


def test_pieces_of_the_corners(tokenizers_by_style):
    cases = {"'ſab": {"gpt2": [1, 4], "llama3": [3, 2], "qwen2": [3, 2]},
             "'ﬆab": {"gpt2": [1, 5], "llama3": [6], "qwen2": [6]},
             "'Sab x": {"gpt2": [1, 3, 2], "llama3": [2, 2, 2], "qwen2": [2, 2, 2]},
             "  \n\t x12345": {"gpt2": [4, 2, 5], "llama3": [3, 1, 2, 3, 2],
                               "qwen2": [3, 1, 2, 1, 1, 1, 1, 1]}}
    for text, want in cases.items():
        for style, lengths in want.items():
            path = tokenizers_by_style[style]
            assert hf_pieces(path, text) == lengths, (text, style)
            assert our_pieces(path, text) == lengths, (text, style)


def test_long_pieces_merge_through_the_heap(tokenizers_by_style):
    """Pieces longer than the rescanned array (one 56 kB word, CJK without spaces, a run of
    spaces) take the heap; a piece that is one long repeat stresses equal ranks."""
    texts = ["abcdefghij" * 5600, "東京は日本の首都です" * 400, " " * 5000 + "x", "aaaa" * 1000,
             "ab" * 33, "ab" * 32 + "a"]
    for style in ("gpt2", "llama3", "qwen2"):
        path = tokenizers_by_style[style]
        assert our_ids(path, texts) == hf_ids(path, texts)


def edited(path, tmp_path, name, edit) -> str:
    with open(path) as f:
        spec = json.load(f)
    edit(spec)
    out = tmp_path / f"{name}.json"
    out.write_text(json.dumps(spec))
    return str(out)


def test_what_it_cannot_express_falls_back(tokenizers_by_style, tmp_path):
    base = tokenizers_by_style["gpt2"]

    def lower(spec):
        spec["normalizer"] = {"type": "Lowercase"}

    def other_regex(spec):
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"\p{L}+|\s+"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}

    def lstrip(spec):
        spec["added_tokens"][0]["lstrip"] = True

    def prefix_space(spec):
        spec["pre_tokenizer"]["add_prefix_space"] = True

    cases = {"lower": (lower, "normalizer 'Lowercase'"),
             "regex": (other_regex, "a pre-tokenizer other than"),
             "lstrip": (lstrip, "with lstrip: true"),
             "prefix": (prefix_space, "a pre-tokenizer other than")}
    for name, (edit, why) in cases.items():
        path = edited(base, tmp_path, name, edit)
        engine = bpe.choose_engine(path)
        assert engine.name == "huggingface" and why in engine.reason, engine.reason
        with pytest.raises(ValueError, match="engine: gpupipe cannot encode"):
            bpe.choose_engine(path, "gpupipe")
    assert bpe.choose_engine(base, "huggingface").name == "huggingface"


def test_verdict_saved_per_file_and_engine(tokenizers_by_style, tmp_path, monkeypatch,
                                           sample_records):
    """The check runs once per tokenizer file and engine source: later processes load the
    verdict and tables from the cache directory, and a damaged entry is decided again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    decided = []
    real = bpe._decide
    monkeypatch.setattr(bpe, "_decide", lambda *a: decided.append(a[0]) or real(*a))
    path = tokenizers_by_style["llama3"]
    texts = [r["text"] for r in sample_records[:200]]

    def fresh():
        bpe._choose.cache_clear()
        return bpe.choose_engine(path)

    first = fresh()
    [saved] = (tmp_path / "cache" / "gpupipe" / "bpe-engine").iterdir()
    again = fresh()
    assert decided == [path] and again.describe() == first.describe()
    assert bpe.encode_texts(again.tables, texts) == hf_ids(path, texts)
    saved.write_bytes(b"not an npz")
    assert fresh().describe() == first.describe() and decided == [path, path]
    lowered = edited(path, tmp_path, "lower", lambda s: s.update(normalizer={"type": "Lowercase"}))
    bpe._choose.cache_clear()
    assert bpe.choose_engine(lowered).name == "huggingface"
    bpe._choose.cache_clear()
    assert bpe.choose_engine(lowered).name == "huggingface" and len(decided) == 3
    assert len(list(saved.parent.iterdir())) == 2
    bpe._choose.cache_clear()


def test_duplicate_merge_keeps_the_later_rank(tokenizers_by_style, tmp_path, sample_records):
    """A merges list with a pair twice: ``tokenizers`` keeps the later rank, and so must we."""
    def repeat_first(spec):
        spec["model"]["merges"].append(spec["model"]["merges"][0])

    path = edited(tokenizers_by_style["gpt2"], tmp_path, "dup", repeat_first)
    texts = [r["text"] for r in sample_records[:300]]
    theirs = hf_ids(path, texts)
    assert theirs != hf_ids(tokenizers_by_style["gpt2"], texts)  # the edit matters
    assert our_ids(path, texts) == theirs


def test_stage_engines_give_identical_tokens(tokenizers_by_style, sample_records):
    import pandas as pd

    from gpupipe.frame import STRING
    from gpupipe.stages import Tokenize

    texts = [r["text"] for r in sample_records[:400]]
    df = pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                       "text": pd.array(texts, dtype=STRING)})
    path = tokenizers_by_style["llama3"]
    fast = Tokenize(tokenizer=path, add_bos=True)
    slow = Tokenize(tokenizer=path, add_bos=True, engine="huggingface")
    a, b = fast.process(df), slow.process(df)
    assert [list(x) for x in a.frame["tokens"]] == [list(x) for x in b.frame["tokens"]]
    assert a.counters["tokens"] == b.counters["tokens"]
    assert (a.counters["engine_gpupipe_docs"], b.counters["engine_huggingface_docs"]) == (400, 400)
    assert fast.explain_notes()[0].startswith("engine: gpupipe (byte-level BPE, llama3")
    assert a.frame.index.equals(df.index) and a.frame["text"].tolist() == texts
    # gpupipe's engine runs on a cuDF partition's device buffers; tokenizers on the host
    assert Tokenize.backends == ("pandas", "cudf")
    assert (fast.runs_on("cudf"), slow.runs_on("cudf"), fast.runs_on("pandas")) == (
        "cudf", "pandas", "pandas")


def test_stage_warns_when_it_falls_back(tokenizers_by_style, tmp_path):
    from gpupipe.stages import Tokenize

    def lower(spec):
        spec["normalizer"] = {"type": "Lowercase"}

    path = edited(tokenizers_by_style["gpt2"], tmp_path, "lower", lower)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        note = Tokenize(tokenizer=path).check()
    assert "engine huggingface (gpupipe's engine declined: normalizer 'Lowercase'" in note
    assert any("not gpupipe's engine" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match="engine: gpupipe cannot encode"):
        Tokenize(tokenizer=path, engine="gpupipe").check()
    assert Tokenize(tokenizer=path).runs_on("cudf") == "pandas"   # declined: on the host


def claude_tokenizer() -> str:
    """A real tokenizer.json a pip package ships: anthropic 0.20's (a dev dependency)."""
    import os

    anthropic = pytest.importorskip("anthropic")
    path = os.path.join(os.path.dirname(anthropic.__file__), "tokenizer.json")
    if not os.path.exists(path):
        pytest.skip(f"anthropic {anthropic.__version__} ships no tokenizer.json (0.20.0 does)")
    return path


def test_real_tokenizer_file(sample_records):
    """65,000 tokens, NFKC, GPT-2's pre-tokenizer: the kernel encodes what NFKC leaves alone,
    tokenizers the documents the quick check flags, and every id is the same."""
    import pyarrow as pa

    from gpupipe.kernels.utf8 import utf8_buffers

    path = claude_tokenizer()
    engine = bpe.choose_engine(path)
    assert engine.name == "gpupipe" and engine.tables.normal_form == "NFKC", engine.reason
    # NFKC changes: fullwidth letters with an added token; with a letter newer than Python's
    # Unicode; an added token NFKC makes; none of those (normalised here, then the kernel)
    odd = ["ｆｕｌｌ<EOT>width", "ｆｕｌｌ \u1c89 x", "＜EOT＞ ｆｕｌｌ", "ｆｕｌｌ plain ㎏ ²"]
    texts = [r["text"] for r in sample_records] + odd
    off, data = utf8_buffers(pa.array(texts, pa.large_string()))
    flat, lens, by_hf = bpe.encode_buffers(engine.tables, off, data, load_tokenizer(path))
    theirs = hf_ids(path, texts)
    assert flat.tolist() == [i for ids in theirs for i in ids]
    assert lens.tolist() == [len(ids) for ids in theirs]
    assert by_hf == 3  # the first three of `odd`; 318 sample documents NFKC may change


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(TEXT, min_size=1, max_size=8))
def test_real_tokenizer_file_on_hypothesis_text(texts):
    path = claude_tokenizer()
    assert our_ids(path, texts) == hf_ids(path, texts)
