//! Where each value of a graph is used for the last time, computed once per session from the
//! IR: a step drops a value as soon as the node that last reads it has run (its buffer goes to
//! the session's pool), and a compiled kernel may write its result over an operand it reads
//! last. Regions are isolated (a region's nodes read only its parameters and its own values),
//! so each region is one straight list of uses.

use graphc_ir::{Graph, Node, Value};
use std::collections::{HashMap, HashSet};

/// For each node of a graph (nested regions included), the values no later node reads.
#[derive(Debug, Default)]
pub struct Liveness {
    dead_after: HashMap<Node, Vec<Value>>,
}

impl Liveness {
    pub fn of(g: &Graph) -> Liveness {
        let mut dead_after: HashMap<Node, Vec<Value>> = HashMap::new();
        for (_, rd) in g.regions.iter() {
            // What the region yields lives to its end.
            let yielded: HashSet<Value> = rd.yields.iter().copied().collect();
            let mut last: HashMap<Value, Node> = HashMap::new();
            for &n in &rd.nodes {
                for &v in &g.nodes[n].operands {
                    last.insert(v, n);
                }
            }
            let mut defined: Vec<(Value, Node)> = Vec::new();
            for &n in &rd.nodes {
                // A result nothing reads dies where it is made.
                defined.extend(g.nodes[n].results.iter().filter(|v| !last.contains_key(v)).map(|&v| (v, n)));
            }
            for (v, n) in last.into_iter().chain(defined) {
                if !yielded.contains(&v) {
                    dead_after.entry(n).or_default().push(v);
                }
            }
        }
        for vs in dead_after.values_mut() {
            vs.sort();
            vs.dedup();
        }
        Liveness { dead_after }
    }

    /// The values that die once node `n` has run: operands it reads last, and results that
    /// nothing reads.
    pub fn dead_after(&self, n: Node) -> &[Value] {
        self.dead_after.get(&n).map_or(&[], Vec::as_slice)
    }
}
