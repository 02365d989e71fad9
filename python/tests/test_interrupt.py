"""Ctrl-C: a step that never ends raises KeyboardInterrupt soon after SIGINT, and the model runs
again; a training stops after the step in flight, keeping its checkpoint and log."""

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

import graphc
from conftest import SPIRALS, example


def interrupt_after(seconds):
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


@pytest.mark.parametrize("backend", ["interp", None])
def test_ctrl_c_interrupts_a_step_and_the_model_runs_again(backend):
    m = graphc.load(example("loop.gir"), graph="power", backend=backend)
    x = np.full(3, 1.0, np.float32)
    interrupt_after(0.3)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        # 2^31 - 1 iterations: as good as never ending.
        m.run({"x": x, "n": np.array(2**31 - 1, np.int32)})
    assert time.monotonic() - start < 2.0
    out = m.run({"x": np.full(3, 2.0, np.float32), "n": np.array(3, np.int32)})
    assert np.array_equal(out["y"], np.full(3, 8.0, np.float32))


def test_ctrl_c_interrupts_a_sessions_step_and_the_session_goes_on():
    s = graphc.load(example("loop.gir"), graph="accumulate").session()
    x = np.ones(3, np.float32)
    interrupt_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        s.run({"x": x, "n": np.array(2**31 - 1, np.int32)})
    before = s.variables()["total"]
    out = s.run({"x": x, "n": np.array(2, np.int32)})
    assert np.array_equal(out["total"], before + 2)


def test_ctrl_c_stops_training_after_the_step_in_flight_with_its_checkpoint_and_log(tmp_path):
    ckpt, log = str(tmp_path / "c.ckpt"), tmp_path / "log.jsonl"
    mlp = example("mlp_train.gir")
    interrupt_after(0.5)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        graphc.train(mlp, graph="step", steps=10**9, data=SPIRALS, checkpoint=str(ckpt), log=str(log), log_every=1000)
    assert time.monotonic() - start < 3.0
    step = graphc.load(mlp, graph="step").session().restore(ckpt)
    assert 0 < step < 10**9
    lines = [json.loads(l) for l in log.read_text().splitlines()]
    # The last step's line, then where and why it stopped, as graphc train writes them.
    assert lines[-2]["step"] == step
    assert lines[-1] == {"stopped_at": step, "signal": "SIGINT", "checkpoint": ckpt}
    # Restored, it goes on from the next step.
    r = graphc.train(mlp, graph="step", steps=step + 3, data=SPIRALS, restore=ckpt)
    assert (r.first_step, r.last_step) == (step + 1, step + 3)
