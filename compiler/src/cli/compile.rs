//! `graphc compile`: a graph's kernels ahead of time. So far the GPU target: the loop kernels
//! of the default pipeline's fusions as a `gpu.module` (MLIR) or PTX, one module per graph;
//! the kernels a GPU cannot run yet are listed on standard error (they run on a CPU device).

use super::args::{CompileArgs, CompileEmit};
use super::ir::load;
use super::output::write_output;
use anyhow::{anyhow, bail};
use graphc::lower::mlir;
use graphc_ir::SourceFile;
use std::process::ExitCode;

/// The GPU targets `--target` takes.
const GPU_TARGET: &str = "nvptx64-nvidia-cuda";

pub fn compile(a: &CompileArgs) -> anyhow::Result<ExitCode> {
    if a.target != GPU_TARGET {
        bail!("--target {}: graphc compile supports only {GPU_TARGET} so far", a.target);
    }
    let arch = a.gpu_arch.strip_prefix("sm_").and_then(|n| n.parse::<u32>().ok());
    if arch.is_none_or(|n| n < 50) {
        bail!("--gpu-arch {}: expected a compute capability such as sm_80 or sm_90", a.gpu_arch);
    }
    let (file, m) = load(&a.file)?;
    let backend = graphc::backend::backend("jit").map_err(|e| anyhow!(e))?;
    let m = graphc::driver::optimize(backend, m, false, &file)?;
    let graph = match (&a.graph, m.graphs.as_slice()) {
        (Some(g), _) => {
            m.graph(g).ok_or_else(|| anyhow!("{}: no graph @{g}", file.name))?;
            g.clone()
        }
        (None, [only]) => only.name.clone(),
        (None, graphs) => {
            let names: Vec<String> = graphs.iter().map(|g| format!("@{}", g.name)).collect();
            bail!("{}: {} graphs ({}); choose one with --graph", file.name, graphs.len(), names.join(", "))
        }
    };
    let (text, kernels, kept) =
        mlir::gpu_listing(&m, &graph, &a.gpu_arch).map_err(|e| anyhow!("{}: {e}", file.name))?;
    for k in &kept {
        eprintln!("note: stays on a CPU device: {k}");
    }
    let out = match a.emit {
        CompileEmit::Mlir => text,
        CompileEmit::Ptx => ptx(&file, &text)?,
    };
    write_output(Some(&a.output), &out)?;
    eprintln!("@{graph}: {} GPU kernel{} for {}", kernels.len(), graphc::driver::plural(kernels.len()), a.gpu_arch);
    Ok(ExitCode::SUCCESS)
}

#[cfg(feature = "llvm")]
fn ptx(file: &SourceFile, text: &str) -> anyhow::Result<String> {
    mlir::ptx::ptx(text).map_err(|e| anyhow!("{}: {e}", file.name))
}

#[cfg(not(feature = "llvm"))]
fn ptx(_: &SourceFile, _: &str) -> anyhow::Result<String> {
    bail!("--emit ptx needs MLIR: this graphc was built without the llvm feature (--emit mlir works)")
}
