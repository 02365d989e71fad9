//! The LLVM tier of the CPU backend: the loop plans `cpu/codegen.rs` gives Cranelift, emitted
//! as MLIR (`emit.rs`, plain text, so `graphc opt --emit mlir` needs no MLIR) with the host's
//! widest vectors, and, with the `llvm` feature, lowered through MLIR's upstream passes to
//! LLVM and JIT-compiled for the host (`jit.rs`). The kernels have the Cranelift kernels' C
//! signature and plans, so the run half calls them with the same extent checks, and they
//! replace Cranelift's one by one in the runtime's kernel table.

#[cfg(feature = "llvm")]
pub mod cuda;
pub mod emit;
mod gpu;
pub mod gpu_concat;
pub mod gpu_product;
pub mod gpu_reduce;
#[cfg(feature = "llvm")]
pub mod jit;
#[cfg(feature = "llvm")]
pub mod ptx;

pub use emit::host_lanes;
pub use gpu::{gpu_listing, gpu_runs, GpuKernel, GpuPlan};

/// The vector width for `isa`: the host's widest. The LLVM tier compiles for the host's
/// CPU and all its features (MLIR's ExecutionEngine), so an instruction set without AVX
/// (`--isa sse`) is an error: Cranelift's kernels compile for it.
pub fn lanes_for(isa: crate::lower::cpu::Isa) -> Result<usize, String> {
    match isa {
        crate::lower::cpu::Isa::Native => Ok(host_lanes()),
        crate::lower::cpu::Isa::Sse => {
            Err("the LLVM tier compiles for the host's instruction set only; --isa sse needs --backend jit".into())
        }
    }
}

use crate::lower::plan;
use graphc_ir::Module;

/// The kernels with code (loops and matmul epilogues) of `m` as one MLIR module, `lanes` wide,
/// each function headed by a comment naming its kernel ([`plan::kernel_header`]); kernels
/// the emitter cannot write say why instead (they stay Cranelift's).
pub fn listing(m: &Module, lanes: usize) -> Result<String, String> {
    Ok(cpu_module(m, &plan::kernels(m), lanes).text)
}

/// What [`listing`] and `compile_into` write of a module's kernels.
struct CpuModule {
    text: String,
    /// The kernels (indices into [`plan::kernels`]) with a function in the text.
    emitted: Vec<usize>,
    /// Those with code left to Cranelift, headed as in listings, with why.
    kept: Vec<String>,
}

fn cpu_module(m: &Module, kernels: &[plan::Kernel], lanes: usize) -> CpuModule {
    let mut out = CpuModule { text: String::from("module {\n"), emitted: Vec::new(), kept: Vec::new() };
    out.text.push_str(emit::MATH_DECLS);
    for (i, k) in kernels.iter().enumerate() {
        let header = plan::kernel_header(m, i, k);
        out.text.push_str(&format!("  // {header}\n"));
        match k.plan.code() {
            None => out
                .text
                .push_str("  // no code: the run half computes it (a matrix product on gemm, a column reduction, a pool, a concat)\n"),
            Some(p) => match emit::kernel(p, &kernel_name(i), lanes) {
                Ok(text) => {
                    out.text.push_str(&text);
                    out.emitted.push(i);
                }
                Err(e) => {
                    out.text.push_str(&format!("  // not emitted ({e}): Cranelift's kernel runs\n"));
                    out.kept.push(format!("{header}: {e}"));
                }
            },
        }
    }
    out.text.push_str("}\n");
    out
}

/// The function of kernel `i` (in [`plan::kernels`]' order).
fn kernel_name(i: usize) -> String {
    format!("graphc_llvm_{i}")
}

/// What the LLVM tier made of a module.
#[cfg(feature = "llvm")]
#[derive(Debug, Default)]
pub struct Tier {
    /// How many kernels it compiled.
    pub count: usize,
    pub compile_time: std::time::Duration,
    /// The kernels with code it left to Cranelift, each headed as in listings
    /// ([`plan::kernel_header`]), with why.
    pub kept: Vec<String>,
}

/// Compiles every kernel with code of `m` that the emitter can write, `lanes` wide, and puts
/// each in `table` in place of the kernel there (a Cranelift kernel of the same plan, which
/// those it cannot write keep).
#[cfg(feature = "llvm")]
pub fn compile_into(m: &Module, table: &graphc_runtime::KernelTable, lanes: usize) -> Result<Tier, String> {
    let start = std::time::Instant::now();
    let kernels = plan::kernels(m);
    let CpuModule { text, emitted, kept } = cpu_module(m, &kernels, lanes);
    if emitted.is_empty() {
        return Ok(Tier { count: 0, compile_time: start.elapsed(), kept });
    }
    let names: Vec<(String, graphc_cpu_runtime::Extents)> = emitted
        .iter()
        .filter_map(|&i| Some((kernel_name(i), graphc_cpu_runtime::describe::extents(kernels[i].plan.code()?))))
        .collect();
    let entries = jit::compile(&text, &names)?;
    let count = entries.len();
    for (i, entry) in emitted.into_iter().zip(entries) {
        let k = &kernels[i];
        let kernel = graphc_cpu_runtime::describe::kernel(&k.plan, Some(entry))?;
        table.replace(&k.graph, k.node, std::sync::Arc::new(kernel));
    }
    Ok(Tier { count, compile_time: start.elapsed(), kept })
}
