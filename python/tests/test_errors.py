"""Bad input: each gets a graphc.GraphcError naming the input, what was expected and what
came (never a crash of the interpreter); IR errors come with their place in the file."""

import numpy as np
import pytest

import graphc
from conftest import example
from test_run import onnx_model

MLP = example("mlp.gir")


@pytest.fixture(scope="module")
def mlp():
    return graphc.load(MLP)


def feeds(**changes):
    f = {
        "x": np.zeros((64, 784), np.float32),
        "w1": np.zeros((784, 256), np.float32),
        "b1": np.zeros(256, np.float32),
        "w2": np.zeros((256, 10), np.float32),
        "b2": np.zeros(10, np.float32),
    }
    f.update(changes)
    return {k: v for k, v in f.items() if v is not None}


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            {"b1": np.zeros(256, np.float64)},
            r"input 'b1': expected a float32 array of shape \(256,\), got a float64 array of shape \(256,\)",
        ),
        (
            {"x": np.zeros((32, 784), np.float32)},
            r"input 'x': expected a float32 array of shape \(64, 784\), got a float32 array of shape \(32, 784\)",
        ),
        (
            {"x": np.zeros((64, 784, 1), np.float32)},
            r"input 'x': expected a float32 array of shape \(64, 784\), got a float32 array of shape \(64, 784, 1\)",
        ),
        (
            {"b2": np.zeros(10, ">f4")},
            r"input 'b2': expected a float32 array of shape \(10,\), got a >f4 array of shape \(10,\)",
        ),
        (
            {"x": np.zeros((784, 64), np.float32).T},
            r"input 'x': expected a C-contiguous float32 array of shape \(64, 784\), got a float32 array of shape \(64, 784\) that is not contiguous .*numpy.ascontiguousarray\(x\)",
        ),
        (
            {"b1": np.zeros(256, np.int64)},
            r"input 'b1': expected a float32 array of shape \(256,\), got an int64 array of shape \(256,\)",
        ),
        ({"b1": [0.0] * 256}, r"input 'b1': expected a numpy array, got a list \(numpy.asarray converts it\)"),
        ({"xx": np.zeros(3, np.float32)}, r"no input named 'xx'; did you mean 'x'\? the model's inputs are: x \(float32 array of shape \(64, 784\)\), w1"),
        ({"w2": None}, r"missing input 'w2' \(float32 array of shape \(256, 10\)\); the model's inputs are: x"),
    ],
)
def test_a_bad_feed_names_the_input_what_was_expected_and_what_came(mlp, bad, message):
    with pytest.raises(graphc.GraphcError, match=message):
        mlp.run(feeds(**bad))
    # The model is as good as before.
    assert mlp.run(feeds())["probs"].shape == (64, 10)


def test_feeds_must_be_a_dict_of_names(mlp):
    with pytest.raises(graphc.GraphcError, match=r"a dict of input names \(str\) to numpy arrays; a key is 3"):
        mlp.run({3: np.zeros(3)})
    with pytest.raises(TypeError):
        mlp.run([np.zeros(3)])


def test_a_fetch_of_no_value_says_so(mlp):
    with pytest.raises(graphc.GraphcError, match=r"cannot fetch 'hbb'.*did you mean 'hb'"):
        mlp.run(feeds(), fetch=["hbb"])


def test_symbolic_dims_are_checked_across_inputs_before_anything_is_compiled(tmp_path):
    path, _, _ = onnx_model(tmp_path / "small.onnx")
    m = graphc.load(path)
    with pytest.raises(graphc.GraphcError, match=r"input 'x': expected a float32 array of shape \('N', 3\), got a float32 array of shape \(2, 4\)"):
        m.run({"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(graphc.GraphcError, match=r"shapes=\{'M': \.\.\.\}: .*small.onnx has no symbolic dim 'M'; its inputs' symbolic dims are N"):
        graphc.load(path, shapes={"M": 2})
    assert m.compiled_shapes == []


def test_one_symbolic_dim_has_one_size_across_inputs(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        "add",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3]) for n in ["x", "y"]],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])],
    )
    path = str(tmp_path / "add.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    m = graphc.load(path)
    with pytest.raises(graphc.GraphcError, match=r"input 'y': its dim 'N' is 5, but input 'x' has 'N' = 2 \(a float32 array of shape \('N', 3\) for 'y', got a float32 array of shape \(5, 3\)\)"):
        m.run({"x": np.zeros((2, 3), np.float32), "y": np.zeros((5, 3), np.float32)})
    out = m.run({"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32)})
    assert np.array_equal(out["z"], np.full((2, 3), 2, np.float32))


def test_a_session_of_a_model_compiled_per_shape_keeps_its_first_shape(tmp_path):
    path, _, _ = onnx_model(tmp_path / "small.onnx")
    s = graphc.load(path).session()
    with pytest.raises(graphc.GraphcError, match="run a step first"):
        s.variables()
    s.run({"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(graphc.GraphcError, match=r"expected a float32 array of shape \(2, 3\), got a float32 array of shape \(5, 3\) \(the session was bound to the shapes of its first step: x \[2, 3\]\)"):
        s.run({"x": np.zeros((5, 3), np.float32)})


def test_ir_errors_are_rendered_with_their_place_as_the_cli_prints_them(tmp_path):
    bad = tmp_path / "bad.gir"
    bad.write_text("graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y = exp %z : f32[2]\n  return %y\n}\n")
    with pytest.raises(graphc.GraphcError) as e:
        graphc.load(str(bad))
    text = str(e.value)
    assert f"{bad}:2:" in text and "%z" in text and "1 error" in text


def test_a_step_that_fails_is_reported_at_its_node(tmp_path):
    div = tmp_path / "div.gir"
    div.write_text(
        "graph @g(%x: i32[]) -> (q: i32[]) {\n"
        "  %z = constant {value = dense<0> : i32[]} : i32[]\n"
        "  %q = div %x, %z : i32[]\n"
        "  return %q\n"
        "}\n"
    )
    for backend in ["interp", None]:
        with pytest.raises(graphc.GraphcError, match=rf"{div}:3:3: error: .*division by zero"):
            graphc.load(str(div), backend=backend).run({"x": np.array(7, np.int32)})


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"backend": "fastest"}, r"backend='fastest': unknown backend 'fastest'"),
        ({"isa": "avx9"}, r"isa='avx9': expected 'native' or 'sse', got 'avx9'"),
        ({"timeout": 0.0}, r"timeout=0: '0' is not a positive number of seconds"),
        ({"memory_limit": "lots"}, r"memory_limit='lots'"),
        ({"shapes": {"N": 1}}, r"shapes=: only an ONNX model's inputs have symbolic dims; .*mlp.gir is graphc IR"),
        ({"graph": "nope"}, r"nope"),
        ({"devices": "/nonexistent/devices.toml"}, r"/nonexistent/devices.toml"),
    ],
)
def test_bad_load_arguments(kw, message):
    with pytest.raises(graphc.GraphcError, match=message):
        graphc.load(MLP, **kw)


def test_files_that_are_not_models(tmp_path):
    with pytest.raises(graphc.GraphcError, match="no_such.gir"):
        graphc.load(str(tmp_path / "no_such.gir"))
    with pytest.raises(graphc.GraphcError, match=r"it is a directory, not a regular file"):
        graphc.load(str(tmp_path))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00not a model")
    with pytest.raises(graphc.GraphcError, match=r"junk.onnx is not an ONNX model"):
        graphc.load(str(junk))
    with pytest.raises(graphc.GraphcError, match=r"it is a character device, not a regular file"):
        graphc.load("/dev/zero")


def test_graphc_error_is_an_exception():
    assert issubclass(graphc.GraphcError, Exception)
    assert graphc.GraphcError.__module__ == "graphc"
