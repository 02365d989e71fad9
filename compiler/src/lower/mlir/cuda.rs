//! The GPU kernels of a module on an NVIDIA GPU: each graph's `gpu.module` (`emit.rs`) to PTX
//! (`ptx.rs`), loaded through the CUDA driver by the run half (crate `graphc-cuda-runtime`),
//! and each kernel put in a `KernelTable` in place of the CPU kernel of the same plan.

use super::{gpu_concat, gpu_product, gpu_reduce, GpuKernel, GpuPlan};
use super::{gpu_listing, ptx::ptx, Tier};
use graphc_cuda_runtime::{GpuCode, GpuInput, GpuLoopKernel, Threads};
use graphc_ir::{DeviceKind, Graph, Module, Node};
use graphc_runtime::KernelTable;
use std::sync::Arc;

/// The compute capability the PTX is written for: the driver compiles it for the GPU at hand
/// (sm_80 and later).
pub const CHIP: &str = "sm_80";

const _: () = assert!(gpu_product::THREADS == graphc_cuda_runtime::THREADS_PER_BLOCK);

/// Compiles every kernel of `m` a GPU can run and puts it in `table` in place of the kernel
/// there; an error when no GPU can run them (`graphc_cuda_runtime::available`).
pub fn compile_into(m: &Module, table: &KernelTable) -> Result<Tier, String> {
    let start = std::time::Instant::now();
    graphc_cuda_runtime::available()?;
    let (mut count, mut kept) = (0, Vec::new());
    for g in &m.graphs {
        let (text, mut kernels, left) = gpu_listing(m, &g.name, CHIP)?;
        kept.extend(left);
        kernels.retain(|k| {
            let gpu = for_the_gpu(g, k.node);
            if !gpu {
                kept.push(format!("@{}: {}: placed on a CPU device", g.name, k.name));
            }
            gpu
        });
        if kernels.is_empty() {
            continue;
        }
        let code = graphc_cuda_runtime::load(&ptx(&text)?)?;
        for k in kernels {
            let kernel = describe(&k, code.clone());
            table.replace(&g.name, k.node, Arc::new(kernel));
            count += 1;
        }
    }
    Ok(Tier { count, compile_time: start.elapsed(), kept })
}

/// Whether kernel node `n` of `g` runs on the GPU: placed on a GPU device, or on none (a
/// module run with `--backend cuda` and no device spec). A node placed on a CPU device (a
/// CPU partition of a spec with a GPU) keeps its CPU kernel. A node inside a `cond` or
/// `while` whose annotation names no device runs where the node around it does.
pub fn for_the_gpu(g: &Graph, n: Node) -> bool {
    let mut m = n;
    loop {
        if let Some((kind, _)) = g.nodes[m].device.as_ref().and_then(|d| d.device) {
            return kind == DeviceKind::Gpu;
        }
        match g.regions[g.nodes[m].parent].parent {
            Some(p) => m = p,
            None => return true,
        }
    }
}

/// The run half's description of kernel `k`, whose code is in `code`.
fn describe(k: &GpuKernel, code: Arc<GpuCode>) -> GpuLoopKernel {
    let input = |(ty, materialize): (&graphc_ir::TensorType, bool)| GpuInput { ty: ty.clone(), materialize };
    match &k.plan {
        GpuPlan::Loop(p) => GpuLoopKernel {
            rows: p.rows,
            cols: p.cols,
            inputs: p.input_types.iter().zip(&p.inputs).map(|(ty, i)| input((ty, i.materialize))).collect(),
            out: p.out.clone(),
            results: (0..p.results.len()).map(|r| (p.result_type(r), p.per_row[r])).collect(),
            scratch_per_row: super::emit::gpu_scratch_per_row(p),
            threads: if super::emit::gpu_threads_per_element(p) { Threads::PerElement } else { Threads::PerRow },
            code,
            function: k.name.clone(),
            reach: graphc_cpu_runtime::describe::extents(p).ins,
        },
        GpuPlan::Product(c, types) => {
            let (out, results) = gpu_product::result_types(c);
            let results = results.into_iter().map(|ty| (ty, false)).collect();
            let (rows, cols) = gpu_product::view(c);
            GpuLoopKernel {
                rows,
                cols,
                inputs: types.iter().map(|(ty, m)| input((ty, *m))).collect(),
                out,
                results,
                scratch_per_row: if c.has_epilogue() { cols } else { 0 },
                threads: Threads::Blocks(gpu_product::blocks(c)),
                code,
                function: k.name.clone(),
                reach: gpu_product::extents(c, types.len()).ins,
            }
        }
        GpuPlan::Concat(p) => {
            let (rows, cols) = gpu_concat::view(p);
            GpuLoopKernel {
                rows,
                cols,
                inputs: p.inputs.iter().map(|ty| GpuInput { ty: ty.clone(), materialize: false }).collect(),
                out: p.out.clone(),
                results: vec![(p.out.clone(), false)],
                scratch_per_row: 0,
                threads: Threads::PerElement,
                code,
                function: k.name.clone(),
                reach: gpu_concat::extents(p).ins,
            }
        }
        GpuPlan::Reduce(r) => {
            let (rows, cols) = gpu_reduce::view(r);
            let extents = gpu_reduce::extents(r);
            GpuLoopKernel {
                rows,
                cols,
                inputs: vec![GpuInput { ty: r.input().clone(), materialize: false }],
                out: r.out().clone(),
                results: vec![(r.out().clone(), false)],
                scratch_per_row: 0,
                threads: Threads::PerElement,
                code,
                function: k.name.clone(),
                reach: extents.ins,
            }
        }
    }
}
