//! `graphc simulate`: places and partitions on --devices, then predicts each graph's step
//! time and the devices' utilization from the cost model (no kernel runs).

use super::args::SimulateArgs;
use super::output::Report;
use anyhow::anyhow;
use graphc::driver::{self, plural};
use graphc::placement::cost::CostModel;
use graphc::placement::partition::Partitioned;
use graphc::placement::simulate::simulate as simulate_step;
use serde_json::json;
use std::process::ExitCode;

/// `graphc simulate`: the predicted step time and device utilization of each graph.
pub fn simulate(a: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let mut files = driver::Files::reading(&a.file, &[]);
    for (what, path) in a.devices.files() {
        files.read(what, path);
    }
    files.write("--trace", a.trace.as_deref()).check()?;
    let (file, module) = super::ir::load(&a.file)?;
    let file = &file;
    let wanted: Vec<String> = a.graphs.iter().map(|g| g.trim_start_matches('@').to_string()).collect();
    for w in &wanted {
        if module.graph(w).is_none() {
            let names: Vec<String> = module.graphs.iter().map(|g| format!("@{}", g.name)).collect();
            anyhow::bail!("{} has no graph @{w}; its graphs are {}", file.name, names.join(", "));
        }
    }
    let backend = graphc::backend::backend(&a.backend).map_err(|e| anyhow!(e))?;
    let module = driver::optimize(backend, module, false, file)?;
    let already_partitioned = module.is_partitioned();
    let placed = driver::place_and_partition(a.devices.devices().context()?.with_backend(backend), file, module)?;
    let cost = CostModel::new(&placed.ctx.cluster, placed.ctx.profile.as_ref());
    // A module of partitions already: they make one step together.
    let groups = if already_partitioned && wanted.is_empty() {
        vec![Partitioned {
            graph: placed.module.graphs.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join("+"),
            parts: placed.groups.iter().flat_map(|g| g.parts.clone()).collect(),
        }]
    } else {
        placed.groups.clone()
    };
    let source = if placed.ctx.profile.is_some() { "profile and estimates" } else { "estimates" };
    let mut report = Report::new(a.json);
    report.set("file", json!(file.name));
    report.set("backend", json!(backend.name()));
    report.set("source", json!(source));
    report.set("graphs", json!([]));
    let mut spans = Vec::new();
    let mut tracks: Vec<String> = placed.ctx.cluster.devices.iter().map(|d| d.name.clone()).collect();
    tracks.push(graphc::trace::TRANSFERS.into());
    let mut offset_us = 0.0;
    for group in &groups {
        if !wanted.is_empty() && !wanted.contains(&group.graph) {
            continue;
        }
        let p = simulate_step(&placed.module, group, &cost).map_err(|e| anyhow!("{}: {e}", file.name))?;
        let devices: Vec<serde_json::Value> = p
            .devices
            .iter()
            .zip(p.utilization())
            .map(|((name, busy, nodes), (_, util))| {
                json!({"name": name, "busy_ms": busy * 1e3, "utilization": util, "nodes": nodes})
            })
            .collect();
        let value = json!({
            "graph": group.graph, "step_time_ms": p.step_time * 1e3, "devices": devices,
            "transfers": p.transfers, "transfer_bytes": p.transfer_bytes,
        });
        report.push("graphs", value, || {
            let mut lines = vec![
                format!(
                    "@{}: predicted step time {:.3} ms on {} device{} (from {source})",
                    group.graph,
                    p.step_time * 1e3,
                    p.devices.len(),
                    plural(p.devices.len())
                ),
                format!("  {:<12} {:>10} {:>12} {:>7}", "device", "busy (ms)", "utilization", "nodes"),
            ];
            for ((name, busy, nodes), (_, util)) in p.devices.iter().zip(p.utilization()) {
                lines.push(format!("  {:<12} {:>10.3} {:>11.1}% {:>7}", name, busy * 1e3, util * 100.0, nodes));
            }
            lines.push(format!("  transfers: {} ({} bytes)", p.transfers, p.transfer_bytes));
            lines.join("\n")
        });
        // Graphs follow one another on the timeline.
        for mut s in p.spans {
            s.start_us += offset_us;
            s.args.push(("step".into(), group.graph.clone()));
            spans.push(s);
        }
        offset_us += p.step_time * 1e6;
    }
    if let Some(path) = &a.trace {
        let text = graphc::trace::chrome_trace(&tracks, &spans);
        super::output::write_file(path, &text)?;
        report.add("trace", json!(path.display().to_string()), || format!("predicted timeline -> {}", path.display()));
    }
    report.finish();
    Ok(ExitCode::SUCCESS)
}
