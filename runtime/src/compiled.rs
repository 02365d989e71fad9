//! The hook through which a backend's compiled code runs inside sessions: the interpreter asks
//! for each node whether compiled code exists, and runs the reference kernels otherwise. Types
//! are checked the same way for both, so the interpreter stays the oracle around compiled code.
//!
//! [`KernelTable`] is compiled code as one [`Kernel`] per node, each replaceable while sessions
//! run: a tiered compiler starts a session on quick kernels (or none: the interpreter) and
//! swaps in better ones as it finishes them.

use crate::device::DeviceKernel;
use crate::pool::BufferPool;
use crate::tensor::Tensor;
use cranelift_entity::EntityRef;
use graphc_ir::Node;
use std::fmt::Debug;
use std::sync::{Arc, RwLock};

/// Compiled code for some nodes of a module.
pub trait CompiledKernels: Send + Sync + Debug {
    /// Runs node `node` of graph `graph` on its operands, or `None` when the backend did not
    /// compile that node (then it has taken nothing from `operands`). An error is a run-time
    /// failure of the node (reported like a kernel error of the interpreter).
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>>;

    /// Node `node`'s kernel on tensors in a device's memory, for an executor that keeps them
    /// there ([`crate::InterpExecutor::on_device`]); `None` when it has none. Required, so
    /// that code wrapping another's kernels forwards it rather than silently dropping it.
    fn device_kernel(&self, graph: &str, node: Node) -> Option<Arc<dyn DeviceKernel>>;

    /// The name of the tier whose kernel runs node `node` of `graph` now (`cranelift`,
    /// `llvm`, `gpu`: what profiles report), or `None` when it has none or its tier has no
    /// name. Code wrapping another's kernels forwards it.
    fn tier(&self, graph: &str, node: Node) -> Option<&'static str> {
        let _ = (graph, node);
        None
    }
}

/// One node's compiled code.
pub trait Kernel: Send + Sync + Debug {
    /// Runs the node on its operands (see [`CompiledKernels::run`]). An error is a run-time
    /// failure of the node.
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String>;

    /// The same kernel on tensors in its device's memory, when it runs on a device and can
    /// take its operands there as they are.
    fn on_device(self: Arc<Self>) -> Option<Arc<dyn DeviceKernel>> {
        None
    }
}

/// Kernels by graph name and node, each of which can be set, replaced or removed while
/// sessions run them. A node without a kernel runs on the reference kernels. Each kernel
/// keeps the name of the tier that put it in ([`KernelTable::name_tier`]), for profiles.
///
/// A lookup (one per node execution) takes a read lock, finds the graph among the few of its
/// module by name and the node by index, and clones its `Arc`, with nothing hashed; the kernel
/// runs after the lock is released, so a replacement never waits for a kernel to finish. An
/// execution that has looked its kernel up finishes with that kernel; every lookup after
/// [`KernelTable::replace`] returns finds the new one.
#[derive(Debug, Default)]
pub struct KernelTable {
    /// By graph name (a module has a few graphs: a list is faster to search than a hash).
    graphs: RwLock<Vec<(String, Slots)>>,
    /// The tier name the kernels put in now get.
    tier: RwLock<Option<&'static str>>,
}

/// One graph's kernels, by node index, each with the name of its tier.
type Slots = Vec<Option<(Arc<dyn Kernel>, Option<&'static str>)>>;

impl KernelTable {
    pub fn new() -> Self {
        KernelTable::default()
    }

    /// Sets node `node` of graph `graph` to run `kernel` (of the tier named last by
    /// [`KernelTable::name_tier`]); returns the kernel it replaces.
    pub fn replace(&self, graph: &str, node: Node, kernel: Arc<dyn Kernel>) -> Option<Arc<dyn Kernel>> {
        let slot = (kernel, *self.tier.read().unwrap_or_else(|e| e.into_inner()));
        let mut graphs = self.graphs.write().unwrap_or_else(|e| e.into_inner());
        let i = match graphs.iter().position(|(name, _)| name == graph) {
            Some(i) => i,
            None => {
                graphs.push((graph.to_string(), Vec::new()));
                graphs.len() - 1
            }
        };
        let nodes = &mut graphs[i].1;
        if nodes.len() <= node.index() {
            nodes.resize_with(node.index() + 1, || None);
        }
        nodes[node.index()].replace(slot).map(|(k, _)| k)
    }

    /// Names the tier of the kernels in the table that have no tier name yet, and of every
    /// kernel put in from now on: a backend names its first tier once that has filled the
    /// table, and a later tier before it replaces kernels.
    pub fn name_tier(&self, tier: &'static str) {
        let mut graphs = self.graphs.write().unwrap_or_else(|e| e.into_inner());
        *self.tier.write().unwrap_or_else(|e| e.into_inner()) = Some(tier);
        for (_, name) in graphs.iter_mut().flat_map(|(_, nodes)| nodes.iter_mut().flatten()) {
            name.get_or_insert(tier);
        }
    }

    /// Sends the node back to the reference kernels; returns the kernel it had.
    pub fn remove(&self, graph: &str, node: Node) -> Option<Arc<dyn Kernel>> {
        let mut graphs = self.graphs.write().unwrap_or_else(|e| e.into_inner());
        let i = graphs.iter().position(|(name, _)| name == graph)?;
        let old = graphs[i].1.get_mut(node.index())?.take();
        if graphs[i].1.iter().all(Option::is_none) {
            graphs.remove(i);
        }
        old.map(|(k, _)| k)
    }

    /// The node's kernel now.
    pub fn get(&self, graph: &str, node: Node) -> Option<Arc<dyn Kernel>> {
        self.with_slot(graph, node, |(k, _)| k.clone())
    }

    /// `f` of the node's slot, under the read lock.
    fn with_slot<T>(
        &self,
        graph: &str,
        node: Node,
        f: impl FnOnce(&(Arc<dyn Kernel>, Option<&'static str>)) -> T,
    ) -> Option<T> {
        let graphs = self.graphs.read().unwrap_or_else(|e| e.into_inner());
        let (_, nodes) = graphs.iter().find(|(name, _)| name == graph)?;
        nodes.get(node.index())?.as_ref().map(f)
    }

    /// How many nodes have kernels.
    pub fn len(&self) -> usize {
        let graphs = self.graphs.read().unwrap_or_else(|e| e.into_inner());
        graphs.iter().map(|(_, nodes)| nodes.iter().flatten().count()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CompiledKernels for KernelTable {
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        let kernel = self.get(graph, node)?;
        Some(kernel.run(operands))
    }

    fn device_kernel(&self, graph: &str, node: Node) -> Option<Arc<dyn DeviceKernel>> {
        self.get(graph, node)?.on_device()
    }

    fn tier(&self, graph: &str, node: Node) -> Option<&'static str> {
        self.with_slot(graph, node, |(_, tier)| *tier)?
    }
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

    /// A buffer of `len` f32 elements from the session's pool, holding whatever its last
    /// user left in it ([`BufferPool::take_f32_filled`]): for a kernel that writes every
    /// element before it reads any.
    pub fn alloc_f32_filled(&self, len: usize) -> Result<Vec<f32>, String> {
        self.pool.take_f32_filled(len)
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
