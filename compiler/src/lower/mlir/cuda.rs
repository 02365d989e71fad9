//! The GPU kernels of a module on an NVIDIA GPU: each graph's `gpu.module` (`emit.rs`) to PTX
//! (`ptx.rs`), loaded through the CUDA driver by the run half (crate `graphc-cuda-runtime`),
//! and each kernel put in a `KernelTable` in place of the CPU kernel of the same plan.

use super::{gpu_listing, ptx::ptx, Tier};
use graphc_cuda_runtime::{GpuInput, GpuLoopKernel, Threads};
use graphc_ir::Module;
use graphc_runtime::KernelTable;
use std::sync::Arc;

/// The compute capability the PTX is written for: the driver compiles it for the GPU at hand
/// (sm_80 and later).
pub const CHIP: &str = "sm_80";

/// Compiles every kernel of `m` a GPU can run and puts it in `table` in place of the kernel
/// there; an error when no GPU can run them (`graphc_cuda_runtime::available`).
pub fn compile_into(m: &Module, table: &KernelTable) -> Result<Tier, String> {
    let start = std::time::Instant::now();
    graphc_cuda_runtime::available()?;
    let (mut count, mut kept) = (0, Vec::new());
    for g in &m.graphs {
        let (text, kernels, left) = gpu_listing(m, &g.name, CHIP)?;
        kept.extend(left);
        if kernels.is_empty() {
            continue;
        }
        let code = graphc_cuda_runtime::load(&ptx(&text)?)?;
        for k in kernels {
            let p = &k.plan;
            let kernel = GpuLoopKernel {
                rows: p.rows,
                cols: p.cols,
                inputs: p
                    .inputs
                    .iter()
                    .zip(&p.input_types)
                    .map(|(i, ty)| GpuInput { ty: ty.clone(), materialize: i.materialize })
                    .collect(),
                out: p.out.clone(),
                results: (0..p.results.len()).map(|r| (p.result_type(r), p.per_row[r])).collect(),
                scratch_per_row: super::emit::gpu_scratch_per_row(p),
                threads: if super::emit::gpu_threads_per_element(p) { Threads::PerElement } else { Threads::PerRow },
                code: code.clone(),
                function: k.name.clone(),
                reach: graphc_cpu_runtime::describe::extents(p).ins,
            };
            table.replace(&g.name, k.node, Arc::new(kernel));
            count += 1;
        }
    }
    Ok(Tier { count, compile_time: start.elapsed(), kept })
}
