//! The CPU backend: elementwise kernels (a `fusion` of kind "loop", or a lone elementwise op)
//! JIT-compiled with Cranelift, run in place of the reference kernels inside sessions. Other
//! nodes stay with the interpreter. Outer loops split across threads above a size threshold.

mod codegen;
mod math;
mod plan;

pub use plan::{plan, LoopPlan};

use graphc_ir::{Module, Node};
use graphc_runtime::{CompiledKernels, Tensor};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Below this many output elements a kernel runs on the calling thread.
const PARALLEL_ELEMENTS: usize = 1 << 15;

/// A compiled module: kernels for the nodes the backend took, by graph and node.
#[derive(Debug)]
pub struct CpuKernels {
    kernels: HashMap<(String, Node), Kernel>,
    /// Owns the generated code.
    _code: entry::Code,
    /// How long compilation took.
    pub compile_time: Duration,
}

#[derive(Debug)]
struct Kernel {
    plan: LoopPlan,
    entry: entry::Entry,
}

impl CpuKernels {
    /// Compiles every node of the module the backend handles (the whole module's graphs,
    /// nested regions included).
    pub fn compile(m: &Module) -> Result<Arc<CpuKernels>, String> {
        let start = Instant::now();
        let mut jit = codegen::Jit::new()?;
        let mut planned = Vec::new();
        for g in &m.graphs {
            for n in g.walk() {
                // Nodes inside a fusion run as part of it.
                let inside_fusion =
                    g.regions[g.nodes[n].parent].parent.is_some_and(|p| g.nodes[p].op == graphc_ir::Op::Fusion);
                if inside_fusion {
                    continue;
                }
                if let Some(p) = plan::plan(g, n) {
                    let id = jit.define(&p)?;
                    planned.push(((g.name.clone(), n), p, id));
                }
            }
        }
        let ids: Vec<_> = planned.iter().map(|(_, _, id)| *id).collect();
        let (module, ptrs) = jit.finish(&ids)?;
        let kernels = planned
            .into_iter()
            .zip(ptrs)
            .map(|((key, plan, _), p)| (key, Kernel { plan, entry: entry::Entry::new(p) }))
            .collect();
        Ok(Arc::new(CpuKernels { kernels, _code: entry::Code::new(module), compile_time: start.elapsed() }))
    }

    /// How many nodes run compiled code.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

impl CompiledKernels for CpuKernels {
    fn run(&self, graph: &str, node: Node, inputs: &[&Tensor]) -> Option<Result<Vec<Tensor>, String>> {
        let k = self.kernels.get(&(graph.to_string(), node))?;
        Some(k.run(inputs))
    }
}

impl Kernel {
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        // Inputs as contiguous f32 buffers, expanded where the plan says.
        let mut owned: Vec<std::borrow::Cow<'_, [f32]>> = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let Tensor::F32(a) = t else {
                return Err(format!("compiled kernel input {i} is {}, not f32", t.dtype()));
            };
            if p.inputs[i].materialize {
                let shape: Vec<usize> = p.out.shape.iter().map(|&d| d as usize).collect();
                let b = a.broadcast(shape).ok_or_else(|| format!("input {i} does not broadcast to {}", p.out))?;
                owned.push(std::borrow::Cow::Owned(b.iter().copied().collect()));
            } else if let Some(s) = a.as_slice() {
                owned.push(std::borrow::Cow::Borrowed(s));
            } else {
                owned.push(std::borrow::Cow::Owned(a.iter().copied().collect()));
            }
        }
        let n = p.rows * p.cols;
        let mut outs: Vec<Vec<f32>> = p.results.iter().map(|_| Vec::with_capacity(n)).collect();
        {
            let ins: Vec<&[f32]> = owned.iter().map(|c| c.as_ref()).collect();
            let ptrs = entry::Buffers::new(&ins, &mut outs);
            if n >= PARALLEL_ELEMENTS && p.rows > 1 {
                let threads = rayon::current_num_threads().max(1);
                let chunk = p.rows.div_ceil(threads * 4).max(1);
                rayon::scope(|s| {
                    for r0 in (0..p.rows).step_by(chunk) {
                        let ptrs = &ptrs;
                        s.spawn(move |_| self.entry.call(ptrs, r0, (r0 + chunk).min(p.rows)));
                    }
                });
            } else {
                self.entry.call(&ptrs, 0, p.rows);
            }
        }
        // Every row has run, so every element of every output is written.
        entry::filled(&mut outs, n);
        let shape: Vec<usize> = p.out.shape.iter().map(|&d| d as usize).collect();
        outs.into_iter()
            .map(|v| ndarray::ArrayD::from_shape_vec(shape.clone(), v).map(Tensor::F32).map_err(|e| e.to_string()))
            .collect()
    }
}

/// The only unsafe code of the backend: keeping the JIT's code alive and calling into it.
#[allow(unsafe_code)]
mod entry {
    use cranelift_jit::JITModule;

    type KernelFn = unsafe extern "C" fn(*const *const f32, *const *mut f32, i64, i64);

    /// The JIT module, which owns the code's memory. It is never touched after linking, so
    /// sharing it between threads is sound.
    pub struct Code(#[allow(dead_code)] JITModule);

    impl Code {
        pub fn new(m: JITModule) -> Self {
            Code(m)
        }
    }

    impl std::fmt::Debug for Code {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Code")
        }
    }

    // SAFETY: see `Code`: the module is only kept for its memory, never used again.
    unsafe impl Send for Code {}
    unsafe impl Sync for Code {}

    /// A kernel's entry point.
    #[derive(Debug)]
    pub struct Entry(KernelFn);

    impl Entry {
        pub fn new(p: *const u8) -> Self {
            // SAFETY: `p` is a function Cranelift generated with exactly this signature
            // (codegen.rs: two pointers, two i64, no result, the platform's C convention).
            Entry(unsafe { std::mem::transmute::<*const u8, KernelFn>(p) })
        }

        /// Runs rows `[r0, r1)`.
        pub fn call(&self, b: &Buffers, r0: usize, r1: usize) {
            // SAFETY: the buffers hold the plan's inputs (each as long as its type, which the
            // session checked and the plan's strides stay within) and outputs with capacity
            // for rows*cols elements; rows in [r0, r1) are within them and disjoint between
            // concurrent calls, so no two calls write one element.
            unsafe { (self.0)(b.ins.as_ptr(), b.outs.as_ptr(), r0 as i64, r1 as i64) }
        }
    }

    /// Marks outputs allocated with capacity `n` as holding `n` elements, once a kernel has
    /// written all rows (the caller's promise).
    pub fn filled(outs: &mut [Vec<f32>], n: usize) {
        for v in outs {
            assert!(v.capacity() >= n);
            // SAFETY: the kernel wrote rows*cols = n elements through the pointer taken in
            // `Buffers::new` (never through a reference, so nothing uninitialized was read).
            unsafe { v.set_len(n) };
        }
    }

    /// The pointer arrays a kernel takes.
    pub struct Buffers {
        ins: Vec<*const f32>,
        outs: Vec<*mut f32>,
    }

    impl Buffers {
        /// Pointers to the inputs, and to the (allocated, still empty) output buffers.
        pub fn new(ins: &[&[f32]], outs: &mut [Vec<f32>]) -> Self {
            Buffers {
                ins: ins.iter().map(|s| s.as_ptr()).collect(),
                outs: outs.iter_mut().map(|s| s.as_mut_ptr()).collect(),
            }
        }
    }

    // SAFETY: the pointers are only dereferenced by kernels on disjoint output rows while the
    // borrowed slices live (the calls happen inside a scope that borrows them).
    unsafe impl Send for Buffers {}
    unsafe impl Sync for Buffers {}
}
