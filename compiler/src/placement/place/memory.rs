//! Phase 3 of placement, memory: a group needs the bytes of its variables and constants; a
//! device whose free memory is less is not a candidate (the greedy phase keeps the count and
//! reports a group that fits nowhere with [`out_of_memory`]).

use super::colocation::Groups;
use crate::placement::cost::{type_bytes, CostModel};
use graphc_ir::{Diagnostic, Graph, Node, Type};
use std::collections::HashMap;

/// The bytes each group (by root) keeps resident.
pub(super) fn resident_bytes_per_group(g: &Graph, top: &[Node], groups: &Groups) -> HashMap<usize, u64> {
    let mut group_bytes: HashMap<usize, u64> = HashMap::new();
    for (i, &n) in top.iter().enumerate() {
        *group_bytes.entry(groups.of(i)).or_default() += resident_bytes(g, n);
    }
    group_bytes
}

/// Bytes a node keeps on its device for as long as the session lives: variables, constants.
fn resident_bytes(g: &Graph, n: Node) -> u64 {
    let nd = &g.nodes[n];
    // A resident op's result is what it keeps: a variable's value, a constant's literal.
    let own = if !nd.op.def().resident {
        0
    } else {
        match &g.values[nd.results[0]].ty {
            Type::Var(t) => graphc_runtime::limits::tensor_bytes(t).unwrap_or(u64::MAX / 4),
            ty => type_bytes(ty),
        }
    };
    own + nd.regions.iter().flat_map(|&r| g.regions[r].nodes.iter()).map(|&m| resident_bytes(g, m)).sum::<u64>()
}

pub(super) fn out_of_memory(
    g: &Graph,
    top: &[Node],
    members: &[usize],
    need: u64,
    allowed: &[bool],
    used: &[u64],
    cost: &CostModel<'_>,
) -> Diagnostic {
    let cluster = cost.cluster;
    let n = members.iter().map(|&i| top[i]).find(|&n| resident_bytes(g, n) > 0).unwrap_or(top[members[0]]);
    let free: Vec<String> = (0..cluster.devices.len())
        .filter(|&d| allowed[d])
        .map(|d| {
            let dev = &cluster.devices[d];
            format!("{} has {} free of {}", dev.name, human(dev.memory.saturating_sub(used[d])), human(dev.memory))
        })
        .collect();
    let total: u64 = (0..top.len()).map(|i| resident_bytes(g, top[i])).sum();
    Diagnostic::error(
        g.nodes[n].span,
        format!(
            "{} needs {} on one device, but no device it may use has that much memory free",
            g.describe(n),
            human(need)
        ),
    )
    .with_help(format!("{}; the graph keeps {} resident in all", free.join(", "), human(total)))
}

fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn human_sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
