"""graphc from Python: load a .gir or ONNX model, run it on numpy arrays through graphc's
compiled kernels, train it, and compile it ahead of time.

    import graphc, numpy as np
    m = graphc.load("model.onnx", shapes={"N": 4})
    out = m.run({"x": np.ones((4, 1, 28, 28), np.float32)})

Errors graphc reports are raised as graphc.GraphcError; Ctrl-C interrupts a step, a training
(after the step in flight, keeping its checkpoint) or a wait.
"""

from ._graphc import (
    GraphcError,
    Model,
    Session,
    TensorInfo,
    TrainResult,
    __version__,
    backends,
    compile,
    load,
    train,
)

__all__ = [
    "GraphcError",
    "Model",
    "Session",
    "TensorInfo",
    "TrainResult",
    "__version__",
    "backends",
    "compile",
    "load",
    "train",
]
