//! The per-op profile (`graphc bench --ops`, `graphc run --profile-ops`): each node's time per
//! measured step, what ran it (a compiled kernel of which tier, a device's kernel, the CPU
//! runtime's kernel for a plan without generated code, a reference kernel of the interpreter, the interpreter itself, or nothing: a step-invariant
//! value kept from an earlier step), slowest first.
//!
//! A node's time is its own: a loop's or a branch's excludes the nodes of its regions, which
//! have rows of their own; a fusion is one row (the nodes of its region, run one by one when it
//! has no compiled kernel, are part of its time). Shares are of the time spent in nodes, so
//! they sum to 100%; the time between nodes (the interpreter's own) is said beside.

use crate::lower::plan;
use graphc_ir::{Graph, Module, Node, Op, SourceFile, Value};
use graphc_runtime::{Ran, RunOutput};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// Node times summed over the measured steps, per request and node.
#[derive(Debug, Default)]
pub struct OpTimes {
    nodes: HashMap<(usize, Node), Times>,
    /// Measured steps recorded.
    pub steps: u64,
    /// Node executions the runtime ran but did not record (a step records a bounded number):
    /// the rows leave them out.
    pub unrecorded: u64,
}

#[derive(Debug, Default)]
struct Times {
    secs: f64,
    /// Executions and their own time per path, by its label.
    paths: BTreeMap<&'static str, (u64, f64)>,
}

/// The label of the time an op that blocks (a recv, a queue's dequeue or enqueue) spends in
/// the interpreter: mostly waiting for another graph or thread, not work.
pub const WAITING: &str = "waiting";

/// The label of a path in the profile, as the table and the JSON say it, for a node of `op`.
pub fn path_label(ran: Ran, op: Op) -> &'static str {
    match ran {
        Ran::Interpreter if matches!(op, Op::Recv | Op::Dequeue | Op::Enqueue) => WAITING,
        Ran::Reference => REFERENCE,
        Ran::Compiled(Some(tier)) | Ran::Device(Some(tier)) => tier,
        Ran::Compiled(None) => "compiled",
        Ran::Device(None) => "device",
        Ran::Kept => "kept",
        Ran::Interpreter => "interpreter",
    }
}

/// The most operands a row of the table shows the types of.
const SHOWN_OPERANDS: usize = 3;

/// The CPU tiers, whose kernels without code of their own are the CPU runtime's.
const CPU_TIERS: [&str; 2] = ["cranelift", "llvm"];

/// The label of a kernel of the CPU runtime (`graphc-cpu-runtime`) without generated code.
pub const CPU_RUNTIME: &str = "cpu-runtime";

/// The label of the reference kernels' path.
pub const REFERENCE: &str = "reference";

impl OpTimes {
    /// Adds one measured step's node executions; `graphs` names each request's graph.
    pub fn record(&mut self, m: &Module, graphs: &[String], outs: &[RunOutput]) {
        self.steps += 1;
        for (i, o) in outs.iter().enumerate() {
            self.unrecorded += o.events_dropped;
            let Some(g) = graphs.get(i).and_then(|name| m.graph(name)) else { continue };
            // Per depth: the time of the nodes ended at that depth since their parent's last
            // sibling, which their parent (ending next, one level up) does not count as its own.
            let mut inner: Vec<f64> = Vec::new();
            for e in &o.events {
                let secs = e.end.saturating_duration_since(e.start).as_secs_f64();
                if inner.len() < e.depth + 2 {
                    inner.resize(e.depth + 2, 0.0);
                }
                let nested = std::mem::take(&mut inner[e.depth + 1]);
                inner[e.depth] += secs;
                if in_fusion(g, e.node) {
                    continue;
                }
                let own = if g.nodes[e.node].op == Op::Fusion { secs } else { (secs - nested).max(0.0) };
                let t = self.nodes.entry((i, e.node)).or_default();
                t.secs += own;
                let p = t.paths.entry(path_label(e.ran, g.nodes[e.node].op)).or_default();
                p.0 += 1;
                p.1 += own;
            }
        }
    }

    /// The rows, slowest first, and the sums.
    pub fn table(&self, m: &Module, graphs: &[String], file: &SourceFile, step_secs: f64) -> OpTable {
        let steps = self.steps.max(1) as f64;
        let total: f64 = self.nodes.values().map(|t| t.secs).sum::<f64>() / steps;
        let share = |secs: f64| if total > 0.0 { 100.0 * secs / total } else { 0.0 };
        let mut rows: Vec<OpRow> = self
            .nodes
            .iter()
            .filter_map(|(&(i, n), t)| {
                let graph = graphs.get(i)?;
                let g = m.graph(graph)?;
                // A CPU tier's kernel without code of its own is the CPU runtime's (a lone
                // matrix product, convolution or pool, a column reduction, a concat).
                let no_code = plan::kernel_plan(g, n).is_some_and(|k| k.code().is_none());
                let mut paths: Vec<(&'static str, u64, f64)> = Vec::new();
                for (&p, &(runs, secs)) in &t.paths {
                    let p = if no_code && CPU_TIERS.contains(&p) { CPU_RUNTIME } else { p };
                    match paths.iter_mut().find(|q| q.0 == p) {
                        Some(q) => (q.1, q.2) = (q.1 + runs, q.2 + secs),
                        None => paths.push((p, runs, secs)),
                    }
                }
                paths.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                let ms = 1e3 * t.secs / steps;
                Some(OpRow {
                    graph: graph.clone(),
                    node: node_name(g, n),
                    location: location(g, n, file),
                    op: op_name(g, n),
                    operands: g.nodes[n].operands.iter().map(|&v| g.values[v].ty.to_string()).collect(),
                    results: g.nodes[n].results.iter().map(|&v| g.values[v].ty.to_string()).collect(),
                    path: paths.iter().map(|(p, ..)| *p).collect::<Vec<_>>().join("/"),
                    paths: paths.iter().map(|&(p, runs, secs)| (p, runs, 1e3 * secs / steps)).collect(),
                    ms,
                    share: share(ms / 1e3),
                })
            })
            .collect();
        rows.sort_by(|a, b| b.ms.total_cmp(&a.ms).then_with(|| a.node.cmp(&b.node)));
        let mut by_path: BTreeMap<&'static str, f64> = BTreeMap::new();
        for (p, _, ms) in rows.iter().flat_map(|r| &r.paths) {
            *by_path.entry(p).or_default() += share(ms / 1e3);
        }
        OpTable {
            rows,
            node_ms: total * 1e3,
            step_ms: step_secs * 1e3,
            steps: self.steps,
            by_path,
            unrecorded: self.unrecorded,
        }
    }
}

/// Whether node `n` is inside a fusion's region (its time is the fusion's).
fn in_fusion(g: &Graph, n: Node) -> bool {
    let mut region = g.nodes[n].parent;
    while let Some(p) = g.regions[region].parent {
        if g.nodes[p].op == Op::Fusion {
            return true;
        }
        region = g.nodes[p].parent;
    }
    false
}

/// A node as the table names it: the value it defines (`%x`), or its op.
fn node_name(g: &Graph, n: Node) -> String {
    let nd = &g.nodes[n];
    let named = |v: Value| g.values[v].name.as_ref().map(|name| format!("%{name}"));
    // A fusion's results are the pass's own; what it computes is named inside: the value its
    // region yields first (an ONNX model's output name of the op it ends with).
    let inner = || {
        let r = *nd.regions.first()?;
        named(*g.regions[r].yields.first()?)
    };
    nd.results
        .first()
        .and_then(|&v| named(v))
        .or_else(|| (nd.op == Op::Fusion).then(inner).flatten())
        .unwrap_or_else(|| nd.op.name().to_string())
}

/// Where the node is written, `FILE:LINE:COL`, when it has a place in the text (not a node a
/// pass made up, nor one of an imported ONNX model, whose text is printed from the import).
fn location(g: &Graph, n: Node, file: &SourceFile) -> Option<String> {
    let span = g.nodes[n].span;
    if span.end <= span.start || super::is_onnx(std::path::Path::new(&file.name)) {
        return None;
    }
    let (line, col) = file.line_col(span.start as usize);
    Some(format!("{}:{line}:{col}", file.name))
}

/// The op, and for a fusion the ops it holds but its constants: `fusion(mul, add, tanh)`.
fn op_name(g: &Graph, n: Node) -> String {
    let nd = &g.nodes[n];
    if nd.op != Op::Fusion {
        return nd.op.name().to_string();
    }
    let mut ops = Vec::new();
    let mut stack: Vec<_> = nd.regions.iter().rev().copied().collect();
    while let Some(r) = stack.pop() {
        for &inner in &g.regions[r].nodes {
            if g.nodes[inner].op != Op::Constant {
                ops.push(g.nodes[inner].op.name());
            }
            stack.extend(g.nodes[inner].regions.iter().rev());
        }
    }
    format!("fusion({})", ops.join(", "))
}

/// One row of the profile.
#[derive(Clone, Debug)]
pub struct OpRow {
    pub graph: String,
    pub node: String,
    pub location: Option<String>,
    pub op: String,
    pub operands: Vec<String>,
    pub results: Vec<String>,
    /// What ran it: the label of each path it took in the measured steps, most executions
    /// first, joined by '/' (`llvm/cranelift`: a kernel the background tier replaced).
    pub path: String,
    /// Each path with its executions and its time per step (ms).
    pub paths: Vec<(&'static str, u64, f64)>,
    /// Mean time per measured step.
    pub ms: f64,
    /// Percent of the time in nodes.
    pub share: f64,
}

/// The profile: rows slowest first, and the sums.
#[derive(Debug)]
pub struct OpTable {
    pub rows: Vec<OpRow>,
    /// Time in nodes per step (the rows' sum).
    pub node_ms: f64,
    /// The mean measured step.
    pub step_ms: f64,
    pub steps: u64,
    /// Percent of the time in nodes per path label.
    pub by_path: BTreeMap<&'static str, f64>,
    /// Node executions not recorded, in all the measured steps (see [`OpTimes::unrecorded`]).
    pub unrecorded: u64,
}

impl OpTable {
    /// The share of the reference kernels, in percent.
    pub fn reference_share(&self) -> f64 {
        self.by_path.get(REFERENCE).copied().unwrap_or(0.0)
    }

    /// The table's lines: the `top` slowest rows, the rest summed as one `others` row, then
    /// the share per path and the reference kernels' share.
    pub fn lines(&self, top: usize) -> Vec<String> {
        let several_graphs = self.rows.iter().any(|r| r.graph != self.rows[0].graph);
        let node = |r: &OpRow| {
            let name = if several_graphs { format!("@{}: {}", r.graph, r.node) } else { r.node.clone() };
            match &r.location {
                Some(l) => format!("{name} ({l})"),
                None => name,
            }
        };
        // The first operands' types (a fusion may take many: the JSON has them all).
        let shapes = |r: &OpRow| {
            let mut operands = r.operands.iter().take(SHOWN_OPERANDS).cloned().collect::<Vec<_>>().join(", ");
            if r.operands.len() > SHOWN_OPERANDS {
                operands.push_str(&format!(", +{} more", r.operands.len() - SHOWN_OPERANDS));
            }
            match operands.is_empty() {
                true => format!("-> {}", r.results.join(", ")),
                false => format!("{operands} -> {}", r.results.join(", ")),
            }
        };
        let mut cells: Vec<[String; 6]> =
            vec![["node".into(), "op".into(), "shapes".into(), "ran on".into(), "ms/step".into(), "share".into()]];
        for r in self.rows.iter().take(top) {
            cells.push([
                node(r),
                r.op.clone(),
                shapes(r),
                r.path.clone(),
                format!("{:.4}", r.ms),
                format!("{:.1}%", r.share),
            ]);
        }
        if self.rows.len() > top {
            let rest = &self.rows[top..];
            let ms: f64 = rest.iter().map(|r| r.ms).sum();
            let share: f64 = rest.iter().map(|r| r.share).sum();
            let mut paths: Vec<&str> = rest.iter().flat_map(|r| r.paths.iter().map(|(p, ..)| *p)).collect();
            paths.sort();
            paths.dedup();
            cells.push([
                format!("others ({} nodes)", rest.len()),
                String::new(),
                String::new(),
                paths.join("/"),
                format!("{ms:.4}"),
                format!("{share:.1}%"),
            ]);
        }
        let widths: Vec<usize> =
            (0..6).map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        // Graphs of one step (partitions) run side by side: their nodes' times overlap.
        let rest = if several_graphs && self.node_ms > self.step_ms {
            "its graphs ran side by side"
        } else {
            "the rest: the interpreter between nodes"
        };
        let mut out = vec![format!(
            "per-op profile ({} measured step{}): {:.3} ms per step in {} nodes, of a {:.3} ms step ({rest})",
            self.steps,
            super::plural(self.steps as usize),
            self.node_ms,
            self.rows.len(),
            self.step_ms
        )];
        for row in &cells {
            let mut line = String::from(" ");
            for (c, cell) in row.iter().enumerate() {
                // Numbers right-aligned, words left.
                if c >= 4 {
                    line.push_str(&format!("  {cell:>w$}", w = widths[c]));
                } else {
                    line.push_str(&format!("  {cell:<w$}", w = widths[c]));
                }
            }
            out.push(line.trim_end().to_string());
        }
        let mut by_path: Vec<(&str, f64)> = self.by_path.iter().map(|(&p, &s)| (p, s)).collect();
        by_path.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.push(format!(
            "by path: {}",
            by_path.iter().map(|(p, s)| format!("{p} {s:.1}%")).collect::<Vec<_>>().join(", ")
        ));
        out.push(format!("reference kernels: {:.1}% of the step (of its time in nodes)", self.reference_share()));
        if self.unrecorded > 0 {
            out.push(format!(
                "warning: {} node executions were not recorded (a step's record of its nodes is bounded): the rows leave them out",
                self.unrecorded
            ));
        }
        out
    }

    /// The whole profile as JSON: every row.
    pub fn to_json(&self) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                json!({
                    "graph": r.graph, "node": r.node, "location": r.location, "op": r.op,
                    "operands": r.operands, "results": r.results, "path": r.path,
                    "paths": r.paths.iter().map(|(p, c, ms)| json!({"path": p, "executions": c, "ms_per_step": ms})).collect::<Vec<_>>(),
                    "ms_per_step": r.ms, "share_percent": r.share,
                })
            })
            .collect();
        json!({
            "steps": self.steps, "node_ms_per_step": self.node_ms, "step_ms": self.step_ms,
            "by_path_percent": self.by_path, "reference_percent": self.reference_share(),
            "unrecorded_executions": self.unrecorded, "rows": rows,
        })
    }
}
