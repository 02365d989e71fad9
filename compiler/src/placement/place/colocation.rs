//! Phase 2 of placement, colocation: a `variable` or `queue` and every node that uses its
//! handle form one group that goes to one device, as do same-named state in different graphs
//! of the module; the group may use only devices every member admits.

use crate::placement::cost::CostModel;
use graphc_ir::{Diagnostic, Graph, Node, Op, Type};
use std::collections::HashMap;

/// Union-find over top-level node indices.
struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    fn find(&mut self, i: usize) -> usize {
        let p = self.parent[i];
        if p == i {
            return i;
        }
        let r = self.find(p);
        self.parent[i] = r;
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        // The earlier node stays the root, so a group is named by its first member.
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// The colocation groups of a graph's top-level nodes (by index). A group is named by its
/// root, its first member.
pub(super) struct Groups {
    /// Each node's group.
    root: Vec<usize>,
    /// Each group's members, in order.
    pub members: HashMap<usize, Vec<usize>>,
    /// The devices every member of the group admits.
    pub allowed: HashMap<usize, Vec<bool>>,
    /// The named variables and queues among the nodes: index and name.
    pub state: Vec<(usize, String)>,
}

impl Groups {
    /// Joins each variable or queue with the nodes that use its handle; a group may use the
    /// devices all its members admit (`allowed`, per node), and one with none is an error.
    pub(super) fn colocate(
        g: &Graph,
        top: &[Node],
        index: &HashMap<Node, usize>,
        allowed: &[Vec<bool>],
        cost: &CostModel<'_>,
    ) -> Result<Groups, Diagnostic> {
        let ndev = cost.cluster.devices.len();
        let mut groups = UnionFind { parent: (0..top.len()).collect() };
        let mut state_of_group: Vec<(usize, String)> = Vec::new();
        for (i, &n) in top.iter().enumerate() {
            for &r in &g.nodes[n].results {
                if !matches!(g.values[r].ty, Type::Var(_) | Type::Queue(_)) {
                    continue;
                }
                for u in g.uses(r) {
                    if let Some(user) = u.user() {
                        if let Some(&j) = index.get(&user) {
                            groups.union(i, j);
                        }
                    }
                }
            }
            if matches!(g.nodes[n].op, Op::Variable | Op::Queue) {
                if let Some(name) = g.nodes[n].attrs.str("name") {
                    state_of_group.push((i, name.to_string()));
                }
            }
        }
        let root: Vec<usize> = (0..top.len()).map(|i| groups.find(i)).collect();
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, &r) in root.iter().enumerate() {
            members.entry(r).or_default().push(i);
        }
        let mut group_allowed: HashMap<usize, Vec<bool>> = HashMap::new();
        for (&root, ms) in &members {
            let mut ok = vec![true; ndev];
            for &i in ms {
                for d in 0..ndev {
                    ok[d] &= allowed[i][d];
                }
            }
            if !ok.iter().any(|&b| b) {
                return Err(colocation_conflict(g, top, ms, allowed, cost));
            }
            group_allowed.insert(root, ok);
        }
        Ok(Groups { root, members, allowed: group_allowed, state: state_of_group })
    }

    /// The group of top-level node `i`.
    pub(super) fn of(&self, i: usize) -> usize {
        self.root[i]
    }

    /// The groups whose state an earlier graph placed (`state_devices`: by name), each to the
    /// device it went to; an error where the group here cannot go there.
    pub(super) fn pinned_by_earlier_graphs(
        &self,
        g: &Graph,
        top: &[Node],
        state_devices: &HashMap<String, usize>,
        cost: &CostModel<'_>,
    ) -> Result<HashMap<usize, usize>, Diagnostic> {
        let cluster = cost.cluster;
        let mut fixed: HashMap<usize, usize> = HashMap::new();
        for (i, name) in &self.state {
            let root = self.of(*i);
            if let Some(&d) = state_devices.get(name) {
                if !self.allowed[&root][d] {
                    let nd = &g.nodes[top[*i]];
                    return Err(Diagnostic::error(
                        nd.span,
                        format!(
                            "state '{name}' is on {} in an earlier graph, but {} here cannot go there",
                            cluster.devices[d].name,
                            g.describe(top[*i])
                        ),
                    )
                    .with_help("a variable or queue shared by name lives on one device; annotate its users alike"));
                }
                fixed.insert(root, d);
            }
        }
        Ok(fixed)
    }
}

fn colocation_conflict(
    g: &Graph,
    top: &[Node],
    members: &[usize],
    allowed: &[Vec<bool>],
    cost: &CostModel<'_>,
) -> Diagnostic {
    let cluster = cost.cluster;
    let state = members.iter().map(|&i| top[i]).find(|&n| matches!(g.nodes[n].op, Op::Variable | Op::Queue));
    let first = state.unwrap_or(top[members[0]]);
    let mut d = Diagnostic::error(
        g.nodes[first].span,
        format!(
            "{} and the nodes that use it must share a device, but their annotations and ops admit no common device",
            g.describe(first)
        ),
    );
    for &i in members {
        let n = top[i];
        if n == first {
            continue;
        }
        let nd = &g.nodes[n];
        let why = match &nd.device {
            Some(s) if !s.is_empty() => format!("{} is pinned to '{s}'", g.describe(n)),
            _ => {
                let can: Vec<&str> = (0..cluster.devices.len())
                    .filter(|&d| allowed[i][d])
                    .map(|d| cluster.devices[d].name.as_str())
                    .collect();
                format!("{} can run on {}", g.describe(n), can.join(", "))
            }
        };
        d = d.with_note(nd.span, why);
    }
    let pin = g.nodes[first].device.as_ref().filter(|s| !s.is_empty());
    if let Some(s) = pin {
        d = d.with_note(g.nodes[first].span, format!("{} is pinned to '{s}'", g.describe(first)));
    }
    d.with_help("a variable or queue is colocated with every op that reads or writes it; annotate them alike")
}
