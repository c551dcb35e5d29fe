"""tokenize: text -> token ids with a Hugging Face ``tokenizers`` file, EOD appended."""

from __future__ import annotations

import warnings
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import Field

from gpupipe.frame import TEXT
from gpupipe.stages.base import StageResult, Transform, stage

TOKENS = "tokens"
TOKENS_TYPE = pa.list_(pa.int32())


@stage("tokenize")
class Tokenize(Transform):
    """Encode ``text`` into a ``tokens`` column (int32 ids) with a tokenizers JSON file.

    The end-of-document id is appended to every document (from ``eod_token`` / ``eod_id``, or
    the tokenizer's own ``<|endoftext|>``, ``</s>``, ...). The tokenizer is loaded once per
    worker process. When the pipeline has this stage, the run ends by writing training shards
    (``output.shards``). It must be the last stage.

    ``engine``: ``auto`` encodes a byte-level BPE tokenizer (GPT-2, Llama 3 or Qwen 2.5
    pre-tokenizer) with gpupipe's compiled BPE (`gpupipe.kernels.bpe`), several times faster
    than ``tokenizers`` with the same ids, after checking that on test texts before any data is
    read; any other configuration, or a difference, falls back to ``tokenizers`` with a
    warning. ``gpupipe`` stops the run instead of falling back; ``huggingface`` always uses
    ``tokenizers``. ``explain`` and run.json (counters ``engine_gpupipe_docs``,
    ``engine_huggingface_docs``) say which encoded what. On ``backend: cudf`` gpupipe's engine
    encodes on the GPU (the same routine, compiled for CUDA) and only the ids leave the
    device; ``tokenizers`` runs on the host.
    """

    is_sink: ClassVar[bool] = True
    kernels: ClassVar[tuple[str, ...]] = ("bpe_encode", "needs_normalization")
    host_steps: ClassVar[str] = ("NFC / NFKC of the documents that need it, and the documents "
                                 "handed to tokenizers, on the host")

    tokenizer: str = Field(description="path of a tokenizers JSON file (tokenizer.json)")
    eod_token: str | None = None
    eod_id: Annotated[int | None, Field(ge=0)] = None
    append_eod: bool = True
    add_bos: bool = False
    bos_token: str | None = None
    add_special_tokens: bool = False
    batch_size: Annotated[int, Field(ge=1)] = 1024
    keep_text: bool = True
    engine: Literal["auto", "gpupipe", "huggingface"] = "auto"

    def __post_init__(self):
        # fail before any data is read: missing file, not a tokenizer, no EOD token
        self.info()

    def info(self):
        from gpupipe.io.tokenizer import describe_tokenizer

        try:
            return describe_tokenizer(self.tokenizer, eod_token=self.eod_token,
                                      eod_id=self.eod_id, bos_token=self.bos_token)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None

    def chosen_engine(self):
        """The `gpupipe.io.bpe.Engine` this stage encodes with (decided once per process)."""
        from gpupipe.io.bpe import choose_engine

        return choose_engine(self.tokenizer, self.engine, self.add_special_tokens)

    def check(self, ctx=None) -> str | None:
        engine = self.chosen_engine()
        if self.engine == "auto" and engine.name != "gpupipe":
            warnings.warn(f"tokenize: encoding with tokenizers, not gpupipe's engine: "
                          f"{engine.reason}", stacklevel=2)
        return f"engine {engine.describe()}"

    def runs_on(self, backend: str) -> str:
        # gpupipe's engine runs on either backend; tokenizers only on the host
        if self.chosen_engine().name != "gpupipe":
            return "pandas"
        return super().runs_on(backend)

    def explain_notes(self) -> list[str]:
        return [f"engine: {self.chosen_engine().describe()}"]

    def added_columns(self) -> dict[str, str]:
        return {TOKENS: pd.ArrowDtype(TOKENS_TYPE)}

    def transform(self, df):
        from gpupipe.backends import dispatch
        from gpupipe.io.bpe import encode_buffers
        from gpupipe.io.tokenizer import load_tokenizer

        info = self.info()
        tok = load_tokenizer(self.tokenizer)
        if self.add_bos and info.bos_id is None:
            raise ValueError(f"add_bos: tokenizer {self.tokenizer!r} has no BOS token; "
                             f"set bos_token")
        bos = info.bos_id if self.add_bos else -1
        eod = info.eod_id if self.append_eod else -1
        engine = self.chosen_engine()
        if engine.name == "gpupipe":
            # on cuDF the kernel reads the column on the device; only the ids come back
            offsets, data = dispatch.text_buffers(df[TEXT])
            flat, lengths, by_hf = encode_buffers(
                engine.tables, offsets, data, tok, bos=bos, eod=eod,
                kernels=dispatch.kernels_for(df),
                texts_of=lambda rows: dispatch.take_text(df[TEXT], rows).to_pylist())
        else:
            flat, lengths = self._encode_hf(tok, df[TEXT].tolist(), bos, eod)
            by_hf = len(lengths)
        if flat.size >= 2**31:
            raise ValueError(f"{flat.size:,} tokens in one partition exceed the 2^31 limit of a "
                             f"list column; add a repartition stage before tokenize")
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
        tokens = pd.DataFrame({TOKENS: pd.arrays.ArrowExtensionArray(arr)})
        out = df.assign(**{TOKENS: dispatch.like(df, tokens)[TOKENS]})
        if not self.keep_text:
            out = out.assign(**{TEXT: ""})
        return StageResult(out, counters={"tokens": int(lengths.sum()),
                                          "engine_gpupipe_docs": len(lengths) - by_hf,
                                          "engine_huggingface_docs": by_hf})

    def _encode_hf(self, tok, texts: list[str], bos: int, eod: int):
        lengths = np.empty(len(texts), dtype=np.int64)
        chunks: list[np.ndarray] = []
        head = [np.array([bos], np.int32)] if bos >= 0 else []
        tail = [np.array([eod], np.int32)] if eod >= 0 else []
        for start in range(0, len(texts), self.batch_size):
            batch = tok.encode_batch_fast(texts[start: start + self.batch_size],
                                          add_special_tokens=self.add_special_tokens)
            for k, enc in enumerate(batch):
                ids = np.asarray(enc.ids, dtype=np.int32)
                lengths[start + k] = len(ids) + len(head) + len(tail)
                chunks += [*head, ids, *tail]
        return (np.concatenate(chunks) if chunks else np.zeros(0, np.int32)), lengths
