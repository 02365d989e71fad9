//! graphc's errors as Python exceptions: `graphc.GraphcError`, whose message is what the CLI
//! prints for the same error (diagnostics rendered against the source, with their place).

use graphc::driver::Reported;
use graphc_ir::{Diagnostic, SourceFile};
use graphc_runtime::RunError;
use pyo3::PyErr;

pyo3::create_exception!(
    graphc,
    GraphcError,
    pyo3::exceptions::PyException,
    "An error graphc reports: a model that does not parse, verify or import, a bad input, a failed step, an unwritable file. Its message is what the graphc command prints for the same error."
);

/// An error in words.
pub fn error(message: impl Into<String>) -> PyErr {
    GraphcError::new_err(message.into())
}

/// A driver error: an already [`Reported`] one as rendered, others with their causes.
pub fn driver(e: anyhow::Error) -> PyErr {
    match e.downcast_ref::<Reported>() {
        Some(r) => error(r.0.trim_end()),
        None => error(format!("{e:#}")),
    }
}

/// A step's error, rendered at its node's place in the source when it has one.
pub fn step(e: &RunError, file: &SourceFile) -> PyErr {
    match e.span {
        Some(span) => error(Diagnostic::error(span, e.to_string()).render(file).trim_end()),
        None => error(e.to_string()),
    }
}

/// `anyhow`'s result as Python's.
pub trait OrRaise<T> {
    fn or_raise(self) -> pyo3::PyResult<T>;
}

impl<T> OrRaise<T> for anyhow::Result<T> {
    fn or_raise(self) -> pyo3::PyResult<T> {
        self.map_err(driver)
    }
}
