//! From a loaded module to a session: the lowerings every backend runs and the backend's
//! pipeline, then the backend's kernels in a session of the runtime.

use crate::backend::{Backend, CompileOptions, Compiled, LOWERINGS};
use crate::passes::PassManager;
use graphc_ir::{DeviceSpec, Module, SourceFile};
use graphc_runtime::{Session, SessionOptions};

/// The module as `backend` runs it: the lowerings every backend runs, then the backend's
/// pipeline. `as_written` skips the backend's pipeline (`--fetch` of a value fusion may
/// absorb).
pub fn optimize(backend: &dyn Backend, mut m: Module, as_written: bool, file: &SourceFile) -> anyhow::Result<Module> {
    let pipeline = if as_written { "" } else { backend.pipeline() };
    for p in [LOWERINGS, pipeline] {
        if !p.is_empty() {
            let pm = PassManager::new(p).map_err(|e| anyhow::anyhow!(e))?;
            pm.run(&mut m, &mut |_| {}).map_err(|e| anyhow::anyhow!("{}: {e}", file.name))?;
        }
    }
    Ok(m)
}

/// A session running `m` with `backend`'s kernels, compiled with `compile`, each graph on
/// the executor the backend gives for its device. When the backend cannot compile (a host
/// Cranelift cannot target, or a compiler bug) the interpreter runs everything, and the
/// warning says why.
pub fn session(
    backend: &dyn Backend,
    m: Module,
    options: SessionOptions,
    compile: &CompileOptions,
) -> anyhow::Result<(Session, Compiled, Option<String>)> {
    let (compiled, warning) = match backend.compile_with(&m, compile) {
        Ok(c) => (c, None),
        Err(e) => (
            Compiled::default(),
            Some(format!("{} compilation failed ({e}); running on the interpreter", backend.name().to_uppercase())),
        ),
    };
    // Each graph's device: a partition's nodes all carry it.
    let devices: Vec<(String, DeviceSpec)> = m
        .graphs
        .iter()
        .filter_map(|g| {
            let device = g.regions[g.body].nodes.iter().find_map(|&n| g.nodes[n].device.clone())?;
            Some((g.name.clone(), device))
        })
        .collect();
    let mut session = match &compiled.kernels {
        Some(k) => Session::with_compiled(m, options, k.clone()),
        None => Session::new(m, options),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (graph, device) in &devices {
        if let Some(e) = backend.executor(device, &compiled) {
            session.set_executor(graph, e).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok((session, compiled, warning))
}
