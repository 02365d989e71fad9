//! `graphc compile`: a module ahead of time. For a CPU (the host, or aarch64 objects), an
//! executable, an object with its C header, or a static library (`graphc::aot`); for the GPU
//! target, the loop kernels of the default pipeline's fusions as a `gpu.module` (MLIR) or PTX,
//! one module per graph, the kernels a GPU cannot run yet listed on standard error (they run
//! on a CPU device).

use super::args::{CompileArgs, CompileCpu, CompileEmit};
use super::output::write_output;
use anyhow::{anyhow, bail};
use graphc::aot::{self, AotOptions, Emit};
use graphc::driver::Files;
use graphc::lower::cpu::object::Cpu;
use graphc::lower::mlir;
use graphc_ir::SourceFile;
use std::process::ExitCode;

/// The GPU targets `--target` takes.
const GPU_TARGET: &str = "nvptx64-nvidia-cuda";

pub fn compile(a: &CompileArgs) -> anyhow::Result<ExitCode> {
    if a.target.as_deref() == Some(GPU_TARGET) {
        return compile_gpu(a);
    }
    let emit = match a.emit {
        None | Some(CompileEmit::Exe) => Emit::Exe,
        Some(CompileEmit::Obj) => Emit::Obj,
        Some(CompileEmit::Staticlib) => Emit::StaticLib,
        Some(e @ (CompileEmit::Mlir | CompileEmit::Ptx)) => {
            bail!("--emit {}: GPU kernels, for --target {GPU_TARGET}", format!("{e:?}").to_lowercase())
        }
    };
    let aot = AotOptions {
        emit,
        target: a.target.clone(),
        cpu: match a.cpu {
            CompileCpu::Baseline => Cpu::Baseline,
            CompileCpu::Native => Cpu::Native,
        },
        weights_file: a.weights_file.clone(),
    };
    // Where the files go, checked before the work of compiling.
    let mut files = Files::reading(&a.file, &a.inputs);
    if let Some(ckpt) = &a.restore {
        files.read("the --restore checkpoint", ckpt);
    }
    for (output, path) in aot::output_paths(&a.output, &aot).map_err(|e| anyhow!(e))? {
        files.write(output.what(), Some(&path));
    }
    files.check()?;
    let (file, m) = load_optimized(a)?;
    let graphs: Vec<String> = match &a.graph {
        Some(g) => {
            let g = g.trim_start_matches('@');
            m.graph(g).ok_or_else(|| anyhow!("{}: no graph @{g}", file.name))?;
            vec![g.to_string()]
        }
        None => m.graphs.iter().map(|g| g.name.clone()).collect(),
    };
    let start = std::time::Instant::now();
    let object = aot::compile(&m, &file.name, &graphs, &aot).map_err(|e| anyhow!("{}: {e}", file.name))?;
    let written = aot::write(&object, &a.output, &aot).map_err(|e| anyhow!(e))?;
    let (kernels, nodes) = object.compiled;
    eprintln!(
        "{}: {} graph{}, {nodes} node{}, {kernels} compiled kernel{}, in {:.1} ms -> {}",
        file.name,
        graphs.len(),
        graphc::driver::plural(graphs.len()),
        graphc::driver::plural(nodes),
        graphc::driver::plural(kernels),
        start.elapsed().as_secs_f64() * 1e3,
        written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// The module as the JIT's pipeline leaves it, with `--shape` sizing symbolic dims, the
/// `--input` values fixed and the variables starting from the `--restore` checkpoint.
fn load_optimized(a: &CompileArgs) -> anyhow::Result<(SourceFile, graphc_ir::Module)> {
    let options = graphc::driver::import_options_for(&a.file, &a.inputs, &a.shapes)?;
    let (file, mut m) = graphc::driver::load(&a.file, &options)?;
    graphc::driver::freeze_inputs(&mut m, &a.inputs)?;
    if let Some(path) = &a.restore {
        let loaded = graphc::driver::read_checkpoint(path)?;
        graphc_runtime::checkpoint::into_module(&mut m, &loaded)
            .map_err(|e| anyhow!("--restore {}: {e}", path.display()))?;
    }
    let backend = graphc::backend::backend("jit").map_err(|e| anyhow!(e))?;
    let m = graphc::driver::optimize(backend, m, false, &file)?;
    Ok((file, m))
}

fn compile_gpu(a: &CompileArgs) -> anyhow::Result<ExitCode> {
    let chip = chip(&a.gpu_arch)
        .ok_or_else(|| anyhow!("--gpu-arch {}: expected a compute capability such as sm_80 or sm_90", a.gpu_arch))?;
    // '-' is standard output here.
    if a.output.as_os_str() != "-" {
        Files::reading(&a.file, &a.inputs).write("-o", Some(&a.output)).check()?;
    }
    let (file, m) = load_optimized(a)?;
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
        Some(CompileEmit::Mlir) => text,
        None | Some(CompileEmit::Ptx) => ptx(&file, &text)?,
        Some(e) => bail!(
            "--emit {}: for CPU targets; --target {GPU_TARGET} writes mlir or ptx",
            format!("{e:?}").to_lowercase()
        ),
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
