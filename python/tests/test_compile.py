"""graphc.compile: an executable from a module and a training checkpoint, run as graphc run
is, against a session of the same module and checkpoint on the interpreter."""

import subprocess

import numpy as np
import pytest

import graphc
from conftest import example


def test_an_executable_ships_the_trained_weights(tmp_path):
    path = example("train_step.gir")
    rng = np.random.default_rng(11)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    t = (x @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)).astype(np.float32)
    trainer = graphc.load(path, graph="step").session()
    for _ in range(20):
        trainer.run({"x": x, "t": t})
    ckpt = str(tmp_path / "trained.safetensors")
    trainer.save(ckpt)

    exe = tmp_path / "predict"
    written = graphc.compile(path, str(exe), graph="predict", restore=ckpt)
    assert [str(p) for p in written] == [str(exe)]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    subprocess.run([str(exe), "--input", f"x={tmp_path / 'x.npy'}", "--out-dir", str(out)], check=True, capture_output=True)
    got = np.load(out / "y.npy")

    reference = graphc.load(path, graph="predict", backend="interp").session()
    reference.restore(ckpt)
    assert np.allclose(got, reference.run({"x": x})["y"], rtol=1e-5, atol=1e-6)
    w, b = trainer.variables()["w"], trainer.variables()["b"]
    assert np.allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)


def test_an_object_and_its_header(tmp_path):
    written = graphc.compile(example("mlp.gir"), str(tmp_path / "mlp"), emit="obj")
    assert [p.name for p in written] == ["mlp.o", "mlp.h"]
    assert "mlp" in (tmp_path / "mlp.h").read_text()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"emit": "wasm"}, r"emit='wasm': expected 'exe', 'obj' or 'staticlib'"),
        ({"emit": "ptx"}, r"graphc compile --target nvptx64-nvidia-cuda --emit ptx"),
        ({"cpu": "fast"}, r"cpu='fast': expected 'baseline' or 'native'"),
        ({"graph": "nope"}, r"no graph @nope"),
        ({"shapes": {"N": 2}}, r"only an ONNX model's inputs have symbolic dims"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kw, message):
    with pytest.raises(graphc.GraphcError, match=message):
        graphc.compile(example("mlp.gir"), str(tmp_path / "out"), **kw)
    assert not (tmp_path / "out").exists()


def test_compile_may_not_write_over_the_model(tmp_path):
    import shutil

    model = tmp_path / "mlp.gir"
    shutil.copy(example("mlp.gir"), model)
    with pytest.raises(graphc.GraphcError, match="mlp.gir"):
        graphc.compile(str(model), str(model))
    assert model.read_text().startswith("//")
