"""Sessions: variables kept across steps, saved and restored; Model.run starts from the initial
state at every call."""

import numpy as np
import pytest

import graphc
from conftest import assert_same, example

RNG = np.random.default_rng(5)
X = RNG.normal(size=(8, 4)).astype(np.float32)
T = (X @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)


@pytest.mark.parametrize("backend", ["interp", None])
def test_a_sessions_variables_are_kept_across_steps(backend):
    m = graphc.load(example("train_step.gir"), graph="step", backend=backend)
    s = m.session()
    losses = [float(s.run({"x": X, "t": T})["loss"]) for _ in range(30)]
    assert s.step == 30
    assert losses[-1] < losses[0] / 4, losses
    v = s.variables()
    assert sorted(v) == ["b", "w"] and v["w"].shape == (4, 1) and v["w"].dtype == np.float32
    # Model.run starts from the initial variables every time.
    first = m.run({"x": X, "t": T})["loss"]
    assert first == losses[0] and m.run({"x": X, "t": T})["loss"] == first


def test_the_default_backend_trains_as_the_interpreter_does():
    runs = []
    for backend in ["interp", None]:
        s = graphc.load(example("train_step.gir"), graph="step", backend=backend).session()
        runs.append([s.run({"x": X, "t": T}) for _ in range(10)] + [s.variables()])
    for ref, got in zip(*runs):
        assert_same(ref, got)


def test_save_and_restore_round_trip_the_variables_and_the_step(tmp_path):
    m = graphc.load(example("train_step.gir"), graph="step")
    s = m.session()
    for _ in range(5):
        s.run({"x": X, "t": T})
    ckpt = str(tmp_path / "w.safetensors")
    s.save(ckpt)
    saved = s.variables()
    after = [float(s.run({"x": X, "t": T})["loss"]) for _ in range(3)]

    t = m.session()
    assert t.restore(ckpt) == 5 and t.step == 5
    assert_same(saved, t.variables())
    assert [float(t.run({"x": X, "t": T})["loss"]) for _ in range(3)] == after
    assert t.step == 8


def test_graphs_of_one_module_share_variables_by_name_in_one_session(tmp_path):
    path = example("train_step.gir")
    trained = graphc.load(path, graph="step").session()
    for _ in range(20):
        trained.run({"x": X, "t": T})
    ckpt = str(tmp_path / "trained.safetensors")
    trained.save(ckpt)
    predict = graphc.load(path, graph="predict").session()
    predict.restore(ckpt)
    w, b = trained.variables()["w"], trained.variables()["b"]
    assert np.allclose(predict.run({"x": X})["y"], X @ w + b, atol=1e-5)


def test_restoring_another_models_checkpoint_says_which_variables_differ(tmp_path):
    ckpt = str(tmp_path / "mlp.safetensors")
    s = graphc.load(example("mlp_train.gir"), graph="step").session()
    s.save(ckpt)
    t = graphc.load(example("train_step.gir"), graph="step").session()
    with pytest.raises(graphc.GraphcError, match="w"):
        t.restore(ckpt)


def test_a_session_may_not_save_over_the_model(tmp_path):
    import shutil

    path = str(tmp_path / "train_step.gir")
    shutil.copy(example("train_step.gir"), path)
    s = graphc.load(path, graph="step").session()
    with pytest.raises(graphc.GraphcError, match="train_step.gir"):
        s.save(path)
    with open(path) as f:
        assert f.read().startswith("// Linear regression")
