//! The hook through which a backend's compiled code runs inside sessions: the interpreter asks
//! for each node whether compiled code exists, and runs the reference kernels otherwise. Types
//! are checked the same way for both, so the interpreter stays the oracle around compiled code.

use crate::Tensor;
use graphc_ir::Node;
use std::fmt::Debug;

/// Compiled code for some nodes of a module.
pub trait CompiledKernels: Send + Sync + Debug {
    /// Runs node `node` of graph `graph` on its operands, or `None` when the backend did not
    /// compile that node. An error is a run-time failure of the node (reported like a kernel
    /// error of the interpreter).
    fn run(&self, graph: &str, node: Node, inputs: &[&Tensor]) -> Option<Result<Vec<Tensor>, String>>;
}
