//! Fusion: groups ops into `fusion` regions that a backend compiles as one kernel each.
//!
//! The op kinds follow XLA's and TVM's: elementwise ops and broadcasts fuse with each other
//! (a "loop" kernel); a reduction takes its elementwise producers and then its elementwise
//! consumers (an "input" kernel; further reductions join it when they reduce values
//! of the same type along the same axes, as softmax and layernorm do; the axes are a block of
//! trailing ones, the kernel's rows, and nothing in the kernel reads a reduction that drops
//! them, whose shape would broadcast against the wrong axes); a matmul takes its
//! elementwise epilogue (an "output" kernel: bias, activation). Matmul never joins a producer's
//! group, so an expensive producer is never recomputed.
//!
//! Groups grow greedily in region order: an op joins the group of its first operand whose
//! group accepts it, unless that would create a cycle (a path from the group to the op
//! through a node outside the group). Injective ops that move elements (reshape, transpose,
//! concat, gather) stay out: no loop kernel reindexes, and one would leave its whole group on
//! the interpreter; but a `slice`, or a `gather` of one constant index (`x[t]`), that the
//! backend's loops read as a view of its operand joins the ops that read it (`is_view`). Only
//! pure ops without `after` lists fuse, and no group spans a stateful op or one holding
//! regions, so effects keep their order; the members of a group depend on the same effects
//! (`Needs`), so a request runs no effect it did not. Small splat constants are copied into
//! the kernels that use them. Each group of two or more ops becomes
//! one `fusion` node whose region is the group; its results keep the names of the values they
//! replace.

use super::manager::Pass;
use super::rewrite::{constant_of, regions, remove_dead};
use crate::backend::Backend;
use graphc_ir::shape::broadcasts_to;
use graphc_ir::{Attr, DType, DeviceSpec, Graph, Node, NodeSpec, Op, OpKind, Region, Type, Value, ValueDef};
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, HashSet};

/// The pass, grouping what the backend's kernels compute ([`Backend::fuses`]).
#[derive(Debug)]
pub struct Fuse(pub &'static dyn Backend);

impl Pass for Fuse {
    fn name(&self) -> &'static str {
        "fuse"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut changed = false;
        let mut local = Numbering::default();
        for r in regions(g) {
            // Kernels are not fused again.
            if g.regions[r].parent.is_some_and(|p| g.nodes[p].op == Op::Fusion) {
                continue;
            }
            changed |= fuse_region(g, r, &mut local, self.0)?;
            // Every fusion that reads a view has a kernel plan: the groups keep a view only
            // where the loop reads it as one (`plan::view_fits`); a fusion that rule misjudged
            // is taken apart again, its nodes back in the region (tests assert there is none).
            let unplanned: Vec<Node> = (g.regions[r].nodes.iter().copied())
                .filter(|&n| {
                    let nd = &g.nodes[n];
                    nd.op == Op::Fusion
                        && g.regions[nd.regions[0]].nodes.iter().any(|&m| is_view(g, m))
                        && crate::lower::plan::kernel_plan(g, n).is_none()
                })
                .collect();
            debug_assert!(unplanned.is_empty(), "fusions reading views without a kernel plan");
            for f in unplanned {
                inline_fusion(g, r, f)?;
            }
        }
        if changed {
            remove_dead(g)?;
        }
        Ok(changed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Loop,
    Input,
    Output,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Loop => "loop",
            Kind::Input => "input",
            Kind::Output => "output",
        }
    }
}

/// A group of one region's nodes, which are named by their positions in the region (as
/// everything per node is while a region is fused: `Numbering`).
#[derive(Debug)]
struct Group {
    /// In no particular order (merges append the smaller group to the larger).
    members: Vec<usize>,
    kind: Kind,
    first: usize,
    /// Position of the latest member.
    last: usize,
    seg: usize,
    device: Option<DeviceSpec>,
    /// The shape the kernel iterates over (`IterShape`).
    shape: IterShape,
    /// What its reductions reduce (`RowKey`), once it has one.
    rows: Option<RowKey>,
    /// Its reductions that drop their axes: no other member may read them.
    dropping: Vec<Node>,
    /// The effects every member's result depends on (`Needs`), the same for all members.
    effects: usize,
    /// The producers of the members' operands: those outside the group are where a path out
    /// of it comes back in. Includes members that joined after the entry was made (cheaper to
    /// skip than to remove).
    producers: Vec<usize>,
}

/// The shape a group's kernel iterates over: a matmul's product, a reduction's operand, or
/// the widest result of elementwise ops. Every member's result broadcasts into it, and every
/// result that leaves the kernel has it (or, in an input kernel, one value per row of it): a
/// backend runs the kernel as one loop nest over it, and an output kernel's epilogue in place
/// over the product's buffer. `None` only where a member's type gives no shape (ops that
/// reindex, which no single shape describes, never join a group).
type IterShape = Option<Vec<u64>>;

/// Kernels a backend launches for a graph: one per fusion node, one per unfused compute op
/// (nested control-flow bodies included).
pub fn kernel_count(g: &Graph) -> usize {
    let mut count = 0;
    for r in regions(g) {
        if g.regions[r].parent.is_some_and(|p| g.nodes[p].op == Op::Fusion) {
            continue;
        }
        for &n in &g.regions[r].nodes {
            let op = g.nodes[n].op;
            // Opaque ops (softmax, pooling, fusion kernels) are kernels of their own.
            let compute = matches!(
                op.kind(),
                OpKind::Elementwise | OpKind::Injective | OpKind::Reduction | OpKind::Contraction | OpKind::Opaque
            );
            count += usize::from(compute && op != Op::Identity);
        }
    }
    count
}

fn fusible(g: &Graph, n: Node, backend: &dyn Backend) -> bool {
    let nd = &g.nodes[n];
    let kind_ok =
        matches!(nd.op.kind(), OpKind::Elementwise | OpKind::Injective | OpKind::Reduction | OpKind::Contraction);
    kind_ok
        && nd.op != Op::Identity
        && (nd.op.kind() != OpKind::Reduction || over_trailing_axes(g, n))
        // An elementwise op the backend's kernels do not compute (a cast, sin, mod) would keep
        // its whole group on the interpreter: it runs alone, and its neighbours fuse and compile.
        && (nd.op.kind() != OpKind::Elementwise || backend.fuses(nd.op))
        // Likewise an op that moves elements (concat, transpose, reshape): no loop kernel
        // reindexes, so one would keep a batch-norm after a concat on the interpreter. A slice
        // (or a gather of one constant index) that the backend's loops read as a view of its
        // operand is the exception (`is_view`).
        && (!reindexes(nd.op) || backend.fuses_view(g, n))
        && nd.control_deps.is_empty()
        && nd.regions.is_empty()
        && nd.results.iter().all(|&v| {
            matches!(g.values[v].ty, Type::Tensor(_))
                && g.uses(v).iter().all(|u| !matches!(u, graphc_ir::Use::Control(..)))
        })
}

/// What a reduction reduces: the operand's type, the axes (normalized, sorted) and whether it
/// keeps them. The reductions of one input kernel agree on it, so that the kernel makes a
/// pass over each row per reduction (softmax's max and sum, layernorm's mean and variance)
/// with the row in cache.
type RowKey = (Type, Vec<i64>, Option<Attr>);

/// Whether a reduction reduces a nonempty block of trailing axes (`[2, 3]` of a rank-4
/// operand, or the last): what a kernel's row reductions are (the loop plans' rule). Others (a
/// bias gradient's sum over the batch) run alone, and the elementwise ops around them fuse
/// into kernels of their own.
fn over_trailing_axes(g: &Graph, n: Node) -> bool {
    let (_, axes, _) = row_key(g, n);
    let rank = g.values[g.nodes[n].operands[0]].ty.as_tensor().map_or(0, |t| t.rank() as i64);
    axes.first().is_some_and(|&first| axes.iter().copied().eq(first..rank))
}

/// Whether the reductions of `key` drop their axes (`keep_dims` false, the default).
fn drops_axes(key: &RowKey) -> bool {
    key.2 != Some(Attr::Bool(true))
}

/// The shapes of one value per row of `key`'s operand: with the reduced axes 1, and without
/// them (only a reduction that drops them has that one).
fn row_shapes(key: &RowKey) -> Option<(Vec<u64>, Vec<u64>)> {
    let shape = &key.0.as_tensor()?.shape;
    let reduced = |i: usize| key.1.contains(&(i as i64));
    let kept = shape.iter().enumerate().map(|(i, &d)| if reduced(i) { 1 } else { d }).collect();
    let dropped = shape.iter().enumerate().filter(|&(i, _)| !reduced(i)).map(|(_, &d)| d).collect();
    Some((kept, dropped))
}

fn row_key(g: &Graph, n: Node) -> RowKey {
    let nd = &g.nodes[n];
    let rank = g.values[nd.operands[0]].ty.as_tensor().map_or(0, |t| t.rank() as i64);
    let mut axes: Vec<i64> = nd.attrs.ints("axes").unwrap_or(&[]).iter().map(|&x| x.rem_euclid(rank.max(1))).collect();
    axes.sort_unstable();
    (g.values[nd.operands[0]].ty.clone(), axes, nd.attrs.get("keep_dims").cloned())
}

/// The producers of `n`'s operands and `after` values.
fn producers_of(g: &Graph, n: Node) -> impl Iterator<Item = Node> + '_ {
    let nd = &g.nodes[n];
    nd.operands.iter().chain(&nd.control_deps).filter_map(|&v| g.producer(v))
}

fn float_results(g: &Graph, n: Node) -> bool {
    g.nodes[n].results.iter().all(|&v| g.values[v].ty.as_tensor().is_some_and(|t| t.dtype.is_float()))
}

/// A constant cheap enough to copy into every kernel that reads it: one element in the text.
fn inlinable(g: &Graph, v: Value) -> bool {
    constant_of(g, v).and_then(|lit| lit.text_data()).is_some_and(|d| d.len() <= 1)
}

/// Positions in one list of nodes (a region's, in order), held in a table over the graph's
/// arena that is kept from region to region: numbering a list costs its length, not the
/// arena's, and a node not in the list numbered last has no position. Everything the pass
/// keeps per node is then a vector over positions (hash maps of nodes missed the cache on
/// nearly every lookup once a region held a hundred thousand nodes).
#[derive(Default)]
struct Numbering {
    /// Per arena slot: the numbering that last gave the node a position, and the position.
    slots: Vec<(u32, u32)>,
    /// The current numbering (0: none yet).
    stamp: u32,
}

impl Numbering {
    fn number(&mut self, g: &Graph, nodes: &[Node]) {
        self.stamp += 1;
        if self.slots.len() < g.nodes.len() {
            self.slots.resize(g.nodes.len(), (0, 0));
        }
        for (i, &n) in nodes.iter().enumerate() {
            self.slots[n.as_u32() as usize] = (self.stamp, i as u32);
        }
    }

    fn get(&self, n: Node) -> Option<usize> {
        self.slots.get(n.as_u32() as usize).filter(|s| s.0 == self.stamp).map(|s| s.1 as usize)
    }
}

/// `group_of`'s entry for a position in no group.
const NO_GROUP: usize = usize::MAX;

/// Visited marks over positions or groups, all cleared in constant time (a search marks with a
/// stamp of its own), so that a search costs what it visits, not the region's size.
#[derive(Default)]
struct Marks {
    stamps: Vec<u32>,
    current: u32,
}

impl Marks {
    fn clear(&mut self) {
        self.current += 1;
    }

    /// Marks `i`; whether it was not marked yet.
    fn insert(&mut self, i: usize) -> bool {
        if i >= self.stamps.len() {
            self.stamps.resize(i + 1, 0);
        }
        let fresh = self.stamps[i] != self.current;
        self.stamps[i] = self.current;
        fresh
    }
}

fn fuse_region(g: &mut Graph, r: Region, local: &mut Numbering, backend: &dyn Backend) -> Result<bool, String> {
    let nodes = g.regions[r].nodes.clone();
    local.number(g, &nodes);
    // Segments between barriers: barrier k gets 2k+1, the ops after it 2k+2.
    let mut seg = Vec::with_capacity(nodes.len());
    let mut barriers = 0;
    for &n in &nodes {
        let barrier = g.nodes[n].op.is_stateful() || !g.nodes[n].regions.is_empty();
        if barrier {
            seg.push(2 * barriers + 1);
            barriers += 1;
        } else {
            seg.push(2 * barriers);
        }
    }

    let effects = Needs::effects(g, &nodes, local);

    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: Vec<usize> = vec![NO_GROUP; nodes.len()];
    let mut spans = Spans::new(nodes.len());
    let mut marks = (Marks::default(), Marks::default());
    let mut tried = Vec::new();
    for (i, &n) in nodes.iter().enumerate() {
        if !fusible(g, n, backend) {
            continue;
        }
        let op = g.nodes[n].op;
        let mut joined = None;
        tried.clear();
        // A view reads its operand from outside its group (the kernel's buffer): it heads a
        // group of its own, which the ops reading it join.
        let view = is_view(g, n);
        // An op tries the groups of views last, so that a product's epilogue that reads a view
        // stays with the product.
        let mut operands: Vec<Value> = if view { Vec::new() } else { g.nodes[n].operands.clone() };
        operands.sort_by_key(|&v| g.producer(v).is_some_and(|p| is_view(g, p)));
        for &v in &operands {
            let Some(gi) = g.producer(v).and_then(|p| group_at(&group_of, local, p)) else { continue };
            if tried.contains(&gi) {
                continue;
            }
            tried.push(gi);
            let grp = &groups[gi];
            let accepts = match (grp.kind, op.kind()) {
                (_, OpKind::Contraction) => None,
                (Kind::Loop, OpKind::Reduction) => Some(Kind::Input),
                (Kind::Input, OpKind::Reduction) if grp.rows.as_ref() == Some(&row_key(g, n)) => Some(Kind::Input),
                (_, OpKind::Reduction) => None,
                // An epilogue yields floats: a mask computed from the product (a comparison
                // for a gradient's `select`) is left to the kernel that reads it, so the
                // matmul's kernel keeps float results only.
                (Kind::Output, OpKind::Elementwise) if float_results(g, n) => Some(Kind::Output),
                (Kind::Output, _) => None,
                (k, _) => Some(k),
            };
            let Some(kind) = accepts else { continue };
            if grp.seg != seg[i] || grp.device != g.nodes[n].device || grp.effects != effects.id[i] {
                continue;
            }
            let in_group = |m: Node| group_at(&group_of, local, m) == Some(gi);
            let Some(shape) = joined_shape(g, n, grp, &nodes, &in_group) else { continue };
            // Joining is safe unless another operand of `n` depends on the group. (Producers
            // outside the region, which a verified graph has none of, are no path back.)
            let starts: Vec<usize> = g.nodes[n]
                .operands
                .iter()
                .filter_map(|&v| local.get(g.producer(v)?))
                .filter(|&p| group_of[p] != gi)
                .collect();
            if !starts.is_empty() {
                let bound = spans.safe_bound(grp.first);
                let state = Fusion { nodes: &nodes, groups: &groups, group_of: &group_of, local };
                if reaches_target(g, starts.clone(), &|m| group_of[m] == gi, bound, &state, &mut marks) {
                    continue;
                }
            }
            joined = Some((gi, kind, shape, starts));
            break;
        }
        match joined {
            Some((gi, kind, shape, outside)) => {
                let grp = &mut groups[gi];
                grp.members.push(i);
                grp.kind = kind;
                if let Reshape::To(shape) = shape {
                    grp.shape = shape;
                }
                grp.last = i;
                if op.kind() == OpKind::Reduction && grp.rows.is_none() {
                    grp.rows = Some(row_key(g, n));
                }
                if op.kind() == OpKind::Reduction && grp.rows.as_ref().is_some_and(drops_axes) {
                    grp.dropping.push(n);
                }
                // Fusible nodes have no `after` lists: their operands are all they depend on.
                grp.producers.extend(outside);
                group_of[i] = gi;
                spans.record(i, groups[gi].first);
                let mut state = Merging { nodes: &nodes, groups: &mut groups, group_of: &mut group_of, local };
                merge_sibling_groups(g, n, gi, &mut state, &mut spans, &mut marks);
            }
            None => {
                let (kind, shape) = match op.kind() {
                    OpKind::Contraction => (Kind::Output, result_shape(g, n)),
                    OpKind::Reduction => (Kind::Input, operand_shape(g, n)),
                    _ => (Kind::Loop, result_shape(g, n)),
                };
                group_of[i] = groups.len();
                spans.record(i, i);
                groups.push(Group {
                    members: vec![i],
                    kind,
                    first: i,
                    last: i,
                    seg: seg[i],
                    device: g.nodes[n].device.clone(),
                    shape,
                    rows: (op.kind() == OpKind::Reduction).then(|| row_key(g, n)),
                    dropping: (op.kind() == OpKind::Reduction && drops_axes(&row_key(g, n)))
                        .then_some(n)
                        .into_iter()
                        .collect(),
                    effects: effects.id[i],
                    producers: producers_of(g, n).filter_map(|p| local.get(p)).collect(),
                });
            }
        }
    }

    let mut removed = Vec::new();
    let mut renames = Vec::new();
    let mut fusions = HashMap::new();
    let sources = Needs::sources(g, &nodes, local);
    let apart: Vec<usize> = (groups.iter().enumerate())
        .filter(|&(gi, grp)| {
            let in_group = |m: Node| group_at(&group_of, local, m) == Some(gi);
            grp.members.len() >= 2 && !leaving_values_agree(g, grp, &nodes, &in_group, &sources)
        })
        .map(|(gi, _)| gi)
        .collect();
    for gi in apart {
        groups[gi].members.clear();
    }
    // A view stays in its group only where the group's loop reads it as one, and only read
    // there (a view read outside too is a copy anyway).
    for (gi, grp) in groups.iter_mut().enumerate() {
        if grp.members.len() < 2 {
            continue;
        }
        let in_group = |m: Node| group_at(&group_of, local, m) == Some(gi);
        let out = grp.shape.clone().map(|s| graphc_ir::TensorType::new(DType::F32, s));
        let reduced = grp.rows.as_ref().and_then(|(_, axes, _)| axes.first().map(|&a| a as usize));
        // Loops compute f32 values and masks only: a group of other values keeps no view.
        let loop_values = grp.members.iter().all(|&m| {
            (g.nodes[nodes[m]].results.iter())
                .all(|&v| g.values[v].ty.as_tensor().is_some_and(|t| matches!(t.dtype, DType::F32 | DType::Bool)))
        });
        let misfits: Vec<usize> = (grp.members.iter().copied())
            .filter(|&m| is_view(g, nodes[m]))
            .filter(|&m| {
                let fits =
                    loop_values && out.as_ref().is_some_and(|o| crate::lower::plan::view_fits(g, nodes[m], o, reduced));
                !fits || used_outside(g, nodes[m], &in_group)
            })
            .collect();
        if !misfits.is_empty() {
            grp.members.retain(|m| !misfits.contains(m));
            for m in misfits {
                group_of[m] = NO_GROUP;
            }
        }
    }
    // Outlining copies every member: room for the copies up front, not by doubling.
    let copies: usize = groups.iter().map(|grp| grp.members.len()).filter(|&k| k >= 2).sum();
    g.nodes.reserve(copies);
    g.values.reserve(copies);
    let mut copy_of = vec![None; nodes.len()];
    for (gi, grp) in groups.iter_mut().enumerate().filter(|(_, grp)| grp.members.len() >= 2) {
        grp.members.sort_unstable();
        let members = Members { gi, nodes: &nodes, group_of: &group_of, local };
        let (fusion, names) = outline(g, r, grp, &members, &mut copy_of)?;
        fusions.insert(fusion, (grp.seg, grp.last));
        removed.extend(grp.members.iter().map(|&m| nodes[m]));
        renames.extend(names);
    }
    if removed.is_empty() {
        return Ok(false);
    }
    g.remove_nodes(&removed)?;
    for (v, name) in renames {
        g.set_name(v, &name);
    }
    // The order's keys: a node's segment and position, a fusion node's its last member's.
    let key: Vec<Option<(usize, usize)>> = (g.regions[r].nodes.iter())
        .map(|&n| local.get(n).map(|i| (seg[i], i)).or_else(|| fusions.get(&n).copied()))
        .collect();
    reorder(g, r, &key, local);
    Ok(true)
}

/// The group of the node `m` of the region numbered, if any.
fn group_at(group_of: &[usize], local: &Numbering, m: Node) -> Option<usize> {
    local.get(m).map(|i| group_of[i]).filter(|&k| k != NO_GROUP)
}

/// The grouping state `merge_sibling_groups` changes.
struct Merging<'a> {
    nodes: &'a [Node],
    groups: &'a mut [Group],
    group_of: &'a mut [usize],
    local: &'a Numbering,
}

/// After `n` joined group `gi`, pulls in the groups of its other operands when the kinds
/// combine (loop with loop, or loop with one reduction) and no cycle results: DAGs of
/// elementwise ops become one kernel, not one per branch.
fn merge_sibling_groups(
    g: &Graph,
    n: Node,
    mut gi: usize,
    st: &mut Merging<'_>,
    spans: &mut Spans,
    marks: &mut (Marks, Marks),
) {
    for &v in &g.nodes[n].operands {
        let Some(hj) = g.producer(v).and_then(|p| group_at(st.group_of, st.local, p)) else { continue };
        if hj == gi || st.groups[hj].members.is_empty() {
            continue;
        }
        // A view's operand stays outside its group: no merge takes in the operand's producer.
        let views_outside = |a: usize, b: usize| {
            (st.groups[a].members.iter().map(|&m| st.nodes[m]).filter(|&m| is_view(g, m)))
                .all(|m| g.producer(g.nodes[m].operands[0]).and_then(|p| group_at(st.group_of, st.local, p)) != Some(b))
        };
        if !views_outside(gi, hj) || !views_outside(hj, gi) {
            continue;
        }
        let (a, b) = (&st.groups[gi], &st.groups[hj]);
        // A group of views alone (a gather's row read by a product's bias add) joins the
        // product's epilogue, which reads them as it reads any operand.
        let only_views = |grp: &Group| grp.members.iter().all(|&m| is_view(g, st.nodes[m]));
        let kind = match (a.kind, b.kind) {
            (Kind::Output, Kind::Loop) if only_views(b) => Kind::Output,
            (Kind::Loop, Kind::Output) if only_views(a) => Kind::Output,
            (Kind::Loop, Kind::Loop) => Kind::Loop,
            (Kind::Loop, Kind::Input) | (Kind::Input, Kind::Loop) => Kind::Input,
            (Kind::Input, Kind::Input) if a.rows == b.rows => Kind::Input,
            _ => continue,
        };
        if a.seg != b.seg || a.device != b.device || a.effects != b.effects {
            continue;
        }
        // Producers that joined their consumer's group since go, so that failed merges do not
        // scan them again.
        for k in [gi, hj] {
            let group_of = &*st.group_of;
            st.groups[k].producers.retain(|&p| group_of[p] != k);
        }
        let (a, b) = (&st.groups[gi], &st.groups[hj]);
        let in_merged = |m: Node| group_at(st.group_of, st.local, m).is_some_and(|k| k == gi || k == hj);
        let Some(shape) = merged_shape(g, a, b, st.nodes, &in_merged) else { continue };
        // Merging is safe unless one of the two depends on the other through an outside node.
        let merged_at = |p: usize| st.group_of[p] == gi || st.group_of[p] == hj;
        let starts: Vec<usize> = a.producers.iter().chain(&b.producers).copied().filter(|&p| !merged_at(p)).collect();
        if !starts.is_empty() {
            let bound = spans.safe_bound(a.first.min(b.first));
            let state = Fusion { nodes: st.nodes, groups: st.groups, group_of: st.group_of, local: st.local };
            if reaches_target(g, starts, &merged_at, bound, &state, marks) {
                continue;
            }
        }
        // The larger group takes the smaller one's members, so that a node moves O(log n)
        // times at most.
        let groups = &mut *st.groups;
        let (keep, gone) = if groups[gi].members.len() >= groups[hj].members.len() { (gi, hj) } else { (hj, gi) };
        let moved = std::mem::take(&mut groups[gone].members);
        let mut producers = std::mem::take(&mut groups[gone].producers);
        for &m in &moved {
            st.group_of[m] = keep;
        }
        let (first, last, rows) = (groups[gone].first, groups[gone].last, groups[gone].rows.take());
        let dropping = std::mem::take(&mut groups[gone].dropping);
        let grp = &mut groups[keep];
        grp.members.extend(moved);
        if grp.producers.len() < producers.len() {
            std::mem::swap(&mut grp.producers, &mut producers);
        }
        grp.producers.extend(producers);
        grp.kind = kind;
        grp.first = grp.first.min(first);
        grp.last = grp.last.max(last);
        grp.rows = grp.rows.take().or(rows);
        grp.dropping.extend(dropping);
        grp.shape = shape;
        spans.record(grp.last, grp.first);
        gi = keep;
    }
}

/// For each node of a region, what its result needs in order to be computed, interned as an
/// id: a fusion node runs when any of its results is needed, with all its operands, so fusing
/// ops of different needs makes a request that needs one run what only another needs, which
/// the graph as written does not.
///
/// `Needs::effects` counts the nodes that change state or communicate (assign, enqueue,
/// dequeue, send, recv, ... and nodes holding regions): members of one group share them,
/// since running one more would change what the request does (`assign`'s result read by one
/// member, not by the one fetched). `Needs::sources` adds the values a request must provide
/// or read: the region's inputs (a graph input must be fed only when something needed reads
/// it) and variable reads (of a variable that may have no value yet). Values that leave one
/// group must share those, else the group is not formed: one more read or input is harmless
/// inside a chain whose result needs it anyway.
struct Needs {
    /// By position in the region.
    id: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Need {
    Node(Node),
    Input(Value),
}

impl Needs {
    fn effects(g: &Graph, nodes: &[Node], local: &Numbering) -> Needs {
        Needs::of(g, nodes, local, false)
    }

    fn sources(g: &Graph, nodes: &[Node], local: &Numbering) -> Needs {
        Needs::of(g, nodes, local, true)
    }

    /// `nodes` are the region's, numbered by `local`.
    fn of(g: &Graph, nodes: &[Node], local: &Numbering, sources: bool) -> Needs {
        let mut sets: Vec<Vec<Need>> = vec![Vec::new()];
        let mut interned: HashMap<Vec<Need>, usize> = HashMap::from([(Vec::new(), 0)]);
        let mut id: Vec<usize> = Vec::with_capacity(nodes.len());
        let mut ids: Vec<usize> = Vec::new();
        let mut own: Vec<Need> = Vec::new();
        for (i, &n) in nodes.iter().enumerate() {
            ids.clear();
            own.clear();
            let nd = &g.nodes[n];
            for &v in nd.operands.iter().chain(&nd.control_deps) {
                // Producers outside the region are its inputs, as its parameters are (and so
                // are those after the node, in an order no verified graph has).
                let Some((p, at)) = g.producer(v).and_then(|p| Some((p, local.get(p).filter(|&at| at < i)?))) else {
                    if sources && g.producer(v).is_none() {
                        own.push(Need::Input(v));
                    }
                    continue;
                };
                if !ids.contains(&id[at]) {
                    ids.push(id[at]);
                }
                let pd = &g.nodes[p];
                let declaration = matches!(pd.op, Op::Variable | Op::Queue);
                let effect = pd.op.is_stateful() && !declaration && pd.op != Op::Read || !pd.regions.is_empty();
                if effect || sources && pd.op == Op::Read {
                    own.push(Need::Node(p));
                }
            }
            let k = match (ids.as_slice(), own.is_empty()) {
                ([], true) => 0,
                ([k], true) => *k,
                _ => {
                    let mut set: Vec<Need> =
                        ids.iter().flat_map(|&k| sets[k].iter().copied()).chain(own.iter().copied()).collect();
                    set.sort_unstable();
                    set.dedup();
                    *interned.entry(set).or_insert_with_key(|set| {
                        sets.push(set.clone());
                        sets.len() - 1
                    })
                }
            };
            id.push(k);
        }
        Needs { id }
    }
}

/// Whether the values that leave `grp` (read by a node `in_group` rejects, or yielded) all
/// need the same sources (`Needs::sources`).
fn leaving_values_agree(
    g: &Graph,
    grp: &Group,
    nodes: &[Node],
    in_group: &dyn Fn(Node) -> bool,
    sources: &Needs,
) -> bool {
    let mut need = None;
    for &m in &grp.members {
        let leaves = g.nodes[nodes[m]]
            .results
            .iter()
            .any(|&v| g.uses(v).iter().any(|u| u.user().is_none_or(|user| !in_group(user))));
        if leaves && *need.get_or_insert(sources.id[m]) != sources.id[m] {
            return false;
        }
    }
    true
}

fn result_shape(g: &Graph, n: Node) -> IterShape {
    result_dims(g, n).map(<[u64]>::to_vec)
}

fn operand_shape(g: &Graph, n: Node) -> IterShape {
    operand_dims(g, n).map(<[u64]>::to_vec)
}

fn result_dims(g: &Graph, n: Node) -> Option<&[u64]> {
    Some(&g.values[*g.nodes[n].results.first()?].ty.as_tensor()?.shape)
}

fn operand_dims(g: &Graph, n: Node) -> Option<&[u64]> {
    Some(&g.values[*g.nodes[n].operands.first()?].ty.as_tensor()?.shape)
}

/// Whether `n` is a view node (a slice, a gather of one constant index) that joined the
/// fusion as one: the only reindexing ops that do (`fusible`).
fn is_view(g: &Graph, n: Node) -> bool {
    reindexes(g.nodes[n].op)
}

/// Injective ops other than broadcasts move elements to other indices.
fn reindexes(op: Op) -> bool {
    op.kind() == OpKind::Injective && !matches!(op, Op::Broadcast | Op::Identity)
}

/// What becomes of a group's shape when a node joins it.
enum Reshape {
    Keep,
    To(IterShape),
}

/// The group's shape once `n` joins it (a group that `n`'s kind already accepts), or `None` when
/// no kernel could run them together: an epilogue that does not keep the product's shape, a
/// reduction of anything but the shape iterated, an op wider than an input kernel's rows, or
/// one that widens a loop kernel whose narrower values are still read outside it (they would
/// leave the kernel in a shape it does not iterate). `in_group` tells the group's nodes.
fn joined_shape(g: &Graph, n: Node, grp: &Group, nodes: &[Node], in_group: &dyn Fn(Node) -> bool) -> Option<Reshape> {
    let op = g.nodes[n].op;
    if grp.kind == Kind::Output {
        return (result_dims(g, n) == grp.shape.as_deref()).then_some(Reshape::Keep);
    }
    if g.nodes[n].operands.iter().any(|&v| g.producer(v).is_some_and(|p| grp.dropping.contains(&p))) {
        return None;
    }
    if op.kind() == OpKind::Reduction {
        return match &grp.shape {
            None => Some(Reshape::Keep),
            Some(s) => (operand_dims(g, n) == Some(s.as_slice())).then_some(Reshape::Keep),
        };
    }
    let Some(s) = &grp.shape else { return Some(Reshape::Keep) };
    let out = result_dims(g, n)?;
    if broadcasts_to(out, s) {
        return Some(Reshape::Keep);
    }
    let inside = |m: Node| m == n || in_group(m);
    let widens = grp.kind == Kind::Loop && broadcasts_to(s, out);
    (widens && grp.members.iter().all(|&m| !used_outside(g, nodes[m], &inside)))
        .then(|| Reshape::To(Some(out.to_vec())))
}

/// The shape of groups `a` and `b` merged (kinds that combine), or `None` when one does not fit
/// in the other's shape, or when it is narrower and has values read outside the merged group
/// that an input kernel cannot yield (`joined_shape`).
fn merged_shape(
    g: &Graph,
    a: &Group,
    b: &Group,
    nodes: &[Node],
    in_merged: &dyn Fn(Node) -> bool,
) -> Option<IterShape> {
    // No member reads a reduction of the other that drops its axes.
    let reads_dropped =
        |r: &Node| g.nodes[*r].results.iter().any(|&v| g.uses(v).iter().any(|u| u.user().is_some_and(in_merged)));
    if a.dropping.iter().chain(&b.dropping).any(reads_dropped) {
        return None;
    }
    let (Some(x), Some(y)) = (&a.shape, &b.shape) else { return Some(None) };
    let (wide, narrow) =
        if a.kind == Kind::Input || (b.kind != Kind::Input && broadcasts_to(y, x)) { (x, b) } else { (y, a) };
    let narrow_shape = narrow.shape.as_deref().unwrap_or_default();
    if !broadcasts_to(narrow_shape, wide) {
        return None;
    }
    if narrow_shape == wide.as_slice() {
        return Some(Some(wide.clone()));
    }
    // One value per row of the input kernel's reductions (`row_shapes`).
    let rows = a.rows.as_ref().or(b.rows.as_ref()).and_then(row_shapes);
    let yieldable = |m: Node| {
        let s = result_dims(g, m);
        s == Some(wide.as_slice())
            || rows.as_ref().is_some_and(|(kept, dropped)| {
                s == Some(kept.as_slice())
                    || (s == Some(dropped.as_slice()) && g.nodes[m].op.kind() == OpKind::Reduction)
            })
    };
    (narrow.members.iter().map(|&m| nodes[m]))
        .all(|m| yieldable(m) || !used_outside(g, m, in_merged))
        .then(|| Some(wide.clone()))
}

/// Whether a result of `m` is read by a node `inside` rejects or leaves the region.
fn used_outside(g: &Graph, m: Node, inside: &dyn Fn(Node) -> bool) -> bool {
    g.nodes[m].results.iter().any(|&v| g.uses(v).iter().any(|u| u.user().is_none_or(|x| !inside(x))))
}
/// The span of positions of each group, `first..=last`, as the lowest `first` recorded for
/// each `last` (a Fenwick tree over positions from the end): what `safe_bound` asks in
/// logarithmic time. A group records its span whenever it grows; the spans it had before
/// are covered by the one it has, so they never lower an answer.
struct Spans {
    /// 1-based over `len - last`: entry i holds the lowest `first` of its range of ends.
    tree: Vec<usize>,
}

impl Spans {
    fn new(len: usize) -> Spans {
        Spans { tree: vec![usize::MAX; len + 1] }
    }

    fn record(&mut self, last: usize, first: usize) {
        let len = self.tree.len() - 1;
        let mut i = len - last;
        while i <= len {
            self.tree[i] = self.tree[i].min(first);
            i += i & i.wrapping_neg();
        }
    }

    /// The lowest `first` of the groups with a member at `at` or after.
    fn lowest_from(&self, at: usize) -> usize {
        let mut i = (self.tree.len() - 1).saturating_sub(at);
        let mut lowest = usize::MAX;
        while i > 0 {
            lowest = lowest.min(self.tree[i]);
            i -= i & i.wrapping_neg();
        }
        lowest
    }

    /// The position below which nothing can depend on a target whose earliest member is at
    /// `first`, groups counted as single nodes: lowered until no group straddles it (a group
    /// with a member at or after it and one before would let an early node reach the target
    /// through the group's late members).
    fn safe_bound(&self, first: usize) -> usize {
        let mut bound = first;
        loop {
            let lowest = self.lowest_from(bound);
            if lowest >= bound {
                return bound;
            }
            bound = lowest;
        }
    }
}

/// Whether any of `starts` depends on a position `in_target` accepts, with every group
/// contracted to one node (a group depends on everything any of its members does).
fn reaches_target(
    g: &Graph,
    starts: Vec<usize>,
    in_target: &dyn Fn(usize) -> bool,
    bound: usize,
    fusion: &Fusion<'_>,
    (seen, seen_groups): &mut (Marks, Marks),
) -> bool {
    let mut stack = starts;
    seen.clear();
    seen_groups.clear();
    while let Some(m) = stack.pop() {
        if in_target(m) {
            return true;
        }
        if !seen.insert(m) {
            continue;
        }
        match fusion.group_of[m] {
            NO_GROUP => {
                if m < bound {
                    continue;
                }
                stack.extend(producers_of(g, fusion.nodes[m]).filter_map(|p| fusion.local.get(p)));
            }
            h => {
                let grp = &fusion.groups[h];
                if grp.last < bound || !seen_groups.insert(h) {
                    continue;
                }
                stack.extend(&grp.producers);
            }
        }
    }
    false
}

/// The grouping state of one region: its nodes, numbered by `local`, and their groups.
struct Fusion<'a> {
    nodes: &'a [Node],
    groups: &'a [Group],
    group_of: &'a [usize],
    local: &'a Numbering,
}

/// The members of group `gi`, to tell them from other nodes while it is outlined.
struct Members<'a> {
    gi: usize,
    nodes: &'a [Node],
    group_of: &'a [usize],
    local: &'a Numbering,
}

impl Members<'_> {
    /// The position of `n` if it is a member.
    fn position(&self, n: Node) -> Option<usize> {
        self.local.get(n).filter(|&i| self.group_of[i] == self.gi)
    }
}

/// Puts the nodes of fusion `f` of region `r` back in the region, where the fusion was, its
/// results' uses and names going to the values it yielded.
fn inline_fusion(g: &mut Graph, r: Region, f: Node) -> Result<(), String> {
    let at = g.regions[r].nodes.iter().position(|&n| n == f).ok_or("a fusion outside its region")?;
    let kernel = g.nodes[f].regions[0];
    let mut map: HashMap<Value, Value> =
        g.regions[kernel].params.iter().copied().zip(g.nodes[f].operands.iter().copied()).collect();
    let inner = g.regions[kernel].nodes.clone();
    for (k, &m) in inner.iter().enumerate() {
        let nd = &g.nodes[m];
        let operands = (nd.operands.iter())
            .map(|v| map.get(v).copied().ok_or("a kernel value defined outside it"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut spec = NodeSpec::new(nd.op, operands).span(nd.span);
        spec.attrs = nd.attrs.clone();
        spec.device = g.nodes[f].device.clone();
        let copy = g.insert_node(r, at + k, spec).map_err(|e| e.message)?;
        map.extend(g.nodes[m].results.clone().into_iter().zip(g.nodes[copy].results.clone()));
    }
    let yields = g.regions[kernel].yields.clone();
    let mut names = Vec::new();
    for (res, y) in g.nodes[f].results.clone().into_iter().zip(yields) {
        let value = *map.get(&y).ok_or("a kernel yields a value defined outside it")?;
        names.extend(g.values[res].name.clone().map(|n| (value, n)));
        g.replace_all_uses(res, value);
    }
    g.remove_nodes(&[f])?;
    for (v, name) in names {
        g.set_name(v, &name);
    }
    Ok(())
}

/// Builds the fusion node for a group (appended to the region) and points every outside use
/// of the group's values at its results. Returns the node and the names to give its results
/// once the members are gone. `copy_of` (by position) receives each member's copy.
fn outline(
    g: &mut Graph,
    r: Region,
    grp: &Group,
    members: &Members<'_>,
    copy_of: &mut [Option<Node>],
) -> Result<(Node, Vec<(Value, String)>), String> {
    let nodes = members.nodes;
    let mut inputs: Vec<Value> = Vec::new();
    let mut seen: HashSet<Value> = HashSet::new();
    // A view reads a parameter of its own, even where the kernel reads its operand otherwise
    // too: the loop reads that parameter through the view's strides (`plan::view`).
    let mut view_param: HashMap<Node, usize> = HashMap::new();
    for &m in &grp.members {
        let nd = &g.nodes[nodes[m]];
        if is_view(g, nodes[m]) {
            view_param.insert(nodes[m], inputs.len());
            inputs.push(nd.operands[0]);
        }
    }
    for &m in &grp.members {
        let nd = &g.nodes[nodes[m]];
        // A product's or convolution's operands stay kernel inputs even when constant: the run
        // half reads them as buffers (a splat weight copied in would leave the head without one).
        let contraction = matches!(nd.op, Op::MatMul | Op::Conv | Op::ConvInputGrad);
        let skip = usize::from(is_view(g, nodes[m]));
        for &v in &nd.operands[skip..] {
            let internal =
                g.producer(v).is_some_and(|p| members.position(p).is_some()) || (!contraction && inlinable(g, v));
            if !internal && seen.insert(v) {
                inputs.push(v);
            }
        }
    }
    let mut outputs: Vec<Value> = Vec::new();
    for &m in &grp.members {
        for &v in &g.nodes[nodes[m]].results {
            if g.uses(v).iter().any(|u| u.user().is_none_or(|n| members.position(n).is_none())) {
                outputs.push(v);
            }
        }
    }
    let types: Vec<Type> = inputs.iter().map(|&v| g.values[v].ty.clone()).collect();
    let kernel = g.new_region("kernel", &types);
    // The kernel's values for the members' results (through `copy_of`), and for the inputs and
    // the constants copied in.
    let params = g.regions[kernel].params.clone();
    let mut map: HashMap<Value, Value> = (inputs.iter().copied().zip(params.iter().copied()).enumerate())
        .filter(|(i, _)| !view_param.values().any(|k| k == i))
        .map(|(_, vp)| vp)
        .collect();
    let inner_of = |g: &Graph, copy_of: &[Option<Node>], v: Value| match g.values[v].def {
        ValueDef::Result(p, k) => Some(g.nodes[copy_of[members.position(p)?]?].results[k as usize]),
        ValueDef::Param(..) => None,
    };
    for &m in &grp.members {
        let n = nodes[m];
        let mut operands = Vec::with_capacity(g.nodes[n].operands.len());
        for k in 0..g.nodes[n].operands.len() {
            let v = g.nodes[n].operands[k];
            if let (0, Some(&i)) = (k, view_param.get(&n)) {
                operands.push(params[i]);
                continue;
            }
            if let Some(inner) = inner_of(g, copy_of, v) {
                operands.push(inner);
                continue;
            }
            let inner = match map.entry(v) {
                Entry::Occupied(e) => *e.get(),
                Entry::Vacant(e) => {
                    // An inlinable constant: copy it in.
                    let lit = constant_of(g, v)
                        .cloned()
                        .ok_or("a kernel operand is neither inside, an input nor a constant")?;
                    let c = g.add_node(kernel, NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(lit)));
                    *e.insert(g.nodes[c.map_err(|e| e.message)?].results[0])
                }
            };
            operands.push(inner);
        }
        // The member keeps its source location: a run-time error inside the kernel (one the
        // interpreter runs node by node) names the line it came from.
        let nd = &g.nodes[n];
        let mut spec = NodeSpec::new(nd.op, operands).span(nd.span);
        spec.attrs = nd.attrs.clone();
        copy_of[m] = Some(g.add_node(kernel, spec).map_err(|e| e.message)?);
    }
    let yields = outputs.iter().map(|&v| inner_of(g, copy_of, v).expect("an output is a member's result")).collect();
    g.set_yields(kernel, yields);
    let mut spec =
        NodeSpec::new(Op::Fusion, inputs).regions(vec![kernel]).attr("kind", Attr::Str(grp.kind.name().into()));
    spec.device = grp.device.clone();
    // The fusion is located at its last member (the value it computes), for errors of the
    // kernel as a whole.
    if let Some(&last) = grp.members.last() {
        spec = spec.span(g.nodes[nodes[last]].span);
    }
    let fusion = g.add_node(r, spec).map_err(|e| e.message)?;
    let mut names = Vec::new();
    for (k, &old) in outputs.iter().enumerate() {
        let new = g.nodes[fusion].results[k];
        if let Some(name) = g.values[old].name.clone() {
            names.push((new, name));
        }
        g.replace_all_uses(old, new);
    }
    Ok((fusion, names))
}

/// Orders the region's nodes topologically, preferring the old order: by `key` (per node of
/// the region, in order: segment, so stateful ops keep their order, then position; a fusion
/// node takes its last member's).
fn reorder(g: &mut Graph, r: Region, key: &[Option<(usize, usize)>], local: &mut Numbering) {
    let nodes = std::mem::take(&mut g.regions[r].nodes);
    local.number(g, &nodes);
    let len = nodes.len();
    // Each node's distinct producers in the region, then each node's consumers, in order, as
    // one array (indexed by `start`).
    let mut indegree = vec![0usize; len];
    let mut edges: Vec<(usize, usize)> = Vec::new();
    let mut preds = Vec::new();
    for (i, &n) in nodes.iter().enumerate() {
        let nd = &g.nodes[n];
        preds.clear();
        preds.extend(nd.operands.iter().chain(&nd.control_deps).filter_map(|&v| local.get(g.producer(v)?)));
        preds.sort_unstable();
        preds.dedup();
        indegree[i] = preds.len();
        edges.extend(preds.iter().map(|&p| (p, i)));
    }
    let mut start = vec![0usize; len + 1];
    for &(p, _) in &edges {
        start[p + 1] += 1;
    }
    for i in 0..len {
        start[i + 1] += start[i];
    }
    let mut consumers = vec![0usize; edges.len()];
    let mut fill = start.clone();
    for &(p, c) in &edges {
        consumers[fill[p]] = c;
        fill[p] += 1;
    }
    let prio = |i: usize| Reverse((key[i].unwrap_or((usize::MAX, i)), i));
    let mut ready: BinaryHeap<Reverse<((usize, usize), usize)>> =
        (0..len).filter(|&i| indegree[i] == 0).map(prio).collect();
    let mut order = Vec::with_capacity(len);
    while let Some(Reverse((_, i))) = ready.pop() {
        order.push(nodes[i]);
        for &c in &consumers[start[i]..start[i + 1]] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                ready.push(prio(c));
            }
        }
    }
    debug_assert_eq!(order.len(), len, "fusion never creates a cycle");
    g.regions[r].nodes = if order.len() == len { order } else { nodes };
}
