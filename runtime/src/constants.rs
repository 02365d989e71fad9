//! Values that are the same in every step: constants, and pure ops whose operands are all
//! such values (a weight broadcast from a splat, a folded scale). A session computes each
//! once and keeps it, as TensorFlow's constant folding would, without writing the tensors
//! into the IR (which stays small and printable): a step then neither converts a literal into
//! a tensor again (a copy of every weight) nor recomputes what depends on literals alone.

use crate::tensor::Tensor;
use graphc_ir::{Graph, Node, Type};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::{Arc, Mutex};

/// The most bytes of derived values (results of ops on constants: weights broadcast from splats,
/// transposed for the products that read them) a session keeps; past it they are computed each
/// step. Literals are always kept: their elements are in memory already.
const DERIVED_BYTES: u64 = 2 << 30;

/// A session's step-invariant values, by graph and node.
#[derive(Debug, Default)]
pub struct ConstantCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per graph, the nodes whose results are step-invariant.
    nodes: HashMap<String, Arc<HashSet<Node>>>,
    /// Per graph, the kept results of its nodes.
    values: HashMap<String, HashMap<Node, Vec<Arc<Tensor>>>>,
    derived_bytes: u64,
}

impl ConstantCache {
    /// The nodes of `g` (in any region) whose results are the same in every step.
    pub fn nodes(&self, g: &Graph) -> Arc<HashSet<Node>> {
        let mut inner = crate::wait::lock(&self.inner);
        if let Some(nodes) = inner.nodes.get(&g.name) {
            return nodes.clone();
        }
        let nodes = Arc::new(invariant_nodes(g));
        inner.nodes.insert(g.name.clone(), nodes.clone());
        nodes
    }

    /// The kept results of node `n` of graph `graph`.
    pub fn get(&self, graph: &str, n: Node) -> Option<Vec<Arc<Tensor>>> {
        crate::wait::lock(&self.inner).values.get(graph)?.get(&n).cloned()
    }

    /// Keeps the results of `n` (a literal's always, a derived node's while they fit).
    pub fn keep(&self, graph: &str, n: Node, literal: bool, results: &[Arc<Tensor>]) {
        let bytes = results.iter().map(|t| crate::budget::bytes_of(t)).fold(0u64, u64::saturating_add);
        let mut inner = crate::wait::lock(&self.inner);
        if !literal {
            if inner.derived_bytes.saturating_add(bytes) > DERIVED_BYTES {
                return;
            }
            inner.derived_bytes += bytes;
        }
        inner.values.entry(graph.to_string()).or_default().insert(n, results.to_vec());
    }
}

/// The nodes whose results are the same in every step: those `Graph::is_step_invariant_op`
/// admits whose operands are all results of such nodes, with tensor results. Walked in order,
/// so producers are classified before their users.
fn invariant_nodes(g: &Graph) -> HashSet<Node> {
    let mut set = HashSet::default();
    for n in g.walk() {
        let nd = &g.nodes[n];
        let from_invariant = |v: &graphc_ir::Value| g.producer(*v).is_some_and(|p| set.contains(&p));
        let tensors = !nd.results.is_empty() && nd.results.iter().all(|&v| matches!(g.values[v].ty, Type::Tensor(_)));
        if tensors && g.is_step_invariant_op(n) && nd.operands.iter().all(from_invariant) {
            set.insert(n);
        }
    }
    set
}
