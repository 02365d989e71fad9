//! Helpers the passes share: purity, constants, walking regions, reordering.

use graphc_ir::{Graph, Node, Op, Region, TensorData, TensorLiteral, Value};
use std::collections::HashMap;

/// Whether removing, duplicating or merging the node cannot change what a run does: not
/// stateful, not communicating, and no such op inside its regions.
pub fn is_pure(g: &Graph, n: Node) -> bool {
    let nd = &g.nodes[n];
    !nd.op.is_stateful() && nd.regions.iter().all(|&r| g.regions[r].nodes.iter().all(|&m| is_pure(g, m)))
}

/// The literal of a value defined by a `constant` node.
pub fn constant_of(g: &Graph, v: Value) -> Option<&TensorLiteral> {
    let n = g.producer(v)?;
    let nd = &g.nodes[n];
    (nd.op == Op::Constant).then(|| nd.attrs.tensor("value")).flatten()
}

/// The single value of a splat literal, widened to f64 (bools as 0 and 1).
pub fn splat_value(lit: &TensorLiteral) -> Option<f64> {
    if !lit.is_splat() && lit.data().len() != 1 {
        return None;
    }
    Some(match lit.data() {
        TensorData::F32(v) => *v.first()? as f64,
        TensorData::F64(v) => *v.first()?,
        TensorData::I32(v) => *v.first()? as f64,
        TensorData::I64(v) => *v.first()? as f64,
        TensorData::Bool(v) => f64::from(u8::from(*v.first()?)),
    })
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
