//! Phase 1 of placement, constraints: the devices a node admits. Its annotation (full or
//! partial) admits the devices it is compatible with; the device must have a kernel for the op
//! and for every op in its regions, which go with it (a `cond`, `while` or `fusion` is placed
//! as one unit), except the annotated nodes of a `cond` or `while`, which split off.

use crate::placement::cost::CostModel;
use graphc_ir::{Diagnostic, Graph, Node, Op};

/// What each of the top-level nodes admits, in order; the first that admits no device is the
/// error.
pub(super) fn admitted_per_node(g: &Graph, top: &[Node], cost: &CostModel<'_>) -> Result<Vec<Vec<bool>>, Diagnostic> {
    top.iter().map(|&n| admitted(g, n, cost)).collect()
}

/// True for a node directly in a `cond` or `while` region that carries its own annotation:
/// it runs where that says, and partitioning splits the control flow around it.
pub(super) fn splits_off(g: &Graph, m: Node) -> bool {
    let parent = g.regions[g.nodes[m].parent].parent;
    parent.is_some_and(|p| matches!(g.nodes[p].op, Op::Cond | Op::While))
        && g.nodes[m].device.as_ref().is_some_and(|s| !s.is_empty())
}

/// The devices node `n` (with its regions) may run on: compatible with every annotation in
/// it, and having a kernel for every op in it.
pub(super) fn admitted(g: &Graph, n: Node, cost: &CostModel<'_>) -> Result<Vec<bool>, Diagnostic> {
    let cluster = cost.cluster;
    let mut ok = vec![true; cluster.devices.len()];
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        let nd = &g.nodes[m];
        if m != n && splits_off(g, m) {
            continue; // placed on its own by resolve_nested
        }
        stack.extend(nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
        if let Some(spec) = nd.device.as_ref().filter(|s| !s.is_empty()) {
            let matching: Vec<usize> = cluster.matching(spec).collect();
            if matching.is_empty() {
                return Err(Diagnostic::error(
                    nd.span,
                    format!("{} is pinned to '{spec}', which matches no device of the cluster", g.describe(m)),
                )
                .with_help(format!("the devices are {}", cluster.listing())));
            }
            let before = ok.clone();
            for (d, x) in ok.iter_mut().enumerate() {
                *x &= matching.contains(&d);
            }
            if m != n && !ok.iter().any(|&b| b) && before.iter().any(|&b| b) {
                return Err(Diagnostic::error(
                    nd.span,
                    format!(
                        "{} is pinned to '{spec}', but the {} it is inside is pinned elsewhere",
                        g.describe(m),
                        g.nodes[n].op.name()
                    ),
                )
                .with_note(g.nodes[n].span, format!("the enclosing {}", g.describe(n)))
                .with_help("a fusion runs on one device with everything in its kernel"));
            }
        }
        if !cluster.devices.iter().any(|d| d.supports(nd.op)) {
            return Err(Diagnostic::error(nd.span, format!("no device of the cluster can run {}", g.describe(m)))
                .with_help(format!(
                    "every device lists '{}' as unsupported; the devices are {}",
                    nd.op.name(),
                    cluster.listing()
                )));
        }
        for (d, x) in ok.iter_mut().enumerate() {
            *x &= cluster.devices[d].supports(nd.op);
        }
    }
    if !ok.iter().any(|&b| b) {
        // Some device matches the annotations but lacks a kernel: say which and for what.
        let nd = &g.nodes[n];
        let pinned = nd.device.as_ref().filter(|s| !s.is_empty());
        let lacking: Vec<String> = cluster
            .devices
            .iter()
            .filter(|d| pinned.is_none_or(|s| s.is_compatible_with(&d.spec)))
            .filter_map(|d| {
                let mut ops = vec![nd.op];
                let mut stack: Vec<Node> = nd.regions.iter().flat_map(|&r| g.regions[r].nodes.clone()).collect();
                while let Some(m) = stack.pop() {
                    ops.push(g.nodes[m].op);
                    stack.extend(g.nodes[m].regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
                }
                let missing = ops.iter().find(|&&op| !d.supports(op))?;
                Some(format!("{} has no kernel for '{}'", d.name, missing.name()))
            })
            .collect();
        let what = match pinned {
            Some(s) => format!("{} is pinned to '{s}'", g.describe(n)),
            None => format!("{} has annotations", g.describe(n)),
        };
        return Err(Diagnostic::error(nd.span, format!("{what}, but no device there can run it")).with_help(format!(
            "{}; the devices are {}",
            lacking.join(", "),
            cluster.listing()
        )));
    }
    Ok(ok)
}
