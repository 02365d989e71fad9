"""Type stubs of graphc's extension module (graphc._graphc)."""

from os import PathLike
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

_Path = Union[str, PathLike[str]]
_Dim = Union[int, str, None]

__version__: str

class GraphcError(Exception):
    """An error graphc reports; its message is what the graphc command prints for it."""

class TensorInfo:
    """An input or output: its name, numpy dtype name and shape (dims are sizes, symbolic
    names or None; the shape is None when the model does not give one)."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> Optional[tuple[_Dim, ...]]: ...

class Model:
    """A model loaded and compiled (per input shapes, for a symbolic batch)."""

    @property
    def inputs(self) -> list[TensorInfo]: ...
    @property
    def outputs(self) -> list[TensorInfo]: ...
    @property
    def path(self) -> Path: ...
    @property
    def backend(self) -> str: ...
    @property
    def compiled_shapes(self) -> list[dict[str, tuple[int, ...]]]: ...
    def run(
        self, feeds: Optional[Mapping[str, npt.NDArray[np.generic]]] = None, *, fetch: Optional[Sequence[str]] = None
    ) -> dict[str, Optional[npt.NDArray[np.generic]]]:
        """One step from the module's initial state; the outputs (or `fetch`) by name."""
    def session(self) -> Session:
        """A session whose variables are kept from step to step."""

class Session:
    """A model's session: variables kept across steps, saved and restored."""

    @property
    def step(self) -> int: ...
    def run(
        self, feeds: Optional[Mapping[str, npt.NDArray[np.generic]]] = None, *, fetch: Optional[Sequence[str]] = None
    ) -> dict[str, Optional[npt.NDArray[np.generic]]]: ...
    def variables(self) -> dict[str, Optional[npt.NDArray[np.generic]]]: ...
    def save(self, path: _Path, *, step: Optional[int] = None) -> None: ...
    def restore(self, path: _Path) -> Optional[int]: ...

class TrainResult:
    """What graphc.train did."""

    graph: str
    first_step: int
    last_step: int
    losses: npt.NDArray[np.float64]
    seconds: float
    steps_per_second: float
    checkpoint: Optional[Path]
    log: Optional[Path]
    log_lines: int
    restored_step: Optional[int]
    variables: dict[str, Optional[npt.NDArray[np.generic]]]
    backend: str

def load(
    path: _Path,
    *,
    graph: Union[str, Sequence[str], None] = None,
    backend: Optional[str] = None,
    devices: Optional[_Path] = None,
    profile: Optional[_Path] = None,
    shapes: Optional[Mapping[str, int]] = None,
    timeout: Optional[float] = None,
    memory_limit: Union[int, str, None] = None,
    isa: str = "native",
) -> Model: ...
def train(
    path: _Path,
    *,
    steps: int,
    graph: Optional[str] = None,
    data: Optional[_Path] = None,
    batch: Optional[int] = None,
    seed: Optional[int] = None,
    log: Optional[_Path] = None,
    log_every: Optional[int] = None,
    checkpoint: Optional[_Path] = None,
    checkpoint_every: Optional[int] = None,
    restore: Optional[_Path] = None,
    callback: Optional[Callable[[int, float], object]] = None,
    backend: Optional[str] = None,
    devices: Optional[_Path] = None,
    profile: Optional[_Path] = None,
    timeout: Optional[float] = None,
    memory_limit: Union[int, str, None] = None,
    isa: str = "native",
) -> TrainResult: ...
def compile(
    path: _Path,
    output: _Path,
    *,
    emit: str = "exe",
    graph: Optional[str] = None,
    target: Optional[str] = None,
    cpu: str = "baseline",
    weights_file: Optional[_Path] = None,
    restore: Optional[_Path] = None,
    inputs: Optional[Mapping[str, _Path]] = None,
    shapes: Optional[Mapping[str, int]] = None,
) -> list[Path]: ...
def backends() -> list[tuple[str, str]]: ...
