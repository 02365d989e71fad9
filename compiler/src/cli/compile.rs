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
    let chip = chip(&a.gpu_arch)
        .ok_or_else(|| anyhow!("--gpu-arch {}: expected a compute capability such as sm_80 or sm_90", a.gpu_arch))?;
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
    let (text, kernels, kept) = mlir::gpu_listing(&m, &graph, &chip).map_err(|e| anyhow!("{}: {e}", file.name))?;
    for k in &kept {
        eprintln!("note: stays on a CPU device: {k}");
    }
    let out = match a.emit {
        CompileEmit::Mlir => text,
        CompileEmit::Ptx => ptx(&file, &text)?,
    };
    write_output(Some(&a.output), &out)?;
    eprintln!("@{graph}: {} GPU kernel{} for {chip}", kernels.len(), graphc::driver::plural(kernels.len()));
    Ok(ExitCode::SUCCESS)
}

/// `sm_N` (N at least 50, in canonical digits) or `sm_Na` (an architecture-specific
/// variant), as NVVM spells it; None for anything else.
fn chip(arch: &str) -> Option<String> {
    let n = arch.strip_prefix("sm_")?;
    let (digits, suffix) = n.strip_suffix('a').map_or((n, ""), |d| (d, "a"));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (n >= 50).then(|| format!("sm_{n}{suffix}"))
}

#[cfg(feature = "llvm")]
fn ptx(file: &SourceFile, text: &str) -> anyhow::Result<String> {
    mlir::ptx::ptx(text).map_err(|e| anyhow!("{}: {e}", file.name))
}

#[cfg(not(feature = "llvm"))]
fn ptx(_: &SourceFile, _: &str) -> anyhow::Result<String> {
    bail!("--emit ptx needs MLIR: this graphc was built without the llvm feature (--emit mlir works)")
}
