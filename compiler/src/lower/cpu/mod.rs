//! The CPU backend: elementwise kernels (a `fusion` of kind "loop", or a lone elementwise op)
//! JIT-compiled with Cranelift, and matrix products (a lone matmul, or an "output" fusion of a
//! matmul and its elementwise epilogue) by the gemm crate's packed microkernels (which split
//! the product across the threads and pack the right-hand matrix once), then the JIT-compiled
//! epilogue by blocks of rows. They run in place of the reference kernels inside sessions; other nodes stay with
//! the interpreter. Work splits across threads by rows above a size threshold.

mod codegen;
mod math;
mod plan;

pub use plan::{matmul_plan, plan, LoopPlan, MatMulPlan, Step};

use graphc_ir::{Module, Node};
use graphc_runtime::{CompiledKernels, Operands, Tensor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Below this many output elements a kernel runs on the calling thread.
const PARALLEL_ELEMENTS: usize = 1 << 15;

/// A compiled module: kernels for the nodes the backend took, by graph and node.
#[derive(Debug)]
pub struct CpuKernels {
    /// By graph name, then node: looked up for every node the interpreter runs, so without
    /// building a key.
    kernels: HashMap<String, HashMap<Node, Kernel>>,
    /// Owns the generated code.
    _code: entry::Code,
    /// How long compilation took.
    pub compile_time: Duration,
}

#[derive(Debug)]
enum Kernel {
    Loop { plan: LoopPlan, entry: entry::Entry },
    MatMul { plan: MatMulPlan, epilogue: Option<entry::Entry> },
}

/// Below this many multiply-adds a matrix product runs on the calling thread.
const PARALLEL_FLOPS: usize = 1 << 20;

impl CpuKernels {
    /// Compiles every node of the module the backend handles (the whole module's graphs,
    /// nested regions included).
    pub fn compile(m: &Module) -> Result<Arc<CpuKernels>, String> {
        let start = Instant::now();
        let mut jit = codegen::Jit::new()?;
        enum Planned {
            Loop(LoopPlan),
            MatMul(MatMulPlan),
        }
        let mut planned: Vec<((String, Node), Planned, Option<cranelift_module::FuncId>)> = Vec::new();
        for g in &m.graphs {
            for n in g.walk() {
                // Nodes inside a fusion run as part of it.
                let inside_fusion =
                    g.regions[g.nodes[n].parent].parent.is_some_and(|p| g.nodes[p].op == graphc_ir::Op::Fusion);
                if inside_fusion {
                    continue;
                }
                if let Some(mp) = plan::matmul_plan(g, n) {
                    let id = match &mp.epilogue {
                        Some((lp, _)) => Some(jit.define(lp)?),
                        None => None,
                    };
                    planned.push(((g.name.clone(), n), Planned::MatMul(mp), id));
                } else if let Some(p) = plan::plan(g, n) {
                    let id = jit.define(&p)?;
                    planned.push(((g.name.clone(), n), Planned::Loop(p), Some(id)));
                }
            }
        }
        let ids: Vec<_> = planned.iter().filter_map(|(_, _, id)| *id).collect();
        let (module, ptrs) = jit.finish(&ids)?;
        let mut ptrs = ptrs.into_iter();
        let mut kernels: HashMap<String, HashMap<Node, Kernel>> = HashMap::new();
        for (key, planned, id) in planned {
            let scratch = match &planned {
                Planned::Loop(p) => p.cached.len() * p.cols,
                Planned::MatMul(mp) => mp.epilogue.as_ref().map_or(0, |(p, _)| p.cached.len() * p.cols),
            };
            let entry = id.and_then(|_| ptrs.next()).map(|p| entry::Entry::new(p, scratch));
            let k = match (planned, entry) {
                (Planned::Loop(plan), Some(entry)) => Kernel::Loop { plan, entry },
                (Planned::MatMul(plan), epilogue) => Kernel::MatMul { plan, epilogue },
                (Planned::Loop(_), None) => return Err("a loop kernel without code".into()),
            };
            kernels.entry(key.0).or_default().insert(key.1, k);
        }
        Ok(Arc::new(CpuKernels { kernels, _code: entry::Code::new(module), compile_time: start.elapsed() }))
    }

    /// How many nodes run compiled code.
    pub fn len(&self) -> usize {
        self.kernels.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl CompiledKernels for CpuKernels {
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        let k = self.kernels.get(graph)?.get(&node)?;
        Some(k.run(operands))
    }
}

impl Kernel {
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        match self {
            Kernel::Loop { plan, entry } => run_loop(plan, entry, operands),
            Kernel::MatMul { plan, epilogue } => run_matmul(plan, epilogue.as_ref(), operands),
        }
    }
}

/// An f32 input as one contiguous buffer, expanded to the output shape where `map` says.
fn f32_input<'t>(
    i: usize,
    t: &'t Tensor,
    map: &plan::InputMap,
    out: &graphc_ir::TensorType,
) -> Result<Cow<'t, [f32]>, String> {
    let Tensor::F32(a) = t else {
        return Err(format!("compiled kernel input {i} is {}, not f32", t.dtype()));
    };
    Ok(if map.materialize {
        let shape: Vec<usize> = out.shape.iter().map(|&d| d as usize).collect();
        let b = a.broadcast(shape).ok_or_else(|| format!("input {i} does not broadcast to {out}"))?;
        Cow::Owned(b.iter().copied().collect())
    } else if let Some(s) = a.as_slice() {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(a.iter().copied().collect())
    })
}

fn to_tensor(v: Vec<f32>, ty: &graphc_ir::TensorType) -> Result<Tensor, String> {
    let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
    ndarray::ArrayD::from_shape_vec(shape, v).map(Tensor::F32).map_err(|e| e.to_string())
}

fn to_tensors(outs: Vec<Vec<f32>>, ty: &graphc_ir::TensorType) -> Result<Vec<Tensor>, String> {
    outs.into_iter().map(|v| to_tensor(v, ty)).collect()
}

/// Row ranges for the calling thread alone, or a few per worker thread. A kernel called on a
/// worker thread already (a partition of a multi-device step: one device, one core) stays on
/// its thread rather than competing with the other devices for the cores.
fn row_blocks(rows: usize, parallel: bool) -> Vec<(usize, usize)> {
    let parallel = parallel && rayon::current_thread_index().is_none();
    let chunk = if parallel { rows.div_ceil(rayon::current_num_threads().max(1) * 4).max(1) } else { rows.max(1) };
    (0..rows).step_by(chunk).map(|r| (r, (r + chunk).min(rows))).collect()
}

/// Runs `f` on every block, on the worker threads when there are several.
fn for_blocks(blocks: &[(usize, usize)], f: impl Fn(usize, usize) + Sync) {
    if blocks.len() == 1 {
        f(blocks[0].0, blocks[0].1);
        return;
    }
    rayon::scope(|s| {
        for &(r0, r1) in blocks {
            let f = &f;
            s.spawn(move |_| f(r0, r1));
        }
    });
}

fn run_loop(p: &LoopPlan, entry: &entry::Entry, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
    let n = p.rows * p.cols;
    // Each result goes over an input read here for the last time when there is one (the
    // buffer plan's in-place reuse), else into a buffer from the session's pool.
    let candidates = p.overwritable();
    let mut over: Vec<Option<usize>> = vec![None; p.inputs.len()];
    let mut outs: Vec<Vec<f32>> = Vec::with_capacity(p.results.len());
    for k in 0..p.results.len() {
        if p.per_row[k] {
            outs.push(operands.alloc_f32(p.rows)?);
            continue;
        }
        let taken = candidates.iter().filter(|&&i| over[i].is_none()).find_map(|&i| Some((i, operands.take_f32(i)?)));
        outs.push(match taken {
            Some((i, v)) if v.len() == n => {
                over[i] = Some(k);
                v
            }
            Some((i, v)) => return Err(format!("input {i} has {} elements where the kernel reads {n}", v.len())),
            None => operands.alloc_f32(n)?,
        });
    }
    let all = operands.all();
    let owned = (0..p.inputs.len())
        .map(|i| match over[i] {
            Some(_) => Ok(None),
            None => {
                let t = all.get(i).ok_or_else(|| format!("compiled kernel input {i} is missing"))?;
                f32_input(i, t, &p.inputs[i], &p.out).map(Some)
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    {
        let out_ptrs: Vec<*mut f32> = outs.iter_mut().map(|v| v.as_mut_ptr()).collect();
        let ins: Vec<*const f32> = owned
            .iter()
            .zip(&over)
            .map(|(c, o)| match (c, o) {
                (_, Some(k)) => out_ptrs[*k] as *const f32,
                (Some(c), None) => c.as_ptr(),
                (None, None) => unreachable!("every input is owned or overwritten"),
            })
            .collect();
        let ptrs = entry::Buffers::new(ins, out_ptrs);
        let blocks = row_blocks(p.rows, n >= PARALLEL_ELEMENTS && p.rows > 1);
        let scratch = p.cached.len() * p.cols;
        for_blocks(&blocks, |r0, r1| with_scratch(scratch, |s| entry.call(&ptrs, r0, r1, s)));
    }
    // Every row has run, so every element of every output is written.
    outs.into_iter()
        .enumerate()
        .map(|(k, mut v)| {
            entry::filled(std::slice::from_mut(&mut v), if p.per_row[k] { p.rows } else { n });
            to_tensor(v, &p.result_type(k))
        })
        .collect()
}

/// Runs `f` with `len` elements of this thread's scratch row buffer, which lives as long as
/// the thread: a kernel call allocates none.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0.0);
        }
        f(&mut s[..len])
    })
}

fn run_matmul(p: &MatMulPlan, epilogue: Option<&entry::Entry>, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
    let inputs = operands.all();
    let contiguous = |i: usize| -> Result<Cow<'_, [f32]>, String> {
        match inputs.get(i) {
            Some(Tensor::F32(a)) => {
                Ok(a.as_slice().map(Cow::Borrowed).unwrap_or_else(|| Cow::Owned(a.iter().copied().collect())))
            }
            Some(t) => Err(format!("matmul operand {i} is {}, not f32", t.dtype())),
            None => Err(format!("matmul operand {i} is missing")),
        }
    };
    let (a, b) = (contiguous(p.lhs)?, contiguous(p.rhs)?);
    let size = p.m * p.n;
    let mut c: Vec<f32> = operands.alloc_f32(size)?;
    // The epilogue's other inputs, and its outputs: in place over the product when it has one.
    let (extra, mut outs) = match &p.epilogue {
        Some((lp, used)) => {
            let extra = used
                .iter()
                .enumerate()
                .map(|(j, &i)| f32_input(i, inputs[i], &lp.inputs[j + 1], &lp.out))
                .collect::<Result<Vec<_>, _>>()?;
            let outs: Vec<Vec<f32>> = if lp.results.len() == 1 {
                Vec::new()
            } else {
                lp.results.iter().map(|_| operands.alloc_f32(size)).collect::<Result<_, _>>()?
            };
            (extra, outs)
        }
        None => (Vec::new(), Vec::new()),
    };
    {
        let c_ptr = c.as_mut_ptr();
        let mats = entry::MatMul { a: a.as_ptr(), b: b.as_ptr(), c: c_ptr, m: p.m, k: p.k, n: p.n };
        let epi = epilogue.map(|_| {
            let mut ins = vec![c_ptr as *const f32];
            ins.extend(extra.iter().map(|e| e.as_ptr()));
            let o = if outs.is_empty() { vec![c_ptr] } else { outs.iter_mut().map(|v| v.as_mut_ptr()).collect() };
            entry::Buffers::new(ins, o)
        });
        let parallel = p.m * p.n * p.k >= PARALLEL_FLOPS && p.m > 1 && rayon::current_thread_index().is_none();
        mats.compute(if parallel { rayon::current_num_threads() } else { 1 });
        if let (Some(e), Some(bufs)) = (epilogue, &epi) {
            let blocks = row_blocks(p.m, parallel);
            for_blocks(&blocks, |r0, r1| e.call(bufs, r0, r1, &mut []));
        }
    }
    entry::filled(std::slice::from_mut(&mut c), size);
    let out = graphc_ir::TensorType::new(graphc_ir::DType::F32, [p.m as u64, p.n as u64]);
    if outs.is_empty() {
        return to_tensors(vec![c], &out);
    }
    entry::filled(&mut outs, size);
    operands.recycle_f32(c);
    to_tensors(outs, &out)
}

/// The only unsafe code of the backend: keeping the JIT's code alive and calling into it.
#[allow(unsafe_code)]
mod entry {
    use cranelift_jit::JITModule;

    type KernelFn = unsafe extern "C" fn(*const *const f32, *const *mut f32, i64, i64, *mut f32);

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
    pub struct Entry {
        f: KernelFn,
        /// How many scratch elements the kernel uses.
        scratch: usize,
    }

    impl Entry {
        pub fn new(p: *const u8, scratch: usize) -> Self {
            // SAFETY: `p` is a function Cranelift generated with exactly this signature
            // (codegen.rs: two pointers, two i64, a pointer, no result, the platform's C
            // convention).
            Entry { f: unsafe { std::mem::transmute::<*const u8, KernelFn>(p) }, scratch }
        }

        /// Runs rows `[r0, r1)`, with `scratch` (a row per cached step of the plan) to itself.
        pub fn call(&self, b: &Buffers, r0: usize, r1: usize, scratch: &mut [f32]) {
            // SAFETY: the buffers hold the plan's inputs (each as long as its type, which the
            // session checked and the plan's strides stay within) and outputs with capacity
            // for rows*cols elements; rows in [r0, r1) are within them and disjoint between
            // concurrent calls, so no two calls write one element. The kernel touches
            // `self.scratch` elements of the scratch, checked here (exclusively borrowed, so
            // no other call shares it).
            assert!(scratch.len() >= self.scratch, "a kernel's scratch is too small");
            unsafe { (self.f)(b.ins.as_ptr(), b.outs.as_ptr(), r0 as i64, r1 as i64, scratch.as_mut_ptr()) }
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
        /// Pointers to the inputs, and to the outputs (allocated buffers, possibly still
        /// empty, or an input's own buffer for an in-place epilogue).
        pub fn new(ins: Vec<*const f32>, outs: Vec<*mut f32>) -> Self {
            Buffers { ins, outs }
        }
    }

    // SAFETY: the pointers are only dereferenced by kernels on disjoint output rows while the
    // buffers they point into live (the calls happen inside a scope that outlives none of them).
    unsafe impl Send for Buffers {}
    unsafe impl Sync for Buffers {}

    /// `c = a b` for row-major `a: [m, k]`, `b: [k, n]`, `c: [m, n]`.
    pub struct MatMul {
        pub a: *const f32,
        pub b: *const f32,
        pub c: *mut f32,
        pub m: usize,
        pub k: usize,
        pub n: usize,
    }

    impl MatMul {
        /// The product, on `threads` of rayon's threads (gemm splits it).
        pub fn compute(&self, threads: usize) {
            // SAFETY: `a` holds m*k and `b` k*n elements and `c` has capacity m*n (the
            // caller's buffers for the plan's shapes, checked by the session's types); with
            // read_dst false gemm does not read `c` (dst = alpha dst + beta a b, alpha unused).
            unsafe {
                gemm::gemm(
                    self.m,
                    self.n,
                    self.k,
                    self.c,
                    1,
                    self.n as isize,
                    false,
                    self.a,
                    1,
                    self.k as isize,
                    self.b,
                    1,
                    self.n as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None },
                )
            }
        }
    }
}
