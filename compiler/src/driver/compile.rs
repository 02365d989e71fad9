//! From a loaded module to a session: the lowerings every backend runs and the backend's
//! pipeline, then the backend's kernels in a session of the runtime.

use super::report::Reported;
use crate::backend::{Backend, CompileOptions, Compiled, Isa, LOWERINGS};
use crate::passes::{PassContext, PassManager};
use graphc_ir::{DeviceSpec, Graph, Module, SourceFile};
use graphc_runtime::{Session, SessionOptions};

/// The module as `backend` runs it: the lowerings every backend runs, then the backend's
/// pipeline. `as_written` skips the backend's pipeline (`--fetch` of a value fusion may
/// absorb).
pub fn optimize(
    backend: &'static dyn Backend,
    mut m: Module,
    as_written: bool,
    file: &SourceFile,
) -> anyhow::Result<Module> {
    let pipeline = if as_written { "" } else { backend.pipeline() };
    let ctx = PassContext::default().with_backend(backend);
    let started = std::time::Instant::now();
    for p in [LOWERINGS, pipeline] {
        if !p.is_empty() {
            let pm = PassManager::with_context(p, &ctx).map_err(|e| anyhow::anyhow!(e))?;
            match pm.run(&mut m, &mut |_| {}) {
                Ok(timings) => {
                    for t in timings {
                        let changed = if t.changed { "changed the module" } else { "no change" };
                        tracing::debug!("pass {}: {:.3} ms, {changed}", t.pass, t.time.as_secs_f64() * 1e3);
                    }
                }
                Err(e) if !e.diagnostics.is_empty() => {
                    return Err(Reported(e.diagnostics.iter().map(|d| d.render(file)).collect()).into());
                }
                Err(e) => anyhow::bail!("{}: {e}", file.name),
            }
        }
    }
    let nodes: usize = m.graphs.iter().map(|g| g.node_count()).sum();
    let passes = if pipeline.is_empty() { LOWERINGS.to_string() } else { format!("{LOWERINGS},{pipeline}") };
    tracing::info!(
        "optimized for backend {} ({passes}): {nodes} nodes, {:.3} ms",
        backend.name(),
        started.elapsed().as_secs_f64() * 1e3
    );
    for w in ctx.take_warnings() {
        eprint!("{}", w.render(file));
    }
    Ok(m)
}

/// A session running `m` with `backend`'s kernels, compiled with `compile`, each partition
/// on the executor the backend gives for its device ([`compile_kernels`], then [`session_for`]).
pub fn session(
    backend: &dyn Backend,
    m: Module,
    options: SessionOptions,
    compile_options: &CompileOptions,
) -> anyhow::Result<(Session, Compiled, Option<String>)> {
    let started = std::time::Instant::now();
    let (compiled, warning) = compile_kernels(backend, &m, compile_options)?;
    let session = session_for(backend, m, options, &compiled, warning.is_some())?;
    tracing::info!("session ready (backend {}) in {:.3} ms", backend.name(), started.elapsed().as_secs_f64() * 1e3);
    Ok((session, compiled, warning))
}

/// `backend`'s kernels for `m`. When the backend cannot compile with the default instruction
/// set (a host Cranelift cannot target, or a compiler bug) the interpreter runs everything,
/// and the warning says why; an instruction set asked for (`--isa`) that cannot be had is an
/// error.
pub fn compile_kernels(
    backend: &dyn Backend,
    m: &Module,
    compile: &CompileOptions,
) -> anyhow::Result<(Compiled, Option<String>)> {
    match backend.compile_with(m, compile) {
        Ok(c) => {
            tracing::info!(
                "compiled with backend {}: {} nodes run compiled code, {:.3} ms",
                backend.name(),
                c.count,
                c.compile_time.as_secs_f64() * 1e3
            );
            Ok((c, None))
        }
        Err(e) if compile.isa != Isa::Native => anyhow::bail!("cannot compile for --isa {}: {e}", compile.isa.name()),
        Err(e) => Ok((
            Compiled::default(),
            Some(format!("{} compilation failed ({e}); running on the interpreter", backend.name().to_uppercase())),
        )),
    }
}

/// A session of `m` (the module `compiled` was made from, or a clone of it: each session has
/// its own variables and queues) on `compiled`'s kernels, each partition on the executor the
/// backend gives for its device; `interpreted`: the backend could not compile, so the
/// interpreter runs everything.
pub fn session_for(
    backend: &dyn Backend,
    m: Module,
    options: SessionOptions,
    compiled: &Compiled,
    interpreted: bool,
) -> anyhow::Result<Session> {
    // Backend executors only for what the backend compiled, and only for partitions (graphs
    // whose every node is on one device) and graphs not placed at all.
    let devices: Vec<(String, Option<DeviceSpec>)> = if interpreted {
        Vec::new()
    } else {
        m.graphs.iter().filter_map(|g| Some((g.name.clone(), partition_device(g)?))).collect()
    };
    let mut session = match &compiled.kernels {
        Some(k) => Session::with_compiled(m, options, k.clone()),
        None => Session::new(m, options),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (graph, device) in &devices {
        if let Some(e) = backend.executor(device.as_ref(), compiled) {
            session.set_executor(graph, e).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok(session)
}

/// The device every node of the graph's body is on: `Some(None)` when no node is placed,
/// `None` when they are on different devices, or some are placed and some not.
fn partition_device(g: &Graph) -> Option<Option<DeviceSpec>> {
    let mut devices = g.regions[g.body].nodes.iter().map(|&n| &g.nodes[n].device);
    let first = devices.next().cloned().unwrap_or_default();
    devices.all(|d| *d == first).then_some(first)
}
