//! Common subexpression elimination: two pure, region-free ops with the same operands,
//! attributes, `after` list, device and result types compute the same values, so the later
//! one is replaced by the earlier. Each region has its own table (regions are isolated).

use super::manager::Pass;
use super::rewrite::{is_pure, regions, remove_dead};
use graphc_ir::{Attr, TensorData};
use graphc_ir::{Graph, Node};
use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

#[derive(Debug)]
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut changed = false;
        for r in regions(g) {
            // Buckets by a cheap hash; equality is checked in full within a bucket. A bucket's
            // first node is kept inline, the others (a fingerprint shared by different nodes)
            // in `more`: no allocation per node.
            let mut seen: HashMap<u64, Node> = HashMap::new();
            let mut more: HashMap<u64, Vec<Node>> = HashMap::new();
            for n in g.regions[r].nodes.clone() {
                if !g.nodes[n].regions.is_empty() || !is_pure(g, n) {
                    continue;
                }
                let key = fingerprint(g, n);
                let found = match seen.entry(key) {
                    Entry::Vacant(e) => {
                        e.insert(n);
                        continue;
                    }
                    Entry::Occupied(e) => {
                        let first = *e.get();
                        let others = more.get(&key).into_iter().flatten().copied();
                        std::iter::once(first).chain(others).find(|&m| same(g, m, n))
                    }
                };
                match found {
                    Some(first) => {
                        for (old, new) in g.nodes[n].results.clone().into_iter().zip(g.nodes[first].results.clone()) {
                            g.replace_all_uses(old, new);
                        }
                        changed = true;
                    }
                    None => more.entry(key).or_default().push(n),
                }
            }
        }
        if changed {
            remove_dead(g)?;
        }
        Ok(changed)
    }
}

/// Everything that determines a pure op's results is equal: op, operands, `after` list,
/// attributes, device and result types.
fn same(g: &Graph, a: Node, b: Node) -> bool {
    let (x, y) = (&g.nodes[a], &g.nodes[b]);
    x.op == y.op
        && x.operands == y.operands
        && x.control_deps == y.control_deps
        && x.attrs == y.attrs
        && x.device == y.device
        && x.results.len() == y.results.len()
        && x.results.iter().zip(&y.results).all(|(&u, &v)| g.values[u].ty == g.values[v].ty)
}

/// A hash of what [`same`] compares, reading only the size and first element of literals.
fn fingerprint(g: &Graph, n: Node) -> u64 {
    let nd = &g.nodes[n];
    let mut h = DefaultHasher::new();
    (nd.op, &nd.operands, &nd.control_deps, &nd.device).hash(&mut h);
    for (name, a) in nd.attrs.iter() {
        name.hash(&mut h);
        match a {
            // A weights file's tensor by the tensor it is (no read): references to one tensor
            // merge, and a reference and a literal in the text of the same elements do not.
            Attr::Tensor(t) => match t.text_data() {
                Some(d) => {
                    (t.ty(), d.len()).hash(&mut h);
                    first_bits(d).hash(&mut h);
                }
                None => (t.ty(), t.stored_in()).hash(&mut h),
            },
            other => other.to_string().hash(&mut h),
        }
    }
    for &v in &nd.results {
        g.values[v].ty.hash(&mut h);
    }
    h.finish()
}

/// The first element's bits, widened to f64 (literals are equal when their elements' bits are,
/// so equal ones hash alike; NaNs of different payloads are different constants).
fn first_bits(d: &TensorData) -> u64 {
    if d.is_empty() {
        0
    } else {
        d.f64_at(0).to_bits()
    }
}
