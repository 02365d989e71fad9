"""What the ONNX test scripts (conformance.py, models.py) share: their venv with the onnx
wheel, the graphc build, output file names, and how outputs are compared."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(HERE, ".venv")
VENV_PY = os.path.join(VENV, "bin", "python")
RTOL, ATOL = 1e-3, 1e-4


def ensure_venv(script):
    """Re-runs `script` inside the venv (onnx==1.22.0, the last release whose wheel ships the
    backend tests as files), creating the venv first if needed."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(VENV_PY):
        print("setting up", VENV, "(onnx==1.22.0)", flush=True)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
        subprocess.check_call([VENV_PY, "-m", "pip", "install", "-q", "onnx==1.22.0"])
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(script)] + sys.argv[1:])


def build_graphc(release=False):
    """$GRAPHC, or graphc built by cargo (debug unless `release`; with the features
    $GRAPHC_FEATURES names, such as llvm)."""
    graphc = os.environ.get("GRAPHC")
    if graphc:
        return graphc
    profile = ["--release"] if release else []
    features = os.environ.get("GRAPHC_FEATURES")
    profile += ["--features", features] if features else []
    subprocess.check_call(["cargo", "build", "-q", "-p", "graphc"] + profile, cwd=ROOT)
    return os.path.join(ROOT, "target", "release" if release else "debug", "graphc")


def sanitize(name):
    """The file name `graphc run --out-dir` gives an output."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def compare(expected, got):
    """None when `got` matches `expected` (floats within RTOL/ATOL, NaN where NaN; other
    dtypes exactly), else what differs."""
    import numpy as np

    if expected.shape != got.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype.name == "bfloat16":
        # numpy has no bfloat16: graphc writes it, as numpy saves ml_dtypes' arrays, as raw
        # 2-byte elements (V2); compared as the floats they hold.
        if got.dtype != np.dtype("V2"):
            return f"dtype {got.dtype}, expected bfloat16 (as V2)"
        expected, got = expected.astype(np.float32), got.view(expected.dtype).astype(np.float32)
    if expected.dtype.kind == "f":
        if got.dtype.kind != "f":
            return f"dtype {got.dtype}, expected {expected.dtype}"
        e, g = expected.astype(np.float64), got.astype(np.float64)
        if not np.allclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True):
            bad = np.argmax(~np.isclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True))
            return f"values differ (first at flat index {bad}: {g.flat[bad]} vs {e.flat[bad]})"
        return None
    if expected.dtype != got.dtype and not (expected.dtype.kind == got.dtype.kind == "b"):
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if not np.array_equal(expected, got):
        return "values differ"
    return None
