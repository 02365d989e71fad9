"""README.md's Python example runs as it is written, from a directory laid out as the
repository root (its files written there)."""

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_the_readmes_python_example_runs(tmp_path):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "one python block under '## Use it from Python'"
    os.symlink(os.path.join(ROOT, "ir-spec"), tmp_path / "ir-spec")
    script = blocks[0] + "\nassert s.run(data)['accuracy'] >= 0.99\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TrainResult" in done.stdout
    for written in ["spirals.ckpt", "loss.jsonl", "accuracy"]:
        assert (tmp_path / written).exists(), written
    acc = subprocess.run(
        [str(tmp_path / "accuracy"), "--input", "x=ir-spec/examples/data/spirals/x.npy", "--input", "label=ir-spec/examples/data/spirals/label.npy"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )
    # The executable ships the trained weights: `accuracy: f32[] [0.99...]`.
    score = re.search(r"^accuracy: f32\[\] \[([0-9.]+)\]", acc.stdout, re.M)
    assert score and float(score.group(1)) >= 0.99, acc.stdout
