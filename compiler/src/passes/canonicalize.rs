//! Canonicalization: local rewrites to simpler equivalent forms, repeated until none applies.
//!
//! - Identities: `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1`, `x ^ 1` (splat constants,
//!   when the result has `x`'s type; `x + 0.0` may turn `-0.0` into `0.0`'s neighbour `-0.0`,
//!   which compares equal), `identity` without `after`, casts to the same dtype, reshapes and
//!   broadcasts to the operand's own shape, identity transposes, empty reductions, full slices,
//!   `select` on a constant condition.
//! - Chains: transpose of transpose composes (vanishing when the composition is the identity),
//!   reshape of reshape and broadcast of broadcast keep only the last; a `matmul` factor that
//!   is a `transpose` swapping its last two dims (the others in place) becomes the matmul's
//!   `transpose_a`/`transpose_b` flag, toggled (the transpose stays if others use it); but a
//!   factor of constants alone read through a flag becomes a transpose of it (computed once
//!   per session) and the flag goes.
//! - Implicit broadcasts: an elementwise op whose operand is an explicit `broadcast` takes the
//!   broadcast's input when numpy broadcasting gives the same result type.
//! - Composites: `softmax` expands to reduce_max, sub, exp, reduce_sum and div, so fusion sees
//!   its parts.
//!
//! Nodes with `after` lists are left alone (apart from being replaced as values).

use super::manager::Pass;
use super::rewrite::{constant_of, is_splat_of, place_before, regions, remove_dead, splat_value, step_invariant};
use graphc_ir::{Attr, Attrs, Graph, Node, NodeSpec, Op, OpKind, Region, Value};
use std::collections::HashMap;

#[derive(Debug)]
pub struct Canonicalize;

/// Rounds of rewriting before giving up on reaching a fixed point.
const MAX_ROUNDS: usize = 16;

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut changed = false;
        for _ in 0..MAX_ROUNDS {
            let mut round = false;
            let mut renames = Vec::new();
            for r in regions(g) {
                round |= rewrite_region(g, r, &mut renames)?;
            }
            if round {
                remove_dead(g)?;
                // A rewritten value keeps its name once the node it replaced is gone (the first
                // name, when several went), unless a later rewrite of the round left it dead:
                // a name on a value no node makes would resolve to nothing that runs.
                for (v, name) in renames {
                    if g.value_named(&name).is_none() && g.values[v].name.is_none() && is_live(g, v) {
                        g.set_name(v, &name);
                    }
                }
            }
            changed |= round;
            if !round {
                break;
            }
        }
        Ok(changed)
    }
}

/// What a node becomes.
enum Rewrite {
    /// Its (single) result is this existing value.
    Value(Value),
    /// New nodes, in order; the last one's results replace the node's.
    Nodes(Vec<NewNode>),
}

/// An operand of a new node: an existing value, or result 0 of an earlier new node of the
/// same rewrite.
#[derive(Clone, Copy)]
enum Arg {
    Old(Value),
    New(usize),
}

/// A node a rewrite adds (with the rewritten node's device).
struct NewNode {
    op: Op,
    args: Vec<Arg>,
    attrs: Attrs,
}

impl NewNode {
    fn new(op: Op, args: Vec<Arg>) -> Self {
        NewNode { op, args, attrs: Attrs::new() }
    }

    fn of(op: Op, operands: &[Value]) -> Self {
        Self::new(op, operands.iter().map(|&v| Arg::Old(v)).collect())
    }

    fn attr(mut self, name: &str, value: Attr) -> Self {
        self.attrs.set(name, value);
        self
    }
}

/// Whether `v` is still made in the graph: a region's parameter, or a result of a node that is
/// still in its region (the arena keeps removed nodes' values).
fn is_live(g: &Graph, v: Value) -> bool {
    match g.values[v].def {
        graphc_ir::ValueDef::Param(..) => true,
        graphc_ir::ValueDef::Result(n, _) => g.regions[g.nodes[n].parent].nodes.contains(&n),
    }
}

fn rewrite_region(g: &mut Graph, r: Region, renames: &mut Vec<(Value, String)>) -> Result<bool, String> {
    let mut before: HashMap<Node, Vec<Node>> = HashMap::new();
    let mut changed = false;
    for n in g.regions[r].nodes.clone() {
        let Some(rw) = rule(g, n) else { continue };
        let old = g.nodes[n].results.clone();
        match rw {
            Rewrite::Value(v) => {
                // The kept value takes the name of the one it replaces if it has none (an
                // imported op's output name, on an identity or a no-op add, say).
                if let Some(name) = g.values[old[0]].name.clone().filter(|_| g.values[v].name.is_none()) {
                    renames.push((v, name));
                }
                g.replace_all_uses(old[0], v)
            }
            Rewrite::Nodes(specs) => {
                let device = g.nodes[n].device.clone();
                let mut added = Vec::new();
                let mut last = Vec::new();
                for new in specs {
                    let operands = new
                        .args
                        .iter()
                        .map(|&a| match a {
                            Arg::Old(v) => v,
                            Arg::New(i) => g.nodes[added[i]].results[0],
                        })
                        .collect::<Vec<Value>>();
                    let mut spec = NodeSpec::new(new.op, operands);
                    spec.attrs = new.attrs;
                    spec.device = device.clone();
                    let m = g.add_node(r, spec).map_err(|e| e.message)?;
                    last = g.nodes[m].results.clone();
                    added.push(m);
                }
                for (o, nw) in old.into_iter().zip(last) {
                    if let Some(name) = g.values[o].name.clone() {
                        renames.push((nw, name));
                    }
                    g.replace_all_uses(o, nw);
                }
                before.insert(n, added);
            }
        }
        changed = true;
    }
    place_before(g, r, &before);
    Ok(changed)
}

fn rule(g: &Graph, n: Node) -> Option<Rewrite> {
    let nd = &g.nodes[n];
    if !nd.control_deps.is_empty() || nd.op.is_stateful() {
        return None;
    }
    let ty = |v: Value| &g.values[v].ty;
    let result = *nd.results.first()?;
    let same = |v: Value| ty(v) == ty(result);
    let ops = &nd.operands;
    // A no-op that names a device is a device move (an `identity` placed elsewhere): it stays
    // unless its operand is already on that device.
    let device_of = |v: Value| g.producer(v).and_then(|p| g.nodes[p].device.as_ref());
    let keep = |v: Value| {
        (same(v) && (nd.device.is_none() || nd.device.as_ref() == device_of(v))).then_some(Rewrite::Value(v))
    };
    // In floats `x + 0` is not `x`: `-0 + +0` is `+0`. `x + -0` and `x - +0` are `x` for every
    // x, NaN and -0 included; integers have one zero.
    let float = ty(result).as_tensor().is_some_and(|t| t.dtype.is_float());
    let adds_nothing = |v: Value| is_splat_of(g, v, -0.0) || !float && is_splat_of(g, v, 0.0);
    let subtracts_nothing = |v: Value| is_splat_of(g, v, 0.0) || !float && is_splat_of(g, v, -0.0);
    let one = |v: Value| is_splat_of(g, v, 1.0);
    let def = |v: Value| g.producer(v).map(|p| &g.nodes[p]).filter(|p| p.control_deps.is_empty());
    match nd.op {
        Op::Add if adds_nothing(ops[1]) => keep(ops[0]),
        Op::Add if adds_nothing(ops[0]) => keep(ops[1]),
        Op::Sub if subtracts_nothing(ops[1]) => keep(ops[0]),
        Op::Mul if one(ops[1]) => keep(ops[0]),
        Op::Mul if one(ops[0]) => keep(ops[1]),
        Op::Div | Op::Pow if one(ops[1]) => keep(ops[0]),
        Op::Identity | Op::Cast | Op::Reshape | Op::Broadcast if same(ops[0]) => keep(ops[0]),
        Op::ReduceSum | Op::ReduceMean | Op::ReduceMax | Op::ReduceMin | Op::ReduceProd
            if nd.attrs.ints("axes") == Some(&[]) =>
        {
            keep(ops[0])
        }
        Op::Slice if same(ops[0]) && nd.attrs.ints("steps").is_none_or(|s| s.iter().all(|&x| x == 1)) => keep(ops[0]),
        Op::Select => {
            let c = constant_of(g, ops[0]).and_then(splat_value)?;
            keep(if c != 0.0 { ops[1] } else { ops[2] })
        }
        Op::Transpose => {
            let perm = nd.attrs.ints("perm")?;
            if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                return keep(ops[0]);
            }
            let inner = def(ops[0]).filter(|p| p.op == Op::Transpose)?;
            let first = inner.attrs.ints("perm")?;
            let composed: Vec<i64> = perm.iter().map(|&p| first[p as usize]).collect();
            if composed.iter().enumerate().all(|(i, &p)| p == i as i64) {
                return keep(inner.operands[0]);
            }
            Some(Rewrite::Nodes(vec![
                NewNode::of(Op::Transpose, &[inner.operands[0]]).attr("perm", Attr::Ints(composed))
            ]))
        }
        Op::MatMul => {
            // A factor that is a transpose of its last two dims is the product's flag: the
            // product reads the transpose's operand with the flag toggled (the transpose
            // stays while something else uses it). Except for a factor of constants alone (a
            // weight), the other way round: it is stored as the product reads it, a transpose
            // that sessions compute once and keep, so no step repacks it.
            let mut args: Vec<Arg> = ops.iter().map(|&v| Arg::Old(v)).collect();
            let mut attrs = nd.attrs.clone();
            let mut new = Vec::new();
            for (i, flag) in [(0, "transpose_a"), (1, "transpose_b")] {
                let flagged = nd.attrs.bool(flag).unwrap_or(false);
                let swap =
                    |p: &&graphc_ir::graph::NodeData| p.op == Op::Transpose && swaps_last_two(p.attrs.ints("perm"));
                if let Some(t) = def(ops[i]).filter(swap).filter(|t| !step_invariant(g, t.operands[0])) {
                    args[i] = Arg::Old(t.operands[0]);
                    attrs.set(flag, Attr::Bool(!flagged));
                } else if flagged && step_invariant(g, ops[i]) && ty(ops[i]).as_tensor().is_some_and(|t| t.rank() >= 2)
                {
                    let rank = ty(ops[i]).as_tensor()?.rank() as i64;
                    let mut perm: Vec<i64> = (0..rank).collect();
                    perm.swap(rank as usize - 2, rank as usize - 1);
                    new.push(NewNode::of(Op::Transpose, &[ops[i]]).attr("perm", Attr::Ints(perm)));
                    args[i] = Arg::New(new.len() - 1);
                    attrs.set(flag, Attr::Bool(false));
                }
            }
            if attrs == nd.attrs {
                return None;
            }
            let mut product = NewNode::new(Op::MatMul, args);
            product.attrs = attrs;
            new.push(product);
            Some(Rewrite::Nodes(new))
        }
        Op::Reshape | Op::Broadcast => {
            let inner = def(ops[0]).filter(|p| p.op == nd.op)?;
            let shape = nd.attrs.ints("shape")?.to_vec();
            if same(inner.operands[0]) {
                return keep(inner.operands[0]);
            }
            Some(Rewrite::Nodes(vec![NewNode::of(nd.op, &[inner.operands[0]]).attr("shape", Attr::Ints(shape))]))
        }
        Op::Softmax => {
            let axis = nd.attrs.int("axis").unwrap_or(-1);
            let x = Arg::Old(ops[0]);
            let reduce = |op: Op, a: Arg| {
                NewNode::new(op, vec![a]).attr("axes", Attr::Ints(vec![axis])).attr("keep_dims", Attr::Bool(true))
            };
            Some(Rewrite::Nodes(vec![
                reduce(Op::ReduceMax, x),
                NewNode::new(Op::Sub, vec![x, Arg::New(0)]),
                NewNode::new(Op::Exp, vec![Arg::New(1)]),
                reduce(Op::ReduceSum, Arg::New(2)),
                NewNode::new(Op::Div, vec![Arg::New(2), Arg::New(3)]),
            ]))
        }
        op if op.kind() == OpKind::Elementwise && ops.len() > 1 => {
            // Drop an explicit broadcast that implicit broadcasting makes redundant.
            for (i, &v) in ops.iter().enumerate() {
                let Some(b) = def(v).filter(|p| p.op == Op::Broadcast) else { continue };
                let mut operands = ops.clone();
                operands[i] = b.operands[0];
                let types = g.infer(op, &operands, &nd.attrs, &[], None).ok()?;
                if types.first() == Some(ty(result)) {
                    let mut new = NewNode::of(op, &operands);
                    new.attrs = nd.attrs.clone();
                    return Some(Rewrite::Nodes(vec![new]));
                }
            }
            None
        }
        _ => None,
    }
}

/// Whether `perm` swaps the last two dims and keeps every other in place (a matrix transpose
/// of each batch element: a matmul's flag).
fn swaps_last_two(perm: Option<&[i64]>) -> bool {
    let Some(perm) = perm else { return false };
    let r = perm.len() as i64;
    let swapped = |i: i64| {
        if i == r - 2 {
            r - 1
        } else if i == r - 1 {
            r - 2
        } else {
            i
        }
    };
    r >= 2 && perm.iter().zip(0..).all(|(&p, i)| p == swapped(i))
}
