//! The reverse sweep over one region: which nodes lie between the values differentiated with
//! respect to and the seeded values, then, last node first, each one's gradient rule, the
//! adjoints of a value used several times summed.

use super::emit::{Emit, Failure, Result};
use super::rules;
use graphc_ir::{Graph, Node, Value};
use std::collections::{HashMap, HashSet};

/// Whether gradients flow through `v`: float tensors only.
pub fn is_float(g: &Graph, v: Value) -> bool {
    g.value_type(v).as_tensor().is_some_and(|t| t.dtype.is_float())
}

/// The adjoints of `wrts`, given those of `seeds` (value, adjoint), over the nodes of `e`'s
/// region before `e.at`; `None` for a wrt nothing seeded depends on. New nodes go at `e.at`.
pub fn backprop(e: &mut Emit<'_>, seeds: &[(Value, Value)], wrts: &[Value]) -> Result<Vec<Option<Value>>> {
    let nodes: Vec<Node> = e.g.regions[e.region].nodes[..e.at].to_vec();
    let relevant = relevant(e.g, &nodes, seeds, wrts);
    let mut adj: HashMap<Value, Value> = HashMap::new();
    for &(v, d) in seeds {
        accumulate(e, &mut adj, v, d)?;
    }
    for &n in nodes.iter().rev() {
        let nd = &e.g.nodes[n];
        if !nd.operands.iter().any(|v| relevant.contains(v)) {
            continue;
        }
        let dys: Vec<Option<Value>> = nd.results.iter().map(|r| adj.get(r).copied()).collect();
        if dys.iter().all(Option::is_none) {
            continue;
        }
        let operands = nd.operands.clone();
        let blame = e.blame;
        e.blame = n;
        let grads = match rules::vjp(e, n, &dys, backprop) {
            Some(r) => r?,
            None => return Err(not_differentiable(e.g, &nodes, n, &relevant, wrts)),
        };
        e.blame = blame;
        for (v, d) in operands.into_iter().zip(grads) {
            if let Some(d) = d.filter(|_| relevant.contains(&v)) {
                accumulate(e, &mut adj, v, d)?;
            }
        }
    }
    Ok(wrts.iter().map(|w| adj.get(w).copied()).collect())
}

fn accumulate(e: &mut Emit<'_>, adj: &mut HashMap<Value, Value>, v: Value, d: Value) -> Result<()> {
    let sum = match adj.get(&v) {
        Some(&prev) => e.add(prev, d)?,
        None => d,
    };
    adj.insert(v, sum);
    Ok(())
}

/// Float values that depend on a wrt and that a seed depends on, through float values.
fn relevant(g: &Graph, nodes: &[Node], seeds: &[(Value, Value)], wrts: &[Value]) -> HashSet<Value> {
    let mut fwd: HashSet<Value> = wrts.iter().copied().filter(|&w| is_float(g, w)).collect();
    for &n in nodes {
        let nd = &g.nodes[n];
        if nd.operands.iter().any(|v| fwd.contains(v)) {
            fwd.extend(nd.results.iter().copied().filter(|&r| is_float(g, r)));
        }
    }
    let mut bwd: HashSet<Value> = seeds.iter().map(|s| s.0).filter(|&v| is_float(g, v)).collect();
    for &n in nodes.iter().rev() {
        let nd = &g.nodes[n];
        if nd.results.iter().any(|r| bwd.contains(r)) {
            bwd.extend(nd.operands.iter().copied().filter(|&v| is_float(g, v)));
        }
    }
    fwd.intersection(&bwd).copied().collect()
}

/// The error for a node on the path with no gradient rule, naming the path from a wrt to it.
fn not_differentiable(g: &Graph, nodes: &[Node], n: Node, relevant: &HashSet<Value>, wrts: &[Value]) -> Failure {
    // Walk back from the node through relevant operands to a wrt.
    let mut path = vec![n];
    let mut cur = n;
    'walk: loop {
        for &v in &g.nodes[cur].operands {
            if !relevant.contains(&v) || wrts.contains(&v) {
                continue;
            }
            if let Some(p) = g.producer(v).filter(|p| nodes.contains(p)) {
                path.push(p);
                cur = p;
                continue 'walk;
            }
        }
        break;
    }
    let start = g.nodes[cur].operands.iter().find(|v| wrts.contains(v)).map(|&v| value_name(g, v));
    let mut steps: Vec<String> = start.clone().into_iter().collect();
    steps.extend(path.iter().rev().map(|&m| g.describe(m)));
    // On from the node through relevant results toward the loss.
    let mut cur = n;
    'on: for _ in 0..nodes.len() {
        for &r in &g.nodes[cur].results {
            if !relevant.contains(&r) {
                continue;
            }
            for u in g.uses(r) {
                if let Some(m) = u.user().filter(|m| nodes.contains(m) && g.nodes[*m].parent == g.nodes[n].parent) {
                    steps.push(g.describe(m));
                    cur = m;
                    continue 'on;
                }
            }
        }
        break;
    }
    Failure {
        node: n,
        message: format!(
            "'{}' is not differentiable, but the loss depends on {} through it: {}",
            g.nodes[n].op.name(),
            start.unwrap_or_else(|| "the values differentiated with respect to".into()),
            steps.join(" -> ")
        ),
    }
}

pub fn value_name(g: &Graph, v: Value) -> String {
    match &g.values[v].name {
        Some(n) => format!("%{n}"),
        None => format!("{v}"),
    }
}
