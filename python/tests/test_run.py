"""Models run on the default backend against the reference interpreter: every bundled example
graph, an ONNX model with a symbolic batch, every dtype in and out."""

import os

import numpy as np
import pytest

import graphc
from conftest import EXAMPLES, assert_same, example, graph_names, seeded_feeds

GIR = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".gir"))


def outcome(model, feeds):
    try:
        return model.run(feeds)
    except graphc.GraphcError as e:
        return e


@pytest.mark.parametrize("name", GIR)
def test_every_example_graph_matches_the_interpreter(name):
    path = example(name)
    for graph in graph_names(path):
        ref = graphc.load(path, graph=graph, backend="interp")
        got = graphc.load(path, graph=graph)
        assert ref.inputs == got.inputs and ref.outputs == got.outputs
        feeds = seeded_feeds(ref, seed=len(graph))
        expected, result = outcome(ref, feeds), outcome(got, feeds)
        # A graph that cannot run alone (a dequeue no one feeds, a recv) fails on both.
        if isinstance(expected, Exception):
            assert isinstance(result, Exception), f"@{graph}: the interpreter failed ({expected}), the default did not"
            continue
        assert not isinstance(result, Exception), f"@{graph}: {result}"
        assert_same(expected, result, f"{name} @{graph}")


def test_outputs_are_named_typed_and_shaped_as_declared():
    m = graphc.load(example("mlp.gir"))
    assert [i.name for i in m.inputs] == ["x", "w1", "b1", "w2", "b2"]
    assert m.inputs[0].dtype == "float32" and m.inputs[0].shape == (64, 784)
    assert [(o.name, o.dtype, o.shape) for o in m.outputs] == [("probs", "float32", (64, 10))]
    out = m.run(seeded_feeds(m))
    assert list(out) == ["probs"] and out["probs"].shape == (64, 10)
    assert np.allclose(out["probs"].sum(axis=1), 1.0, atol=1e-5)
    # The array is the caller's: writable, and not changed by the next run.
    first = out["probs"].copy()
    out["probs"][:] = 0
    assert np.array_equal(m.run(seeded_feeds(m))["probs"], first)


def test_fetch_returns_an_intermediate_value_as_the_interpreter_computes_it():
    path = example("mlp.gir")
    feeds = seeded_feeds(graphc.load(path))
    ref = graphc.load(path, backend="interp").run(feeds, fetch=["hb"])
    got = graphc.load(path).run(feeds, fetch=["hb"])
    assert list(got) == ["hb"] and got["hb"].shape == (64, 256)
    assert_same(ref, got)


def test_several_graphs_run_as_one_step_with_their_outputs_prefixed():
    path = example("train_step.gir")
    m = graphc.load(path, graph=["step", "predict"], backend="interp")
    x = np.ones((8, 4), np.float32)
    out = m.run({"x": x, "t": np.zeros((8, 1), np.float32)})
    assert sorted(out) == ["predict.y", "step.loss"]


def test_devices_place_and_partition_as_graphc_run_does():
    path = example("two_branches.gir")
    ref = graphc.load(path, backend="interp")
    got = graphc.load(path, devices=example("two_cpus.devices.toml"))
    feeds = seeded_feeds(ref)
    assert_same(ref.run(feeds), got.run(feeds), "on two CPUs")


def test_a_placement_that_cannot_be_made_is_reported_at_the_node(tmp_path):
    with pytest.raises(graphc.GraphcError) as e:
        graphc.load(example("devices.gir"), devices=example("two_cpus.devices.toml"))
    text = str(e.value)
    assert "devices.gir:4:3: error: 'variable %w' is pinned to '/job:ps/replica:0/task:0/device:cpu:0'" in text
    assert "help: the devices are cpu0" in text


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"]
IR = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool"}


@pytest.mark.parametrize("backend", ["interp", None])
def test_every_dtype_goes_in_and_comes_out_bit_for_bit(tmp_path, backend):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    args = ", ".join(f"%{IR[d]}: {IR[d]}[2,3]" for d in DTYPES)
    results = ", ".join(f"{IR[d]}: {IR[d]}[2,3]" for d in DTYPES)
    body = "\n".join(f"  %o{IR[d]} = identity %{IR[d]} : {IR[d]}[2,3]" for d in DTYPES)
    path = write(tmp_path / "dtypes.gir", f"graph @g({args}) -> ({results}) {{\n{body}\n  return {', '.join('%o' + IR[d] for d in DTYPES)}\n}}\n")
    m = graphc.load(path, backend=backend)
    assert [i.dtype for i in m.inputs] == DTYPES
    rng = np.random.default_rng(1)
    feeds = {}
    for d in DTYPES:
        if d == "bool":
            feeds["bool"] = rng.integers(0, 2, (2, 3)).astype(bool)
        elif d == "bfloat16":
            feeds["bf16"] = rng.normal(size=(2, 3)).astype(ml_dtypes.bfloat16)
        elif d.startswith("float"):
            feeds[IR[d]] = rng.normal(size=(2, 3)).astype(d)
        else:
            info = np.iinfo(d)
            feeds[IR[d]] = rng.integers(info.min, info.max, (2, 3), dtype=d, endpoint=True)
    out = m.run(feeds)
    for d in DTYPES:
        got, fed = out[IR[d]], feeds[IR[d]]
        assert got.dtype == fed.dtype and got.shape == fed.shape, d
        assert got.tobytes() == fed.tobytes(), d


def onnx_model(path, batch="N"):
    """A small ONNX model: y = relu(x @ W + b), z = sum of y over axis 1 (keepdims), with a
    symbolic batch `batch` (or a fixed one)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.normal(size=(3, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 1])],
        [w, b, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return str(path), numpy_helper.to_array(w), numpy_helper.to_array(b)


def test_an_onnx_model_with_a_symbolic_batch_is_compiled_per_fed_shape(tmp_path):
    path, w, b = onnx_model(tmp_path / "small.onnx")
    m = graphc.load(path)
    ref = graphc.load(path, backend="interp")
    assert [(i.name, i.dtype, i.shape) for i in m.inputs] == [("x", "float32", ("N", 3))]
    assert [(o.name, o.shape) for o in m.outputs] == [("y", ("N", 4)), ("z", ("N", 1))]
    assert m.compiled_shapes == []
    rng = np.random.default_rng(3)
    for n in [2, 5, 2]:
        x = rng.normal(size=(n, 3)).astype(np.float32)
        out = m.run({"x": x})
        y = np.maximum(x @ w + b, 0)
        assert np.allclose(out["y"], y, atol=1e-5) and np.allclose(out["z"], y.sum(1, keepdims=True), atol=1e-5)
        assert_same(ref.run({"x": x}), out, f"N={n}")
    # Compiled once per shape; the second N=2 came from the cache.
    assert m.compiled_shapes == [{"x": (5, 3)}, {"x": (2, 3)}]


def test_shapes_binds_a_symbolic_dim_at_load(tmp_path):
    path, w, b = onnx_model(tmp_path / "small.onnx")
    m = graphc.load(path, shapes={"N": 4})
    assert m.inputs[0].shape == (4, 3) and m.outputs[1].shape == (4, 1)
    assert m.compiled_shapes == [{}]
    x = np.ones((4, 3), np.float32)
    assert np.allclose(m.run({"x": x})["y"], np.maximum(x @ w + b, 0), atol=1e-5)
    with pytest.raises(graphc.GraphcError, match=r"input 'x': expected a float32 array of shape \(4, 3\), got a float32 array of shape \(2, 3\)"):
        m.run({"x": np.ones((2, 3), np.float32)})


def test_a_model_with_a_fixed_batch_onnx_runs_like_the_interpreter(tmp_path):
    path, _, _ = onnx_model(tmp_path / "fixed.onnx", batch=6)
    m, ref = graphc.load(path), graphc.load(path, backend="interp")
    feeds = seeded_feeds(m)
    assert_same(ref.run(feeds), m.run(feeds))


def test_backends_lists_this_builds_backends_default_first():
    names = [n for n, _ in graphc.backends()]
    assert names[0] == graphc.load(example("mlp.gir")).backend
    assert "interp" in names and "jit" in names


def test_an_input_the_import_needs_the_value_of_is_taken_from_what_is_fed(tmp_path):
    """A Reshape whose shape is a graph input: as `graphc run` imports it with its --input
    values, the fed value is used, and another value is another program."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = str(tmp_path / "reshape.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    m = graphc.load(path)
    assert m.outputs[0].shape is None
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in [(4, 3), (3, 4), (4, 3)]:
        out = m.run({"x": x, "shape": np.array(shape, np.int64)})
        assert np.array_equal(out["y"], x.reshape(shape))
    assert [d["x"] for d in m.compiled_shapes] == [(2, 6), (2, 6)]
