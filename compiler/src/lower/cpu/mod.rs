//! The CPU backend: elementwise kernels (a `fusion` of kind "loop", or a lone elementwise op)
//! JIT-compiled with Cranelift, and matrix products (a lone matmul, or an "output" fusion of a
//! matmul and its elementwise epilogue) by the gemm crate's packed microkernels (which split
//! the product across the threads and pack the right-hand matrix once), then the JIT-compiled
//! epilogue by blocks of rows. They run in place of the reference kernels inside sessions; other nodes stay with
//! the interpreter. Work splits across threads by rows above a size threshold.

mod codegen;
mod math;
mod plan;

pub use codegen::Isa;
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
    /// building a key. Declared before `_code`: the entry points are dropped before the code
    /// they point into is freed.
    kernels: HashMap<String, HashMap<Node, Kernel>>,
    /// Owns the generated code, and frees it when dropped.
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

/// How kernels are compiled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The instructions kernels may use.
    pub isa: Isa,
}

impl CompileOptions {
    /// The options the environment asks for: `GRAPHC_JIT_ISA=sse` leaves out AVX and the
    /// extensions after it (as on hosts without them), `native` (the default) uses what the
    /// host has.
    pub fn from_env() -> Result<CompileOptions, String> {
        let isa = match std::env::var("GRAPHC_JIT_ISA").as_deref() {
            Err(_) | Ok("native") => Isa::Native,
            Ok("sse") => Isa::Sse,
            Ok(other) => return Err(format!("GRAPHC_JIT_ISA: expected 'native' or 'sse', got '{other}'")),
        };
        Ok(CompileOptions { isa })
    }
}

impl CpuKernels {
    /// Compiles every node of the module the backend handles (the whole module's graphs,
    /// nested regions included), with the options of the environment
    /// ([`CompileOptions::from_env`]).
    pub fn compile(m: &Module) -> Result<Arc<CpuKernels>, String> {
        CpuKernels::compile_with(m, &CompileOptions::from_env()?)
    }

    /// Compiles every node of the module the backend handles, with `options`.
    pub fn compile_with(m: &Module, options: &CompileOptions) -> Result<Arc<CpuKernels>, String> {
        let start = Instant::now();
        let mut jit = codegen::Jit::new(options.isa)?;
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
        let (code, mut entries) = entry::Code::link(jit)?;
        let mut kernels: HashMap<String, HashMap<Node, Kernel>> = HashMap::new();
        for (key, planned, id) in planned {
            let entry = id.and_then(|id| entries.remove(&id));
            let k = match (planned, entry) {
                (Planned::Loop(plan), Some(entry)) => Kernel::Loop { plan, entry },
                (Planned::MatMul(plan), epilogue) => Kernel::MatMul { plan, epilogue },
                (Planned::Loop(_), None) => return Err("a loop kernel without code".into()),
            };
            kernels.entry(key.0).or_default().insert(key.1, k);
        }
        Ok(Arc::new(CpuKernels { kernels, _code: code, compile_time: start.elapsed() }))
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

/// An f32 input as one contiguous buffer, expanded to the output shape where `map` says;
/// an error unless it has the type the plan was made for.
fn f32_input<'t>(
    i: usize,
    t: &'t Tensor,
    ty: &graphc_ir::TensorType,
    map: &plan::InputMap,
    out: &graphc_ir::TensorType,
) -> Result<Cow<'t, [f32]>, String> {
    check_type(i, t, ty)?;
    let Tensor::F32(a) = t else { unreachable!("checked to be f32") };
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

/// Whether operand `i` has the type the plan was made for (the shapes its strides assume).
fn check_type(i: usize, t: &Tensor, ty: &graphc_ir::TensorType) -> Result<(), String> {
    if t.ty() != *ty {
        return Err(format!("compiled kernel input {i} is {} where the kernel was compiled for {ty}", t.ty()));
    }
    Ok(())
}

/// The elements a loop kernel touches in each buffer, from its plan (see `entry::Extents`).
fn extents(p: &LoopPlan) -> entry::Extents {
    let (rows, cols) = (p.rows, p.cols);
    let reach = |m: &plan::InputMap| {
        let last = (rows.saturating_sub(1) as i64) * m.row_stride + (cols.saturating_sub(1) as i64) * m.col_stride;
        last.max(0) as usize + 1
    };
    entry::Extents {
        rows,
        ins: p.inputs.iter().map(reach).collect(),
        outs: p.per_row.iter().map(|&r| if r { rows } else { rows * cols }).collect(),
        scratch: p.cached.len() * cols,
    }
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

fn run_loop(p: &LoopPlan, entry: &entry::Entry, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
    let n = p.rows * p.cols;
    if operands.len() != p.inputs.len() {
        return Err(format!("{} operands where the kernel takes {}", operands.len(), p.inputs.len()));
    }
    for (i, ty) in p.input_types.iter().enumerate() {
        if let Some(t) = operands.get(i) {
            check_type(i, t, ty)?;
        }
    }
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
                f32_input(i, t, &p.input_types[i], &p.inputs[i], &p.out).map(Some)
            }
        })
        .collect::<Result<Vec<_>, String>>()?;
    let ins: Vec<entry::In<'_>> = owned
        .iter()
        .zip(&over)
        .map(|(c, o)| match (c, o) {
            (_, Some(k)) => entry::In::Output(*k),
            (Some(c), None) => entry::In::Slice(c),
            (None, None) => unreachable!("every input is owned or overwritten"),
        })
        .collect();
    let blocks = row_blocks(p.rows, n >= PARALLEL_ELEMENTS && p.rows > 1);
    entry.run(&ins, &mut outs, &blocks, |len, f| with_scratch(len, f))?;
    outs.into_iter().enumerate().map(|(k, v)| to_tensor(v, &p.result_type(k))).collect()
}

/// Runs `f` with `len` elements of this thread's scratch row buffer, which lives as long as
/// the thread: a kernel call allocates none.
fn with_scratch(len: usize, f: &mut dyn FnMut(&mut [f32])) {
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
    let contiguous = |i: usize, rows: usize, cols: usize| -> Result<Cow<'_, [f32]>, String> {
        let ty = graphc_ir::TensorType::new(graphc_ir::DType::F32, [rows as u64, cols as u64]);
        match inputs.get(i) {
            Some(t @ Tensor::F32(a)) => {
                check_type(i, t, &ty)?;
                Ok(a.as_slice().map(Cow::Borrowed).unwrap_or_else(|| Cow::Owned(a.iter().copied().collect())))
            }
            Some(t) => Err(format!("matmul operand {i} is {}, not f32", t.dtype())),
            None => Err(format!("matmul operand {i} is missing")),
        }
    };
    let (a, b) = (contiguous(p.lhs, p.m, p.k)?, contiguous(p.rhs, p.k, p.n)?);
    let size = p.m * p.n;
    // The epilogue's other inputs, and its outputs: in place over the product when it has one.
    let (extra, mut outs) = match &p.epilogue {
        Some((lp, used)) => {
            let extra = used
                .iter()
                .enumerate()
                .map(|(j, &i)| {
                    let t = inputs.get(i).ok_or_else(|| format!("compiled kernel input {i} is missing"))?;
                    f32_input(i, t, &lp.input_types[j + 1], &lp.inputs[j + 1], &lp.out)
                })
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
    let parallel = p.m * p.n * p.k >= PARALLEL_FLOPS && p.m > 1 && rayon::current_thread_index().is_none();
    let mut c: Vec<f32> = operands.alloc_f32(size)?;
    entry::matmul(&a, &b, &mut c, (p.m, p.k, p.n), if parallel { rayon::current_num_threads() } else { 1 })?;
    let out = graphc_ir::TensorType::new(graphc_ir::DType::F32, [p.m as u64, p.n as u64]);
    let Some((lp, _)) = &p.epilogue else { return to_tensors(vec![c], &out) };
    let e = epilogue.ok_or("a matmul epilogue without code")?;
    let blocks = row_blocks(p.m, parallel);
    let scratch = |len: usize, f: &mut dyn FnMut(&mut [f32])| with_scratch(len, f);
    let rest = extra.iter().map(|x| entry::In::Slice(x));
    if outs.is_empty() {
        // One result: written over the product.
        let mut c = [c];
        let ins: Vec<_> = std::iter::once(entry::In::Output(0)).chain(rest).collect();
        e.run(&ins, &mut c, &blocks, scratch)?;
        let [c] = c;
        return to_tensors(vec![c], &lp.result_type(0));
    }
    let ins: Vec<_> = std::iter::once(entry::In::Slice(&c)).chain(rest).collect();
    e.run(&ins, &mut outs, &blocks, scratch)?;
    operands.recycle_f32(c);
    to_tensors(outs, &out)
}

/// The only unsafe code of the backend: keeping the JIT's code alive, freeing it, and calling
/// into it. Generated code checks nothing, so everything it will touch is checked here against
/// the extents its plan reads and writes before each call; the functions outside this module
/// are safe whatever buffers they are given.
#[allow(unsafe_code)]
mod entry {
    use cranelift_jit::JITModule;
    use cranelift_module::FuncId;
    use std::collections::HashMap;

    type KernelFn = unsafe extern "C" fn(*const *const f32, *const *mut f32, i64, i64, *mut f32);

    /// The JIT module, which owns the code's memory. It is never touched after linking until
    /// it is dropped, so sharing it between threads is sound.
    pub struct Code(Option<JITModule>);

    impl Code {
        /// Links every kernel `jit` defined; returns the code and each kernel's entry point,
        /// with the extents of the plan `jit` generated it from.
        pub fn link(jit: super::codegen::Jit) -> Result<(Code, HashMap<FuncId, Entry>), String> {
            let (m, defined) = jit.finish()?;
            let entries = defined
                .into_iter()
                .map(|(id, extents)| {
                    let p = m.get_finalized_function(id);
                    // SAFETY: `p` is a function Cranelift generated with exactly this signature
                    // (codegen.rs: two pointers, two i64, a pointer, no result, the platform's C
                    // convention), for the plan whose extents `Jit::define` recorded with it,
                    // which touches nothing beyond them when run on rows within them. The code
                    // stays mapped until `Code` is dropped, and `CpuKernels` drops its entries
                    // before its code.
                    let f = unsafe { std::mem::transmute::<*const u8, KernelFn>(p) };
                    (id, Entry { f, extents })
                })
                .collect();
            Ok((Code(Some(m)), entries))
        }
    }

    impl Drop for Code {
        fn drop(&mut self) {
            if let Some(m) = self.0.take() {
                // SAFETY: the only pointers into this code are the `Entry`s made with it, which
                // its owner `CpuKernels` declares before it and so drops first; a kernel runs
                // only through `&CpuKernels`, so none runs now or can run again.
                unsafe { m.free_memory() }
            }
        }
    }

    impl std::fmt::Debug for Code {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Code")
        }
    }

    // SAFETY: see `Code`: the module is only kept for its memory and freed by its owner's drop.
    unsafe impl Send for Code {}
    unsafe impl Sync for Code {}

    /// How many elements a kernel touches in each buffer, from its plan: it is never called on
    /// shorter ones.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Extents {
        /// The rows of the plan's `[rows, cols]` view; a call runs some of them.
        pub rows: usize,
        /// Per input: one past the last element read over all rows.
        pub ins: Vec<usize>,
        /// Per output: one past the last element written over all rows.
        pub outs: Vec<usize>,
        /// Scratch elements (a row per cached step).
        pub scratch: usize,
    }

    /// A kernel's entry point and the extents of the buffers it runs on.
    #[derive(Debug)]
    pub struct Entry {
        f: KernelFn,
        extents: Extents,
    }

    /// A kernel input: a buffer of its own, or output `k`'s buffer, already holding the input
    /// and written over in place (as the plan allows: it reads each element before writing it).
    pub enum In<'a> {
        Slice(&'a [f32]),
        Output(usize),
    }

    impl Entry {
        /// Runs the kernel on the row ranges `blocks` (on rayon's threads when there are
        /// several) after checking every buffer, the rows and the scratch against the plan's
        /// extents; a mismatch is an error, never a call. Outputs not read in place are
        /// cleared and grown to their extents, and hold the kernel's results afterwards.
        pub fn run(
            &self,
            ins: &[In<'_>],
            outs: &mut [Vec<f32>],
            blocks: &[(usize, usize)],
            scratch: impl Fn(usize, &mut dyn FnMut(&mut [f32])) + Sync,
        ) -> Result<(), String> {
            let e = &self.extents;
            if ins.len() != e.ins.len() || outs.len() != e.outs.len() {
                return Err(format!(
                    "{} inputs and {} outputs where the kernel takes {} and {}",
                    ins.len(),
                    outs.len(),
                    e.ins.len(),
                    e.outs.len()
                ));
            }
            let mut end = 0;
            for &(r0, r1) in blocks {
                if r0 < end || r1 < r0 || r1 > e.rows {
                    return Err(format!("rows {r0}..{r1} of a kernel over {} rows, after row {end}", e.rows));
                }
                end = r1;
            }
            if blocks.iter().map(|&(r0, r1)| r1 - r0).sum::<usize>() != e.rows {
                return Err(format!("rows {blocks:?} do not cover the kernel's {} rows", e.rows));
            }
            let in_place: Vec<usize> =
                ins.iter().filter_map(|i| if let In::Output(k) = i { Some(*k) } else { None }).collect();
            for (k, v) in outs.iter_mut().enumerate() {
                if in_place.contains(&k) {
                    if v.len() < e.outs[k] {
                        return Err(format!(
                            "output {k} has {} elements where the kernel writes {}",
                            v.len(),
                            e.outs[k]
                        ));
                    }
                } else {
                    v.clear();
                    v.reserve(e.outs[k]);
                }
            }
            let mut in_ptrs = Vec::with_capacity(ins.len());
            for (i, (x, &need)) in ins.iter().zip(&e.ins).enumerate() {
                let (p, len) = match *x {
                    In::Slice(s) => (s.as_ptr(), s.len()),
                    In::Output(k) => {
                        let v = outs.get(k).ok_or_else(|| format!("input {i} reads output {k}, which is missing"))?;
                        (v.as_ptr(), v.len())
                    }
                };
                if len < need {
                    return Err(format!("input {i} has {len} elements where the kernel reads {need}"));
                }
                in_ptrs.push(p);
            }
            let out_ptrs: Vec<*mut f32> = outs.iter_mut().map(|v| v.as_mut_ptr()).collect();
            let bufs = &Pointers { ins: in_ptrs, outs: out_ptrs };
            let call = |(r0, r1): (usize, usize)| {
                let mut ok = Err(String::new());
                scratch(e.scratch, &mut |s: &mut [f32]| {
                    ok = if s.len() < e.scratch {
                        Err(format!("a scratch of {} elements where the kernel uses {}", s.len(), e.scratch))
                    } else {
                        // SAFETY: every input pointer is valid for reads and every output
                        // pointer for writes of the extents the plan touches (checked or
                        // reserved above; the buffers live and are not otherwise used until
                        // `run` returns), the rows are within the plan's and disjoint between
                        // blocks (checked above), so concurrent calls write disjoint elements;
                        // outputs are distinct vectors, and an input aliases an output only
                        // where the plan writes over it; the scratch is exclusively borrowed
                        // and long enough.
                        unsafe {
                            (self.f)(bufs.ins.as_ptr(), bufs.outs.as_ptr(), r0 as i64, r1 as i64, s.as_mut_ptr())
                        };
                        Ok(())
                    };
                });
                ok
            };
            if blocks.len() == 1 {
                call(blocks[0])?;
            } else {
                let errors = std::sync::Mutex::new(Vec::new());
                rayon::scope(|s| {
                    for &block in blocks {
                        let (call, errors) = (&call, &errors);
                        s.spawn(move |_| {
                            if let Err(e) = call(block) {
                                errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                            }
                        });
                    }
                });
                if let Some(e) = errors.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().next() {
                    return Err(e);
                }
            }
            for (k, v) in outs.iter_mut().enumerate() {
                if !in_place.contains(&k) {
                    // SAFETY: the capacity was reserved above, and the kernel wrote every
                    // element up to the extent: all rows ran (they cover 0..rows, disjoint),
                    // each writing its row of every output, through raw pointers (nothing
                    // uninitialized was read through a reference).
                    unsafe { v.set_len(e.outs[k]) };
                }
            }
            Ok(())
        }
    }

    /// The pointer arrays a kernel takes.
    struct Pointers {
        ins: Vec<*const f32>,
        outs: Vec<*mut f32>,
    }

    // SAFETY: the pointers are only dereferenced by kernels on disjoint output rows while the
    // buffers they point into live (the calls happen inside `Entry::run`, which borrows them).
    unsafe impl Send for Pointers {}
    unsafe impl Sync for Pointers {}

    /// `c = a b` for row-major `a: [m, k]`, `b: [k, n]`, `c: [m, n]`; `c` is cleared and
    /// filled. The lengths are checked, so this is safe to call with any buffers.
    pub fn matmul(
        a: &[f32],
        b: &[f32],
        c: &mut Vec<f32>,
        (m, k, n): (usize, usize, usize),
        threads: usize,
    ) -> Result<(), String> {
        let mn = m.checked_mul(n).ok_or("a product too large to index")?;
        if Some(a.len()) != m.checked_mul(k) || Some(b.len()) != k.checked_mul(n) {
            return Err(format!("factors of {} and {} elements for a [{m},{k}] x [{k},{n}] product", a.len(), b.len()));
        }
        c.clear();
        c.reserve(mn);
        // SAFETY: `a` holds m*k and `b` k*n elements and `c` has capacity m*n (checked and
        // reserved just above), all row-major with the strides given; with read_dst false
        // gemm does not read `c` (dst = alpha dst + beta a b, alpha unused) and writes every
        // element of it, so its length can then be m*n.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None },
            );
            c.set_len(mn);
        }
        // The reference sums from +0, so its zeros are +0 (in round-to-nearest a sum that
        // starts at +0 is never -0); gemm may leave -0 (a single term -0 * x), whose sign a
        // later division turns into the other infinity. Adding +0 changes nothing else.
        for x in c.iter_mut() {
            *x += 0.0;
        }
        Ok(())
    }
}
