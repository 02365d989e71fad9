//! The hook through which a backend's compiled code runs inside sessions: the interpreter asks
//! for each node whether compiled code exists, and runs the reference kernels otherwise. Types
//! are checked the same way for both, so the interpreter stays the oracle around compiled code.

use crate::pool::BufferPool;
use crate::Tensor;
use graphc_ir::Node;
use std::fmt::Debug;
use std::sync::Arc;

/// Compiled code for some nodes of a module.
pub trait CompiledKernels: Send + Sync + Debug {
    /// Runs node `node` of graph `graph` on its operands, or `None` when the backend did not
    /// compile that node (then it has taken nothing from `operands`). An error is a run-time
    /// failure of the node (reported like a kernel error of the interpreter).
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>>;
}

/// A node's operands as a compiled kernel sees them, and where its outputs' buffers come from.
///
/// An operand whose last use this is, and that nobody else holds (not fed, fetched, sent or
/// stored in a variable), can be taken: the kernel may then write a result over it. Whatever
/// is left goes back to the session's pool when the operands are dropped.
#[derive(Debug)]
pub struct Operands<'a> {
    tensors: Vec<Arc<Tensor>>,
    pool: &'a BufferPool,
}

impl<'a> Operands<'a> {
    pub fn new(tensors: Vec<Arc<Tensor>>, pool: &'a BufferPool) -> Self {
        Operands { tensors, pool }
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Operand `i` (empty after [`Operands::take_f32`] took it).
    pub fn get(&self, i: usize) -> Option<&Tensor> {
        self.tensors.get(i).map(|t| &**t)
    }

    /// Every operand, in order.
    pub fn all(&self) -> Vec<&Tensor> {
        self.tensors.iter().map(|t| &**t).collect()
    }

    /// Operand `i`'s buffer, when it is an f32 tensor that owns exactly its elements in
    /// row-major order and nobody else holds it. The operand is left empty.
    pub fn take_f32(&mut self, i: usize) -> Option<Vec<f32>> {
        let t = self.tensors.get_mut(i)?;
        let Some(Tensor::F32(a)) = Arc::get_mut(t) else { return None };
        if !a.is_standard_layout() {
            return None;
        }
        let len = a.len();
        let shape = a.raw_dim();
        let empty = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[0]), Vec::new()).ok()?;
        let (v, offset) = std::mem::replace(a, empty).into_raw_vec_and_offset();
        let start = offset.unwrap_or(0);
        if v.len() == len && start == 0 {
            return Some(v);
        }
        // A view into a larger buffer (an owned slice): put the operand back as it was.
        *a = ndarray::ArrayD::from_shape_vec(shape, v.get(start..start + len)?.to_vec()).ok()?;
        None
    }

    /// A buffer with room for `len` f32 elements and length 0, from the session's pool; an
    /// error naming the bytes when the allocation fails.
    pub fn alloc_f32(&self, len: usize) -> Result<Vec<f32>, String> {
        self.pool.take_f32(len)
    }

    /// Gives a buffer the kernel no longer needs (a temporary) back to the pool.
    pub fn recycle_f32(&self, v: Vec<f32>) {
        self.pool.give_vec(v);
    }

    /// The operands back, for a kernel that did not run.
    pub(crate) fn into_shared(mut self) -> Vec<Arc<Tensor>> {
        std::mem::take(&mut self.tensors)
    }
}

impl Drop for Operands<'_> {
    fn drop(&mut self) {
        for t in self.tensors.drain(..) {
            self.pool.give(t);
        }
    }
}
