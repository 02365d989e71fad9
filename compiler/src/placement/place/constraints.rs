//! Phase 1 of placement, constraints: the devices a node admits. Its annotation (full or
//! partial) admits the devices it is compatible with; the device must have a kernel for the
//! node and for every node in its regions, which go with it (a `cond`, `while` or `fusion` is
//! placed as one unit), except the annotated nodes of a `cond` or `while`, which split off.
//!
//! A device has a kernel for a node when the spec does not list its op as unsupported and the
//! backend accepts the node on that kind of device (`Backend::accepts`: on a GPU it depends
//! on dtypes, shapes and what a fusion holds, not on the op alone), so that work a GPU cannot
//! do goes to a CPU device rather than to the host inside the GPU's partition.

use crate::backend::Backend;
use crate::placement::cluster::Device;
use crate::placement::cost::CostModel;
use graphc_ir::{Diagnostic, Graph, Node, Op};

/// What each of the top-level nodes admits, in order; the first that admits no device is the
/// error.
pub(super) fn admitted_per_node(
    g: &Graph,
    top: &[Node],
    cost: &CostModel<'_>,
    backend: &dyn Backend,
) -> Result<Vec<Vec<bool>>, Diagnostic> {
    top.iter().map(|&n| admitted(g, n, cost, backend)).collect()
}

/// True for a node directly in a `cond` or `while` region that carries its own annotation:
/// it runs where that says, and partitioning splits the control flow around it.
pub(super) fn splits_off(g: &Graph, m: Node) -> bool {
    let parent = g.regions[g.nodes[m].parent].parent;
    parent.is_some_and(|p| matches!(g.nodes[p].op, Op::Cond | Op::While))
        && g.nodes[m].device.as_ref().is_some_and(|s| !s.is_empty())
}

/// Why device `d` has no kernel for node `m` of `g`, or `Ok`. A node inside a fusion is
/// checked by its op alone: the fusion's kernel is the backend's question.
pub(super) fn kernel_on(d: &Device, g: &Graph, m: Node, backend: &dyn Backend) -> Result<(), String> {
    let op = g.nodes[m].op;
    if !d.supports(op) {
        return Err(format!("{} has no kernel for '{}'", d.name, op.name()));
    }
    if !inside_fusion(g, m) {
        backend
            .accepts(d.kind, g, m)
            .map_err(|why| format!("{} has no kernel for {}: {why}", d.name, g.describe(m)))?;
    }
    Ok(())
}

fn inside_fusion(g: &Graph, m: Node) -> bool {
    g.regions[g.nodes[m].parent].parent.is_some_and(|p| g.nodes[p].op == Op::Fusion)
}

/// Node `n` and the nodes in its regions that go with it, `n` first.
fn unit(g: &Graph, n: Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        if m != n && splits_off(g, m) {
            continue; // placed on its own by resolve_nested
        }
        stack.extend(g.nodes[m].regions.iter().flat_map(|&r| g.regions[r].nodes.iter().copied()));
        out.push(m);
    }
    out
}

/// The devices node `n` (with its regions) may run on: compatible with every annotation in
/// it, and having a kernel for every node in it.
pub(super) fn admitted(
    g: &Graph,
    n: Node,
    cost: &CostModel<'_>,
    backend: &dyn Backend,
) -> Result<Vec<bool>, Diagnostic> {
    let cluster = cost.cluster;
    let mut ok = vec![true; cluster.devices.len()];
    let members = unit(g, n);
    for &m in &members {
        let nd = &g.nodes[m];
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
        let why: Vec<Result<(), String>> = cluster.devices.iter().map(|d| kernel_on(d, g, m, backend)).collect();
        if why.iter().all(Result::is_err) {
            let reasons: Vec<String> = why.into_iter().filter_map(Result::err).collect();
            return Err(Diagnostic::error(nd.span, format!("no device of the cluster can run {}", g.describe(m)))
                .with_help(format!("{}; the devices are {}", reasons.join("; "), cluster.listing())));
        }
        for (x, w) in ok.iter_mut().zip(&why) {
            *x &= w.is_ok();
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
            .filter_map(|d| members.iter().find_map(|&m| kernel_on(d, g, m, backend).err()))
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
