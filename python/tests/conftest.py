"""What the tests share: the repository's paths, seeded inputs for a model's inputs, and how
outputs are compared with the reference interpreter's."""

import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "ir-spec", "examples")
SPIRALS = os.path.join(EXAMPLES, "data", "spirals")


def example(name):
    return os.path.join(EXAMPLES, name)


def graph_names(path):
    """The graphs of a .gir file, in order."""
    with open(path) as f:
        return re.findall(r"^graph @([A-Za-z0-9_]+)", f.read(), re.M)


def seeded_feeds(model, seed=0):
    """An array for each input of `model` (all its dims fixed): floats in [-1, 1), integers
    0 or 1, booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.inputs:
        shape = tuple(i.shape)
        if i.dtype == "bool":
            feeds[i.name] = rng.integers(0, 2, shape).astype(bool)
        elif i.dtype.startswith(("int", "uint")):
            feeds[i.name] = rng.integers(0, 2, shape).astype(i.dtype)
        elif i.dtype == "bfloat16":
            import ml_dtypes

            feeds[i.name] = rng.uniform(-1, 1, shape).astype(ml_dtypes.bfloat16)
        else:
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(i.dtype)
    return feeds


def assert_same(expected, got, what=""):
    """Same names, dtypes and shapes; floats within a tolerance (NaN where NaN), the rest
    exactly."""
    assert list(expected) == list(got), what
    for name in expected:
        e, g = expected[name], got[name]
        if e is None or g is None:
            assert e is None and g is None, f"{what} {name}"
            continue
        assert e.dtype == g.dtype and e.shape == g.shape, f"{what} {name}: {g.dtype}{g.shape} vs {e.dtype}{e.shape}"
        if e.dtype.kind == "f" or e.dtype.name == "bfloat16":
            e64, g64 = e.astype(np.float64), g.astype(np.float64)
            assert np.allclose(g64, e64, rtol=1e-3, atol=1e-4, equal_nan=True), f"{what} {name}: {g} vs {e}"
        else:
            assert np.array_equal(e, g), f"{what} {name}: {g} vs {e}"
