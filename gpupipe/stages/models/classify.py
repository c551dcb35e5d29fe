"""classify: score documents with a model (fastText or ONNX), optionally filter on the result."""

from __future__ import annotations

import os
from typing import Annotated, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import AliasChoices, Field

from gpupipe.backends import dispatch
from gpupipe.frame import TEXT, text_array
from gpupipe.stages.base import Filter, first_failure, stage
from gpupipe.stages.models import runtimes


@stage("classify")
class Classify(Filter):
    """Score every document with a model and add ``<name>_label`` (the most probable class) and
    ``<name>_score``, or only ``<name>_score`` for a regression head; ``keep``, ``min_score``
    and ``max_score`` turn it into a filter.

    ``runtime: fasttext``: a fastText ``.bin`` (DCLM / FineWeb style classifiers); newlines
    become spaces first (``newlines: space``), as fastText predicts one line.
    ``runtime: onnx``: an ONNX model that takes HF-style ``input_ids`` and ``attention_mask``
    (and ``token_type_ids`` as zeros when it has that input) from ``tokenizer`` (a tokenizers
    JSON file), truncated to ``max_length``. Documents are sorted by token count inside a
    partition and sent in batches of at most ``batch_tokens`` padded tokens; results go back in
    the original order. The output (``output_name``, default the first) is logits unless
    ``outputs: probabilities``; ``labels`` names its classes. A regression head
    (``head: regression``) has one output column, the score as it is. ONNX Runtime uses CUDA when
    its GPU build is installed and a GPU works, the CPU otherwise (``explain`` says which).
    ``runtime: triton``: the same tokenization and batching, sent to a Triton Inference Server
    (``url``: ``grpc://host:8001`` or ``http://host:8000``; ``model`` is the model's name there,
    ``model_version`` optional), at most the model's ``max_batch_size`` rows a request; failed
    requests are retried ``retries`` times, each waits at most ``timeout`` seconds, and a server
    that cannot be reached stops the run with its URL.

    ``<name>_score`` of a classifier is the probability of ``score_label`` when given (e.g. the
    ``hq`` class of a quality model), else of the predicted label. Models are loaded once per
    worker process, lazily, and never shipped with the stage.
    """

    reasons: ClassVar[tuple[str, ...]] = ("label_not_kept", "score_below_min",
                                          "score_above_max")

    #: also accepted as ``kind`` (the stage's own ``kind`` attribute means row/global)
    runtime: Annotated[Literal["fasttext", "onnx", "triton"],
                       Field(validation_alias=AliasChoices("runtime", "kind"))]
    model: str
    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "quality"
    head: Literal["classification", "regression"] = "classification"
    labels: tuple[str, ...] | None = None
    score_label: str | None = None
    keep: tuple[str, ...] | None = None
    min_score: float | None = None
    max_score: float | None = None
    newlines: Literal["space", "keep"] = "space"
    tokenizer: str | None = None
    max_length: Annotated[int, Field(ge=1)] = 512
    batch_tokens: Annotated[int, Field(ge=1)] = 16384
    input_ids_name: str = "input_ids"
    attention_mask_name: str | None = "attention_mask"
    output_name: str | None = None
    outputs: Literal["logits", "probabilities"] = "logits"
    threads: Annotated[int, Field(ge=1)] = 1
    url: str | None = None
    model_version: str = ""
    timeout: Annotated[float, Field(gt=0)] = 60.0
    retries: Annotated[int, Field(ge=0)] = 3

    def __post_init__(self):
        if self.runtime == "triton":
            if not self.url:
                raise ValueError("runtime: triton needs url (grpc://host:8001 or "
                                 "http://host:8000)")
            runtimes.triton_target(self.url)
        elif not os.path.isfile(self.model):
            raise ValueError(f"model {self.model!r} is not a file")
        elif self.url is not None:
            raise ValueError(f"url is for runtime: triton (runtime is {self.runtime})")
        if self.runtime in ("onnx", "triton"):
            if self.tokenizer is None:
                raise ValueError(f"runtime: {self.runtime} needs tokenizer (a tokenizers JSON "
                                 f"file)")
            if not os.path.isfile(self.tokenizer):
                raise ValueError(f"tokenizer {self.tokenizer!r} is not a file")
        if self.runtime == "fasttext" and self.head == "regression":
            raise ValueError("fastText models are classifiers: head: regression needs runtime: "
                             "onnx or triton")
        if self.head == "regression" and (self.keep or self.labels or self.score_label):
            raise ValueError("a regression head has no labels: keep, labels and score_label "
                             "apply to classifiers")
        if self.min_score is not None and self.max_score is not None \
                and self.min_score > self.max_score:
            raise ValueError(f"min_score ({self.min_score}) is greater than max_score "
                             f"({self.max_score})")

    # --- columns --------------------------------------------------------------------------

    @property
    def label_column(self) -> str:
        return f"{self.name}_label"

    @property
    def score_column(self) -> str:
        return f"{self.name}_score"

    def added_columns(self) -> dict[str, str]:
        cols = {self.score_column: "float32"}
        if self.head == "classification":
            cols = {self.label_column: "string", **cols}
        return {**cols, **super().added_columns()}

    def identity(self) -> dict:
        """The model and tokenizer files (size, modification time): a new model recomputes. A
        Triton model is named by url, model and version (parameters already)."""
        files = [f for f in ((self.tokenizer,) if self.runtime == "triton"
                             else (self.model, self.tokenizer)) if f]
        return {"files": [[f, os.path.getsize(f), os.stat(f).st_mtime_ns] for f in files]}

    # --- the model ------------------------------------------------------------------------

    def class_names(self) -> list[str]:
        if self.runtime == "fasttext":
            return runtimes.fasttext_labels(self.model)
        if self.labels is not None:
            return list(self.labels)
        return [str(k) for k in range(self._width())]

    def _onnx_output(self, session):
        return runtimes.onnx_output(session, self.model, self.output_name)

    def _triton(self) -> dict:
        return runtimes.triton_metadata(self.url, self.model, self.model_version, self.timeout)

    def _triton_output(self, meta: dict) -> str:
        if self.output_name is None:
            return next(iter(meta["outputs"]))
        if self.output_name not in meta["outputs"]:
            raise ValueError(f"{self._where()}: no output named {self.output_name!r} (it has "
                             f"{list(meta['outputs'])})")
        return self.output_name

    def _width(self) -> int:
        """Columns of the model's output (-1 when the model does not say)."""
        if self.runtime == "triton":
            meta = self._triton()
            shape = meta["outputs"][self._triton_output(meta)]
        else:
            shape = self._onnx_output(runtimes.onnx_session(self.model, self.threads)).shape
        dim = shape[-1] if shape else None
        return int(dim) if isinstance(dim, int) and dim > 0 else -1

    def _where(self) -> str:
        if self.runtime == "triton":
            return f"Triton model {self.model!r} at {self.url}"
        return self.model

    def _check_inputs(self, inputs: list[str]) -> None:
        runtimes.check_inputs(self._where(), inputs, self.input_ids_name,
                              self.attention_mask_name)

    def check(self, ctx=None) -> str:
        """Load (or reach) the model on the client and check it against the parameters: input
        and output names, the number of classes, the labels named in keep / score_label.
        Returns a line for the log."""
        if self.runtime == "fasttext":
            names = runtimes.fasttext_labels(self.model)
            where = f"{os.path.basename(self.model)}, fastText"
        else:
            runtimes.tokenizer(self.tokenizer, self.max_length)
            if self.runtime == "triton":
                meta = self._triton()
                self._check_inputs(meta["inputs"])
                self._triton_output(meta)
                if meta["max_batch_size"] < 1:
                    raise ValueError(f"{self._where()}: the model does not batch "
                                     f"(max_batch_size 0); classify sends batches")
                where = f"{self.model} on Triton at {self.url}"
                output = self._triton_output(meta)
            else:
                session = runtimes.onnx_session(self.model, self.threads)
                self._check_inputs([i.name for i in session.get_inputs()])
                where = (f"{os.path.basename(self.model)}, ONNX Runtime on "
                         f"{runtimes.provider(session)}")
                output = self._onnx_output(session).name
            width = self._width()
            if self.head == "regression" and width not in (1, -1):
                raise ValueError(f"{self._where()}: head: regression needs one output column; "
                                 f"{output!r} has {width}")
            if self.head == "classification" and width == 1:
                raise ValueError(f"{self._where()}: one output column is a regression head: "
                                 f"set head: regression")
            if self.head == "classification" and width == -1 and self.labels is None:
                raise ValueError(f"{self._where()}: the model does not say how many classes "
                                 f"{output!r} has; name them with labels")
            if self.labels is not None and width != -1 and len(self.labels) != width:
                raise ValueError(f"{self._where()}: labels names {len(self.labels)} classes; "
                                 f"the model outputs {width}")
            names = self.class_names() if self.head == "classification" else []
        for label in [*(self.keep or ()), *([self.score_label] if self.score_label else [])]:
            if label not in names:
                raise ValueError(f"{self._where()}: no class {label!r} (the classes are "
                                 f"{names})")
        what = f"{len(names)} classes" if self.head == "classification" else "regression"
        columns = ", ".join(c for c in self.added_columns() if c != self.reason_column)
        return f"model {where}, {what} → {columns}"

    def explain_notes(self) -> list[str]:
        try:
            return [self.check()]
        except Exception as e:  # noqa: BLE001 - explain shows the problem instead of failing
            return [f"cannot load the model: {e}"]

    def scores(self, texts: list[str]) -> np.ndarray:
        """[documents, classes] probabilities (classification) or [documents, 1] scores."""
        if self.runtime == "fasttext":
            if self.newlines == "space":
                texts = [t.replace("\n", " ") for t in texts]
            return runtimes.fasttext_probabilities(self.model, texts)
        tok = runtimes.tokenizer(self.tokenizer, self.max_length)

        def flat(out, mask):
            return out.reshape(len(out), -1)

        if self.runtime == "triton":
            meta = self._triton()
            output = self._triton_output(meta)
            types = "token_type_ids" in meta["inputs"]

            def call(ids, mask):
                inputs = {self.input_ids_name: ids}
                if self.attention_mask_name:
                    inputs[self.attention_mask_name] = mask
                if types:
                    inputs["token_type_ids"] = np.zeros_like(ids)
                return runtimes.triton_call(self.url, self.model, self.model_version,
                                            self.timeout, self.retries, inputs=inputs,
                                            output=output)

            result = runtimes.run_batches(tok, texts, batch_tokens=self.batch_tokens, call=call,
                                          reduce=flat, max_batch=meta["max_batch_size"])
        else:
            session = runtimes.onnx_session(self.model, self.threads)
            result = runtimes.run_onnx(
                session, tok, texts, batch_tokens=self.batch_tokens,
                input_ids_name=self.input_ids_name, attention_mask_name=self.attention_mask_name,
                output_name=self._onnx_output(session).name, reduce=flat)
        if result is None:   # no documents
            width = 1 if self.head == "regression" else len(self.class_names())
            return np.zeros((0, width), dtype=np.float32)
        if self.head == "classification" and self.outputs == "logits":
            result = runtimes.softmax(result)
        return result

    # --- the filter -----------------------------------------------------------------------

    def _score_and_best(self, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(score per document, index of the predicted class or None for regression)."""
        if self.head == "regression":
            return probs[:, 0].astype(np.float32), None
        best = probs.argmax(axis=1)
        column = (probs[:, self.class_names().index(self.score_label)]
                  if self.score_label is not None else probs[np.arange(len(best)), best])
        return column.astype(np.float32), best

    def evaluate(self, df):
        # runs on pandas (the runner converts a cuDF partition); ONNX Runtime uses the GPU
        # itself when its CUDA provider works
        texts = text_array(df[TEXT]).fill_null("").to_pylist()
        score, best = self._score_and_best(self.scores(texts))
        columns = {self.score_column: pd.Series(score, index=df.index, dtype="float32")}
        not_kept, counters = None, {}
        if best is not None:
            names = self.class_names()
            columns = {self.label_column: dispatch.label_column(df, best.astype(np.int64) + 1,
                                                            names), **columns}
            if self.keep is not None:
                not_kept = ~np.isin(best, [k for k, n in enumerate(names) if n in self.keep])
            counts = np.bincount(best, minlength=len(names))
            counters = {f"label:{names[k]}": int(v) for k, v in enumerate(counts) if v}
        low = score < self.min_score if self.min_score is not None else None
        high = score > self.max_score if self.max_score is not None else None
        return first_failure([not_kept, low, high], len(df)), df.assign(**columns), counters

    bounds: ClassVar[dict] = {"score": (("min_score", "min"), ("max_score", "max"))}

    def measures(self, df):
        texts = text_array(df[TEXT]).fill_null("").to_pylist()
        return {"score": self._score_and_best(self.scores(texts))[0]}
