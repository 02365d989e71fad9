//! The CPU backend's compile half: elementwise kernels (a `fusion` of kind "loop", or a lone
//! elementwise op) lowered to Cranelift IR (`codegen.rs`, generic over the Cranelift module, so
//! the same lowering fills a JIT module or an object file) and JIT-compiled (`jit.rs`), and
//! matrix products (a lone matmul, or an "output" fusion of a matmul and its elementwise
//! epilogue) run by the run half (crate `graphc-cpu-runtime`) on the gemm crate's
//! microkernels before the generated epilogue. They run in place of the reference kernels
//! inside sessions; other nodes stay with the interpreter.

mod codegen;
mod jit;
pub mod object;

pub use codegen::{host_isa, Emitter, Isa, Listing, Listings};

use crate::lower::plan;
use graphc_cpu_runtime::{describe, Entry};
use graphc_ir::{Module, Node};
use graphc_runtime::{CompiledKernels, KernelTable, Operands, Tensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A compiled module: kernels for the nodes the backend took, by graph and node.
#[derive(Debug)]
pub struct CpuKernels {
    /// The runtime's table of replaceable kernels (a faster tier may swap one while sessions
    /// run). Each kernel keeps its code alive.
    table: Arc<KernelTable>,
    /// How long compilation took.
    pub compile_time: Duration,
    /// What `CompileOptions::listings` asked to keep of each kernel with code, in the order of
    /// [`plan::kernels`], each with the line that heads the kernel in every listing
    /// ([`plan::kernel_header`]).
    pub listings: Vec<(String, Listing)>,
}

/// How kernels are compiled, and what to keep of them besides their code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The instructions kernels may use (`--isa`).
    pub isa: Isa,
    pub listings: Listings,
}

impl CpuKernels {
    /// Compiles every node of the module the backend handles (the whole module's graphs,
    /// nested regions included), for the host's instruction set.
    pub fn compile(m: &Module) -> Result<Arc<CpuKernels>, String> {
        CpuKernels::compile_with(m, &CompileOptions::default())
    }

    /// Compiles every node of the module the backend handles, with `options`.
    pub fn compile_with(m: &Module, options: &CompileOptions) -> Result<Arc<CpuKernels>, String> {
        let start = Instant::now();
        let mut jit = jit::emitter(options)?;
        let mut planned: Vec<(plan::Kernel, Option<cranelift_module::FuncId>)> = Vec::new();
        let mut listings = Vec::new();
        for (i, k) in plan::kernels(m).into_iter().enumerate() {
            let id = match k.plan.code() {
                Some(p) => {
                    let (id, listing) = jit.define(p)?;
                    if options.listings != Listings::default() {
                        listings.push((plan::kernel_header(m, i, &k), listing));
                    }
                    Some(id)
                }
                None => None,
            };
            planned.push((k, id));
        }
        let mut entries = jit::link(jit)?;
        let planned = planned.into_iter().map(|(k, id)| (k, id.and_then(|id| entries.remove(&id)))).collect();
        CpuKernels::assemble(planned, start, listings)
    }

    /// The kernels of `planned`, each with the entry point of its code where it has code, in
    /// a table; compiled since `start`.
    pub(crate) fn assemble(
        planned: Vec<(plan::Kernel, Option<Entry>)>,
        start: Instant,
        listings: Vec<(String, Listing)>,
    ) -> Result<Arc<CpuKernels>, String> {
        let table = Arc::new(KernelTable::new());
        for (k, entry) in planned {
            table.replace(&k.graph, k.node, Arc::new(describe::kernel(&k.plan, entry)?));
        }
        Ok(Arc::new(CpuKernels { table, compile_time: start.elapsed(), listings }))
    }

    /// How many nodes run compiled code.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The table the kernels are looked up in, where a later tier replaces them one at a time.
    pub fn table(&self) -> &Arc<KernelTable> {
        &self.table
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `graphc opt --emit` prints of each kernel's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// Its Cranelift IR as generated, before Cranelift's optimizations ([`Listings::clif`]).
    Clif,
    /// Its machine code as Cranelift prints it ([`Listings::asm`]).
    Asm,
}

/// Every kernel of the module ([`plan::kernels`]) compiled for `isa`, as `what` says: each
/// headed by `; kernel N: @g: %y = ...` and `; graphc_loop_K` (or a line saying it has no
/// code of its own: a lone matrix product), a blank line between. With `Isa::Sse` the IR
/// is the same on every x86-64 host.
pub fn listing(m: &Module, isa: Isa, what: Emit) -> Result<String, String> {
    let listings = Listings { clif: what == Emit::Clif, asm: what == Emit::Asm, code: false };
    let compiled = CpuKernels::compile_with(m, &CompileOptions { isa, listings })?;
    let mut with_code = compiled.listings.iter();
    let mut out = String::new();
    for (i, k) in plan::kernels(m).iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("; {}\n", plan::kernel_header(m, i, k)));
        if k.plan.code().is_none() {
            out.push_str("; no code: the run half computes it (a matrix product on gemm, a column reduction, a pool, a concat)\n");
            continue;
        }
        let (_, l) = with_code.next().ok_or("a kernel without its listing")?;
        let text = match what {
            Emit::Clif => l.clif.as_deref(),
            Emit::Asm => l.asm.as_deref(),
        }
        .ok_or_else(|| format!("{}: Cranelift kept no listing", l.name))?;
        out.push_str(&format!("; {}\n{}", l.name, text));
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

impl CompiledKernels for CpuKernels {
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        self.table.run(graph, node, operands)
    }

    fn device_kernel(&self, graph: &str, node: Node) -> Option<Arc<dyn graphc_runtime::DeviceKernel>> {
        self.table.device_kernel(graph, node)
    }

    fn tier(&self, graph: &str, node: Node) -> Option<&'static str> {
        self.table.tier(graph, node)
    }
}
