//! Dependency graphs of a region as petgraph graphs: topological order and cycle detection for
//! passes and for the verifier's messages. petgraph is a view built on demand; node ids of the
//! IR, not petgraph indices, are the identities.

use crate::graph::{Graph, Node, Region, ValueDef};
use petgraph::graph::{DiGraph, NodeIndex};
use std::collections::HashMap;

/// The region's nodes with an edge from each producer to each consumer (data and control
/// dependencies) among them. Values from outside the region add no edges.
pub fn dependency_graph(g: &Graph, region: Region) -> (DiGraph<Node, ()>, HashMap<Node, NodeIndex>) {
    let mut dg = DiGraph::new();
    let nodes = &g.regions[region].nodes;
    let index: HashMap<Node, NodeIndex> = nodes.iter().map(|&n| (n, dg.add_node(n))).collect();
    for &n in nodes {
        let nd = &g.nodes[n];
        for &v in nd.operands.iter().chain(&nd.control_deps) {
            if let ValueDef::Result(p, _) = g.values[v].def {
                if let Some(&pi) = index.get(&p) {
                    dg.update_edge(pi, index[&n], ());
                }
            }
        }
    }
    (dg, index)
}

/// The region's nodes in an order where producers come before consumers, or one node on a
/// cycle.
pub fn topological_order(g: &Graph, region: Region) -> Result<Vec<Node>, Node> {
    let (dg, _) = dependency_graph(g, region);
    petgraph::algo::toposort(&dg, None)
        .map(|order| order.into_iter().map(|i| dg[i]).collect())
        .map_err(|c| dg[c.node_id()])
}
