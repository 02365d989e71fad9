//! graphc from Python (`import graphc`): the driver's way from a file to running kernels
//! (load -> optimize -> place -> session), as `graphc run` takes it, with numpy arrays in and
//! out; training as `graphc train` and ahead-of-time compilation as `graphc compile`.
//!
//! - `model.rs`: `load`, `Model` (a module compiled once per fed shape, kept in a small cache)
//!   and `Session` (variables kept across steps, saved and restored).
//! - `arrays.rs`: numpy arrays to tensors (one copy from a C-contiguous buffer) and tensors to
//!   numpy arrays (handed over without a copy where the tensor is the output's only owner).
//! - `interrupt.rs`: steps off the Python thread with the GIL released, and Ctrl-C.
//! - `train.rs`, `aot.rs`: `train` and `compile`.
//! - `errors.rs`: graphc's errors as `graphc.GraphcError`, rendered as the CLI prints them.

mod aot;
mod arrays;
mod errors;
mod interrupt;
mod model;
mod options;
mod train;

use pyo3::prelude::*;

#[pymodule]
fn _graphc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GraphcError", m.py().get_type::<errors::GraphcError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<model::Model>()?;
    m.add_class::<model::Session>()?;
    m.add_class::<model::TensorInfo>()?;
    m.add_class::<train::TrainResult>()?;
    m.add_function(wrap_pyfunction!(model::load, m)?)?;
    m.add_function(wrap_pyfunction!(train::train, m)?)?;
    m.add_function(wrap_pyfunction!(aot::compile, m)?)?;
    m.add_function(wrap_pyfunction!(options::backends, m)?)?;
    Ok(())
}
