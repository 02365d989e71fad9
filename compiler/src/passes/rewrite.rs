//! Helpers the passes share: purity, constants, walking regions, reordering.

use graphc_ir::{Graph, Node, Op, Region, TensorLiteral, Value};
use std::collections::{HashMap, HashSet};

/// Whether removing, duplicating or merging the node cannot change what a run does: not
/// stateful, not communicating, and no such op inside its regions.
pub fn is_pure(g: &Graph, n: Node) -> bool {
    let nd = &g.nodes[n];
    !nd.op.is_stateful() && nd.regions.iter().all(|&r| g.regions[r].nodes.iter().all(|&m| is_pure(g, m)))
}

/// Whether `v` is the same in every step: the result of a node `Graph::is_step_invariant_op`
/// admits whose operands all are (a constant, a weight broadcast from one). Sessions compute
/// such values once and keep them (`graphc_runtime::ConstantCache`). Chains longer than a few
/// hundred nodes count as not.
pub fn step_invariant(g: &Graph, v: Value) -> bool {
    let (mut stack, mut seen) = (vec![v], HashSet::new());
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        let Some(p) = g.producer(v) else { return false };
        if !g.is_step_invariant_op(p) || seen.len() > 256 {
            return false;
        }
        stack.extend(g.nodes[p].operands.iter().copied());
    }
    true
}

/// The literal of a value defined by a `constant` node.
pub fn constant_of(g: &Graph, v: Value) -> Option<&TensorLiteral> {
    let n = g.producer(v)?;
    let nd = &g.nodes[n];
    (nd.op == Op::Constant).then(|| nd.attrs.tensor("value")).flatten()
}

/// The single value of a splat literal in the text, widened to f64 (bools as 0 and 1).
pub fn splat_value(lit: &TensorLiteral) -> Option<f64> {
    let data = lit.text_data()?;
    (data.len() == 1).then(|| data.f64_at(0))
}

/// Whether a splat constant is exactly `x` (so `-0.0` is not `0.0`).
pub fn is_splat_of(g: &Graph, v: Value, x: f64) -> bool {
    constant_of(g, v).and_then(splat_value).is_some_and(|s| s == x && s.is_sign_negative() == x.is_sign_negative())
}

/// The graph's body and every region nested in it, parents before children.
pub fn regions(g: &Graph) -> Vec<Region> {
    let mut out = vec![g.body];
    let mut i = 0;
    while i < out.len() {
        let r = out[i];
        for &n in &g.regions[r].nodes {
            out.extend(g.nodes[n].regions.iter().copied());
        }
        i += 1;
    }
    out
}

/// Puts nodes added at the end of `region` in front of the nodes named in `before`.
pub fn place_before(g: &mut Graph, region: Region, before: &HashMap<Node, Vec<Node>>) {
    if before.is_empty() {
        return;
    }
    let moved: std::collections::HashSet<Node> = before.values().flatten().copied().collect();
    let old = std::mem::take(&mut g.regions[region].nodes);
    let mut order = Vec::with_capacity(old.len());
    for n in old {
        if moved.contains(&n) {
            continue;
        }
        if let Some(new) = before.get(&n) {
            order.extend(new.iter().copied());
        }
        order.push(n);
    }
    g.regions[region].nodes = order;
}

/// Removes every dead node of every region; returns whether any was removed.
/// (Dead code elimination, which every pass that leaves nodes unused runs after itself.)
pub fn remove_dead(g: &mut Graph) -> Result<bool, String> {
    let mut dead: HashSet<Node> = HashSet::new();
    for r in regions(g) {
        if g.regions[r].parent.is_some_and(|p| dead.contains(&p)) {
            continue;
        }
        sweep(g, r, &mut dead);
    }
    if dead.is_empty() {
        return Ok(false);
    }
    // Nodes inside dead nodes' regions go with their owners.
    let doomed: Vec<Node> = dead.iter().copied().filter(|&n| !inside_dead(g, n, &dead)).collect();
    g.remove_nodes(&doomed)?;
    Ok(true)
}

/// Marks the region's dead nodes, last first, so a node whose only users die dies too.
fn sweep(g: &Graph, r: Region, dead: &mut HashSet<Node>) {
    for &n in g.regions[r].nodes.iter().rev() {
        let unused =
            g.nodes[n].results.iter().all(|&v| g.uses(v).iter().all(|u| u.user().is_some_and(|m| dead.contains(&m))));
        if unused && is_pure(g, n) {
            dead.insert(n);
        }
    }
}

fn inside_dead(g: &Graph, n: Node, dead: &HashSet<Node>) -> bool {
    let mut r = g.nodes[n].parent;
    while let Some(owner) = g.regions[r].parent {
        if dead.contains(&owner) {
            return true;
        }
        r = g.nodes[owner].parent;
    }
    false
}
