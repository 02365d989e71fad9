//! The error of a reference kernel, apart from the dispatch in `mod.rs` so that the kernels
//! depend on it and not on their parent.

/// A kernel failed at run time (an integer division by zero, an index out of range, ...).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KernelError(pub String);

impl KernelError {
    pub fn new(message: impl Into<String>) -> Self {
        KernelError(message.into())
    }
}
