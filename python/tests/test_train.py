"""graphc.train on the bundled example (ir-spec/examples/mlp_train.gir on the spirals data):
against the interpreter, resumed from its checkpoints, with its log, a callback, and bad
arguments."""

import json

import numpy as np
import pytest

import graphc
from conftest import SPIRALS, assert_same, example

MLP = example("mlp_train.gir")


def train(steps, **kw):
    return graphc.train(MLP, graph="step", steps=steps, data=SPIRALS, **kw)


def test_training_lowers_the_loss_as_the_interpreter_computes_it():
    ref = train(40, backend="interp", seed=3)
    got = train(40, seed=3)
    assert (got.first_step, got.last_step, got.graph) == (1, 40, "step")
    assert got.losses.dtype == np.float64 and got.losses.shape == (40,)
    assert np.allclose(got.losses, ref.losses, rtol=1e-3, atol=1e-5)
    assert_same(ref.variables, got.variables)


def test_the_trained_weights_classify_the_spirals(tmp_path):
    ckpt = str(tmp_path / "spirals.ckpt")
    r = train(800, seed=3, checkpoint=ckpt)
    assert r.losses[-50:].mean() < r.losses[:50].mean() / 10, r
    # The checkpoint's variables score the whole data set in the module's other graph.
    scorer = graphc.load(MLP, graph="accuracy").session()
    scorer.restore(ckpt)
    data = {"x": np.load(f"{SPIRALS}/x.npy"), "label": np.load(f"{SPIRALS}/label.npy")}
    assert scorer.run(data)["accuracy"] > 0.95


def test_a_run_resumed_from_its_checkpoint_takes_up_the_same_batches(tmp_path):
    ckpt = str(tmp_path / "spirals.ckpt")
    whole = train(60, seed=1)
    first = train(25, seed=1, checkpoint=ckpt)
    assert str(first.checkpoint) == ckpt
    rest = train(60, restore=ckpt, checkpoint=ckpt)
    assert (rest.restored_step, rest.first_step, rest.last_step) == (25, 26, 60)
    assert np.array_equal(np.concatenate([first.losses, rest.losses]), whole.losses)
    assert_same(whole.variables, rest.variables)


def test_the_log_has_a_line_every_log_every_steps_and_the_last(tmp_path):
    log = tmp_path / "train.jsonl"
    r = train(23, log=str(log), log_every=5)
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    assert [l["step"] for l in lines] == [5, 10, 15, 20, 23] and r.log_lines == 5
    assert [l["loss"] for l in lines] == pytest.approx([r.losses[i - 1] for i in [5, 10, 15, 20, 23]], rel=1e-6)


def test_periodic_checkpoints_are_written_as_training_goes(tmp_path):
    import time

    ckpt = tmp_path / "every.ckpt"
    seen = []

    def callback(step, loss):
        seen.append(step)
        if step == 9:
            assert not ckpt.exists()
        if step == 15:
            # The checkpoint of step 10 is written in the background: wait for it.
            deadline = time.monotonic() + 10
            while not ckpt.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert ckpt.exists(), "no checkpoint 5 steps after step 10"

    train(30, checkpoint=str(ckpt), checkpoint_every=10, callback=callback)
    assert seen == list(range(1, 31))
    s = graphc.load(MLP, graph="step").session()
    assert s.restore(str(ckpt)) == 30


def test_an_exception_in_the_callback_stops_training_and_keeps_its_checkpoint(tmp_path):
    ckpt = str(tmp_path / "stopped.ckpt")

    def callback(step, loss):
        if step == 7:
            raise ValueError("enough")

    log = tmp_path / "log.jsonl"
    with pytest.raises(ValueError, match="enough"):
        train(1000, checkpoint=ckpt, callback=callback, log=str(log), log_every=5)
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    assert [l.get("step") for l in lines[:-1]] == [5, 7]
    assert lines[-1] == {"stopped_at": 7, "signal": "ValueError", "checkpoint": ckpt}
    s = graphc.load(MLP, graph="step").session()
    assert s.restore(ckpt) == 7
    # Taken up from there, as an uninterrupted run would have gone on.
    whole = train(12)
    rest = train(12, restore=ckpt)
    assert np.array_equal(rest.losses, whole.losses[7:])


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"steps": 0}, r"steps=0: expected a whole number of at least 1"),
        ({"steps": 5, "batch": 0}, r"batch=0: expected a whole number of at least 1"),
        ({"steps": 5, "checkpoint_every": 2}, r"checkpoint_every= saves to checkpoint=, which is not given"),
        ({"steps": 5, "callback": 3}, r"callback= is called with \(step, loss\)"),
        ({"steps": 5, "backend": "fast"}, r"backend='fast': unknown backend 'fast'"),
        ({"steps": 5, "graph": "stepp"}, r"stepp"),
    ],
)
def test_bad_arguments_are_refused_before_training(kw, message):
    with pytest.raises(graphc.GraphcError, match=message):
        graphc.train(MLP, data=SPIRALS, **{"graph": "step", **kw})


def test_a_checkpoint_past_the_steps_asked_for_is_refused(tmp_path):
    ckpt = str(tmp_path / "c.ckpt")
    train(10, checkpoint=ckpt)
    with pytest.raises(graphc.GraphcError, match=r"the checkpoint is at step 10, past steps=5"):
        train(5, restore=ckpt)


def test_training_may_not_write_its_checkpoint_over_its_data(tmp_path):
    with pytest.raises(graphc.GraphcError, match="x.npy"):
        train(5, checkpoint=f"{SPIRALS}/x.npy")
