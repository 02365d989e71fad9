//! `graphc bench`: the time to a session ready to run (the pipeline, placement and
//! partitioning, compilation; a background tier's, which the steps wait for unless told not
//! to), then step times and the process's peak memory; with `--ops`, the per-op profile of
//! the timed steps.

use super::args::BenchArgs;
use anyhow::Context;
use graphc::backend::{CompileOptions, Listing, Listings};
use graphc::driver::{self, import_options_for, prepare, Inputs, Prepared, Timeline};
use graphc_ir::{Module, SourceFile};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `graphc bench`: the time from a loaded module to a session ready to run (placement and
/// partitioning included, compilation once there is a compiled backend), then step times.
pub fn bench(a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let (file, module) = driver::load(&a.file, &import_options_for(&a.file, &a.inputs, &a.shapes)?)?;
    bench_loaded(a, &file, module)
}

fn bench_loaded(a: &BenchArgs, file: &SourceFile, module: Module) -> anyhow::Result<ExitCode> {
    // Compile time: the pass pipeline and the session with its kernels; making the inputs
    // in between is not part of it.
    let start = Instant::now();
    let inputs = Inputs {
        graphs: &a.graphs,
        flags: &a.inputs,
        fetches: &[],
        seed: a.seed,
        memory_limit: a.session.memory_limit,
    };
    let backend = a.session.backend()?;
    let module = driver::optimize(backend, module, false, file)?;
    let optimized = start.elapsed();
    let Prepared { graphs, module, job, placements, .. } =
        prepare(&inputs, &a.session.devices.devices(), file, module)?;
    let start = Instant::now();
    if !a.json {
        for p in &placements {
            say!("{p}");
        }
    }
    // The per-op profile needs every node's start and end: the session records them.
    let options = graphc_runtime::SessionOptions { trace: a.ops, ..a.session.options() };
    let listings = Listings { code: a.dump_code.is_some(), ..Default::default() };
    let compile_options = CompileOptions { listings, ..a.session.compile_options() };
    let (session, compiled, warning) = driver::session(backend, module, options, &compile_options)?;
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    let compile = optimized + start.elapsed();
    if let Some(dir) = &a.dump_code {
        dump_code(dir, &compiled.listings)?;
    }
    let mut timeline = Timeline::new(&job, session.module(), backend).keeping(false, false, a.ops);
    let mut times = Vec::with_capacity(a.iters.min(1 << 16) as usize);
    let total = a.warmup.saturating_add(a.iters);
    // The step from which a background tier's kernels ran (1-based), if it finished: the
    // first, unless the steps do not wait for it.
    let mut tier_from = None;
    if let Some(b) = compiled.background.as_ref().filter(|_| !a.no_tier_wait) {
        // A failure is reported below; the first tier's kernels then run.
        let _ = b.wait();
    }
    for i in 0..total {
        if tier_from.is_none() && compiled.background.as_ref().is_some_and(|b| b.poll().is_some()) {
            tier_from = Some(i + 1);
        }
        let t = Instant::now();
        let outs = match session.run_step(job.requests.clone()) {
            Ok(outs) => outs,
            Err(e) => {
                super::run::report_run_error(&e, file, i + 1, total);
                return Ok(ExitCode::FAILURE);
            }
        };
        if i >= a.warmup {
            times.push(t.elapsed());
            if a.ops {
                timeline.record(session.module(), t, &outs, true);
            }
        }
        // As a serving loop would: the results are used and dropped, their buffers reused.
        session.recycle(outs);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // The background tier: what it compiled and how long it took, once it has finished.
    let tier = compiled.background.as_ref().map(|b| (b.tier, b.wait()));
    let (median, min, max) = (ms(times[times.len() / 2]), ms(times[0]), ms(times[times.len() - 1]));
    let mean = times.iter().map(|&d| ms(d)).sum::<f64>() / times.len() as f64;
    let rss = peak_rss_bytes();
    let ops = timeline.ops.as_ref().map(|o| o.table(session.module(), timeline.graphs(), file, mean / 1e3));
    let names = graphs.iter().map(|g| format!("@{g}")).collect::<Vec<_>>().join(" + ");
    let backend = backend.name();
    if a.json {
        let j = serde_json::json!({
            "file": file.name, "graphs": graphs, "backend": backend,
            "compile_ms": ms(compile), "median_ms": median, "min_ms": min, "max_ms": max, "mean_ms": mean,
            "iters": a.iters, "warmup": a.warmup, "peak_rss_bytes": rss, "placement": placements,
            "tier": tier.as_ref().map(|(name, r)| match r {
                Ok(d) => serde_json::json!({"name": name, "kernels": d.count, "compile_ms": ms(d.compile_time), "from_step": tier_from}),
                Err(e) => serde_json::json!({"name": name, "error": e}),
            }),
            "ops": ops.as_ref().map(|o| o.to_json()),
        });
        say!("{j}");
    } else {
        say!("{names} (backend {backend})");
        say!("  compile      {:>10.3} ms", ms(compile));
        match &tier {
            Some((name, Ok(d))) => {
                let from = tier_from.map_or("after the last step".to_string(), |s| format!("from step {s}"));
                say!(
                    "  {name} tier    {:>10.3} ms   ({} kernels, in the background; in place {from})",
                    ms(d.compile_time),
                    d.count
                )
            }
            Some((name, Err(e))) => say!("  {name} tier    failed: {e} (the first tier's kernels ran)"),
            None => {}
        }
        say!("  step median  {median:>10.3} ms   ({} iterations after {} warm-up)", a.iters, a.warmup);
        say!("  step min     {min:>10.3} ms");
        say!("  step max     {max:>10.3} ms");
        match rss {
            Some(b) => say!("  peak RSS     {:>10.1} MiB", b as f64 / (1 << 20) as f64),
            None => say!("  peak RSS     unknown (no /proc/self/status)"),
        }
        for line in ops.iter().flat_map(|o| o.lines(a.ops_top)) {
            say!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes each kernel's machine code to `DIR/NAME.bin` (`--dump-code`).
fn dump_code(dir: &Path, listings: &[(String, Listing)]) -> anyhow::Result<()> {
    graphc_runtime::fsutil::create_dir(dir).with_context(|| format!("--dump-code: cannot create {}", dir.display()))?;
    for (_, l) in listings {
        if let Some(code) = &l.code {
            let path = dir.join(format!("{}.bin", l.name));
            graphc_runtime::fsutil::write_atomically(&path, |f| std::io::Write::write_all(f, code))
                .with_context(|| format!("--dump-code: cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

/// The process's peak resident set (VmHWM), where /proc says.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
