//! Common subexpression elimination: two pure, region-free ops with the same operands,
//! attributes, `after` list, device and result types compute the same values, so the later
//! one is replaced by the earlier. Each region has its own table (regions are isolated).

use super::dce::remove_dead;
use super::rewrite::{is_pure, regions};
use super::Pass;
use graphc_ir::{Graph, Node};
use std::collections::HashMap;
use std::fmt::Write;

#[derive(Debug)]
pub struct Cse;

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut changed = false;
        for r in regions(g) {
            let mut seen: HashMap<String, Node> = HashMap::new();
            for n in g.regions[r].nodes.clone() {
                if !g.nodes[n].regions.is_empty() || !is_pure(g, n) {
                    continue;
                }
                let key = key(g, n);
                match seen.get(&key) {
                    Some(&first) => {
                        for (old, new) in g.nodes[n].results.clone().into_iter().zip(g.nodes[first].results.clone()) {
                            g.replace_all_uses(old, new);
                        }
                        changed = true;
                    }
                    None => {
                        seen.insert(key, n);
                    }
                }
            }
        }
        if changed {
            remove_dead(g)?;
        }
        Ok(changed)
    }
}

/// Everything that determines a pure op's results, as a string.
fn key(g: &Graph, n: Node) -> String {
    let nd = &g.nodes[n];
    let mut k = format!("{}|{:?}|{:?}|", nd.op.name(), nd.operands, nd.control_deps);
    for (name, a) in nd.attrs.iter() {
        let _ = write!(k, "{name}={a};");
    }
    if let Some(d) = &nd.device {
        let _ = write!(k, "|{d}");
    }
    for &v in &nd.results {
        let _ = write!(k, "|{}", g.values[v].ty);
    }
    k
}
