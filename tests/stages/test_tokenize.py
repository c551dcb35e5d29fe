from __future__ import annotations

import json

import pandas as pd
import pytest

import gpupipe as gp
from gpupipe.frame import STRING
from gpupipe.io.tokenizer import load_tokenizer
from gpupipe.stages import Tokenize

TOK = "data/tokenizer.json"


def frame(texts):
    return pd.DataFrame({"id": pd.array([str(i) for i in range(len(texts))], dtype=STRING),
                         "text": pd.array(texts, dtype=STRING)})


def test_tokens_equal_raw_encoding_plus_eod(sample_records):
    texts = [r["text"] for r in sample_records[:50]]
    res = Tokenize(tokenizer=TOK, batch_size=7).process(frame(texts))
    tok = load_tokenizer(TOK)
    eod = tok.token_to_id("<|endoftext|>")
    expected = [e.ids + [eod] for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert [list(t) for t in res.frame["tokens"]] == expected
    assert res.counters["tokens"] == sum(map(len, expected))
    assert tok.decode(expected[3][:-1]) == texts[3]  # byte-level BPE round-trips


def test_bos_and_no_eod():
    st = Tokenize(tokenizer=TOK, append_eod=False)
    assert list(st.process(frame(["hi"])).frame["tokens"][0]) == load_tokenizer(TOK).encode(
        "hi").ids
    with pytest.raises(ValueError, match="no BOS token"):
        Tokenize(tokenizer=TOK, add_bos=True).process(frame(["x"]))
    bos = Tokenize(tokenizer=TOK, add_bos=True, bos_token="<|pad|>").process(frame(["x"]))
    assert list(bos.frame["tokens"][0])[0] == 1


def test_empty_partition():
    res = Tokenize(tokenizer=TOK).process(frame([]))
    assert len(res.frame) == 0 and res.counters["tokens"] == 0


def test_clear_errors_before_the_run(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Tokenize(tokenizer=str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a Hugging Face tokenizers JSON"):
        Tokenize(tokenizer=str(bad))
    with pytest.raises(ValueError, match="eod_token '<eos>' is not in"):
        Tokenize(tokenizer=TOK, eod_token="<eos>")
    # a tokenizer without any end-of-document token
    data = json.loads(open(TOK).read())
    data["added_tokens"] = []
    vocab = data["model"]["vocab"]
    for t in ("<|endoftext|>", "<|pad|>"):
        vocab.pop(t, None)
    no_eod = tmp_path / "no_eod.json"
    no_eod.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="has no end-of-document token"):
        Tokenize(tokenizer=str(no_eod))
    assert Tokenize(tokenizer=str(no_eod), eod_id=5).info().eod_id == 5


def test_spec_rules():
    with pytest.raises(gp.SpecError, match="tokenize must be the last stage"):
        gp.Pipeline(input="x.jsonl", output="o",
                    stages=[Tokenize(tokenizer=TOK), gp.stages.LengthFilter()])
    with pytest.raises(gp.SpecError, match="needs a tokenize stage"):
        gp.Pipeline.from_dict({"input": "x.jsonl", "output": {"path": "o", "shards": {}}})
    with pytest.raises(gp.SpecError, match="sum to 1"):
        gp.Pipeline.from_dict({"input": "x.jsonl", "stages": [{"stage": "tokenize",
                                                                "tokenizer": TOK}],
                               "output": {"path": "o", "shards": {"splits": {"train": 0.5}}}})
