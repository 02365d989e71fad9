//! Graphviz DOT output: one cluster per graph, nested clusters for the regions of fusion, cond
//! and while nodes; edges for data (solid) and `after` dependencies (dashed); send/recv pairs
//! joined by a bold edge across graphs.

use graphc_ir::{Graph, Module, Node, Op, Region, ValueDef};
use std::collections::HashMap;
use std::fmt::Write;

pub fn to_dot(m: &Module) -> String {
    let mut out =
        String::from("digraph module {\n  compound=true;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    let mut sends: HashMap<String, String> = HashMap::new();
    let mut recvs: HashMap<String, String> = HashMap::new();
    for (gi, g) in m.graphs.iter().enumerate() {
        let _ = writeln!(out, "  subgraph cluster_g{gi} {{\n    label=\"@{}\";", esc(&g.name));
        region(&mut out, g, gi, g.body, 2);
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
            let _ = writeln!(out, "  {s} -> {r} [style=bold, color=blue, label=\"{}\"];", esc(key));
        }
    }
    out.push_str("}\n");
    out
}

fn node_id(gi: usize, n: Node) -> String {
    format!("g{gi}_{n}")
}

fn region(out: &mut String, g: &Graph, gi: usize, r: Region, depth: usize) {
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
        let style = match nd.op {
            Op::Fusion => ", style=filled, fillcolor=lightyellow",
            Op::Send | Op::Recv => ", style=filled, fillcolor=lightblue",
            op if op.is_stateful() => ", style=filled, fillcolor=lightpink",
            _ => "",
        };
        let _ = writeln!(out, "{pad}{} [label=\"{}\"{style}];", node_id(gi, n), esc_label(&label));
        for &sub in &nd.regions {
            let _ = writeln!(
                out,
                "{pad}subgraph cluster_g{gi}_{sub} {{\n{pad}  label=\"{} {}\";",
                nd.op.name(),
                esc(&g.regions[sub].label)
            );
            region(out, g, gi, sub, depth + 1);
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
