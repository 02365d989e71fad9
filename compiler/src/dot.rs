//! Graphviz DOT output: one cluster per graph, nested clusters for the regions of fusion, cond
//! and while nodes; edges for data (solid) and `after` dependencies (dashed); send/recv pairs
//! joined by a bold edge across graphs. Nodes are filled with one color per device (a legend
//! lists them); send and recv nodes are drawn as arrows.

use graphc_ir::{Graph, Module, Node, Op, Region, ValueDef};
use std::collections::HashMap;
use std::fmt::Write;

/// Fill colors for devices, in order of first appearance (Graphviz color names).
const PALETTE: &[&str] =
    &["lightblue", "palegreen", "lightsalmon", "plum", "khaki", "lightcyan", "pink", "wheat", "lightgray"];

/// Every device named in the module, in order of first appearance.
fn devices(m: &Module) -> Vec<String> {
    let mut seen = Vec::new();
    for g in &m.graphs {
        for n in g.walk() {
            if let Some(d) = g.nodes[n].device.as_ref().filter(|d| !d.is_empty()) {
                let d = d.to_string();
                if !seen.contains(&d) {
                    seen.push(d);
                }
            }
        }
    }
    seen
}

pub fn to_dot(m: &Module) -> String {
    let mut out =
        String::from("digraph module {\n  compound=true;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    let devices = devices(m);
    if !devices.is_empty() {
        out.push_str("  subgraph cluster_legend {\n    label=\"devices\";\n");
        for (i, d) in devices.iter().enumerate() {
            let _ = writeln!(
                out,
                "    legend_{i} [label=\"{}\", style=filled, fillcolor={}];",
                esc(d),
                PALETTE[i % PALETTE.len()]
            );
        }
        out.push_str("  }\n");
    }
    let mut sends: HashMap<String, String> = HashMap::new();
    let mut recvs: HashMap<String, String> = HashMap::new();
    for (gi, g) in m.graphs.iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_g{gi} {{\n    label=\"@{}\";", esc(&g.name));
        region(&mut out, g, gi, g.body, 2, &devices);
        let _ = writeln!(out, "  }}");
        edges(&mut out, g, gi);
        for n in g.walk() {
            let nd = &g.nodes[n];
            if let Some(key) = nd.attrs.str("key") {
                let id = node_id(gi, n);
                match nd.op {
                    Op::Send => sends.insert(key.to_string(), id),
                    Op::Recv => recvs.insert(key.to_string(), id),
                    _ => None,
                };
            }
        }
    }
    for (key, s) in &sends {
        if let Some(r) = recvs.get(key) {
            let label = key.split(';').next().unwrap_or(key);
            let _ = writeln!(out, "  {s} -> {r} [style=bold, color=blue, penwidth=2, label=\"{}\"];", esc(label));
        }
    }
    out.push_str("}\n");
    out
}

fn node_id(gi: usize, n: Node) -> String {
    format!("g{gi}_{n}")
}

fn region(out: &mut String, g: &Graph, gi: usize, r: Region, depth: usize, devices: &[String]) {
    let pad = "  ".repeat(depth);
    for (i, &p) in g.regions[r].params.iter().enumerate() {
        let name = g.values[p].name.clone().unwrap_or_else(|| format!("arg{i}"));
        let _ = writeln!(
            out,
            "{pad}g{gi}_{p} [shape=ellipse, label=\"%{}\\n{}\"];",
            esc(&name),
            esc(&g.values[p].ty.to_string())
        );
    }
    for &n in &g.regions[r].nodes {
        let nd = &g.nodes[n];
        let results: Vec<String> = nd
            .results
            .iter()
            .map(|&v| format!("%{}", g.values[v].name.clone().unwrap_or_else(|| v.to_string())))
            .collect();
        let types: Vec<String> = nd.results.iter().map(|&v| g.values[v].ty.to_string()).collect();
        let mut label = format!("{} = {}\\n{}", results.join(", "), nd.op.name(), types.join(", "));
        if let Some(d) = &nd.device {
            let _ = write!(label, "\\n{d}");
        }
        let device = nd.device.as_ref().and_then(|d| devices.iter().position(|x| *x == d.to_string()));
        let shape = match nd.op {
            Op::Send => ", shape=rarrow",
            Op::Recv => ", shape=larrow",
            Op::Fusion => ", peripheries=2",
            op if op.is_stateful() => ", shape=box3d",
            _ => "",
        };
        let fill = match (device, nd.op) {
            (Some(i), _) => format!(", style=filled, fillcolor={}", PALETTE[i % PALETTE.len()]),
            (None, Op::Fusion) => ", style=filled, fillcolor=lightyellow".to_string(),
            (None, op) if op.is_stateful() => ", style=filled, fillcolor=lightpink".to_string(),
            _ => String::new(),
        };
        let style = format!("{shape}{fill}");
        let _ = writeln!(out, "{pad}{} [label=\"{}\"{style}];", node_id(gi, n), esc_label(&label));
        for &sub in &nd.regions {
            let _ = writeln!(
                out,
                "{pad}subgraph cluster_g{gi}_{sub} {{\n{pad}  label=\"{} {}\";",
                nd.op.name(),
                esc(&g.regions[sub].label)
            );
            region(out, g, gi, sub, depth + 1, devices);
            let _ = writeln!(out, "{pad}}}");
        }
    }
}

fn edges(out: &mut String, g: &Graph, gi: usize) {
    let source = |v| match g.values[v].def {
        ValueDef::Result(p, _) => node_id(gi, p),
        ValueDef::Param(..) => format!("g{gi}_{v}"),
    };
    for n in g.walk() {
        let nd = &g.nodes[n];
        for &v in &nd.operands {
            let _ = writeln!(out, "  {} -> {};", source(v), node_id(gi, n));
        }
        for &v in &nd.control_deps {
            let _ = writeln!(out, "  {} -> {} [style=dashed];", source(v), node_id(gi, n));
        }
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Escapes quotes but keeps the `\n` line breaks the label was built with.
fn esc_label(s: &str) -> String {
    s.replace('"', "\\\"")
}
