"""Tiny ONNX models built in the tests with onnx.helper (nothing is downloaded): token
embeddings averaged under the attention mask, then a linear layer (a classifier's logits, or
one regression output), over the ids of the project tokenizer."""

from __future__ import annotations

import numpy as np


def mean_pool_linear(path, *, vocab: int, dim: int = 16, classes: int = 2, seed: int = 0,
                     input_names=("input_ids", "attention_mask"), output: str = "logits",
                     token_types: bool = False, weights: str | None = None) -> str:
    """The model as ONNX at ``path``; with ``weights``, its E, W and b also as an .npz (what
    tests/triton_server.py serves)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    ids_name, mask_name = input_names
    e = rng.normal(size=(vocab, dim)).astype(np.float32)
    w = rng.normal(size=(dim, classes)).astype(np.float32)
    b = rng.normal(size=(classes,)).astype(np.float32)
    if weights is not None:
        np.savez(weights, E=e, W=w, b=b)
    inits = [numpy_helper.from_array(e, "E"), numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
             numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2")]
    nodes = [helper.make_node("Gather", ["E", ids_name], ["emb"], axis=0),
             helper.make_node("Cast", [mask_name], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axis2"], ["m3"]),
             helper.make_node("Mul", ["emb", "m3"], ["masked"]),
             helper.make_node("ReduceSum", ["masked", "axis1"], ["total"], keepdims=0),
             helper.make_node("ReduceSum", ["m", "axis1"], ["count"], keepdims=1),
             helper.make_node("Div", ["total", "count"], ["mean"]),
             helper.make_node("MatMul", ["mean", "W"], ["proj"]),
             helper.make_node("Add", ["proj", "b"], [output])]
    inputs = [helper.make_tensor_value_info(ids_name, TensorProto.INT64, ["batch", "tokens"]),
              helper.make_tensor_value_info(mask_name, TensorProto.INT64, ["batch", "tokens"])]
    if token_types:   # a BERT-style input the model takes and ignores
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64,
                                                    ["batch", "tokens"]))
        nodes.append(helper.make_node("Identity", ["token_type_ids"], ["unused"]))
    graph = helper.make_graph(
        nodes, "mean_pool_linear", inputs,
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def token_embeddings(path, *, vocab: int, dim: int = 256, seed: int = 0,
                     output: str = "last_hidden_state") -> str:
    """An 'encoder' whose token output is a fixed random vector per token id ([batch, tokens,
    dim]): mean-pooled and normalised, the cosine of two documents approximates that of their
    bags of tokens (a random projection), so a copy with a few words changed stays close and
    unrelated texts do not."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["gathered"], axis=0),
             helper.make_node("Cast", ["attention_mask"], ["unused_mask"], to=TensorProto.FLOAT),
             helper.make_node("Identity", ["gathered"], [output])]
    graph = helper.make_graph(
        nodes, "token_embeddings",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", "tokens", dim])],
        [numpy_helper.from_array(rng.normal(size=(vocab, dim)).astype(np.float32), "E")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)
