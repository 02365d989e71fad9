//! Dead code elimination: removes pure ops none of whose results is used. Stateful ops,
//! communication and control flow holding either always stay, and so do ops used only through
//! `after` lists (a control use is a use).

use super::rewrite::{is_pure, regions};
use super::Pass;
use graphc_ir::{Graph, Node, Region};
use std::collections::HashSet;

#[derive(Debug)]
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        remove_dead(g)
    }
}

/// Removes every dead node of every region; returns whether any was removed.
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
