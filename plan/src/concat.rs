//! Concats the run half copies into pooled buffers, and the chains of them that append in
//! place: DenseNet's dense blocks concat each layer's features onto all the block's earlier
//! ones (`c1 = concat(c0, y1)`, `c2 = concat(c1, y2)`, ...). A concat copying every operand
//! afresh moves the whole block's features again per layer (a cost quadratic in its depth);
//! where the result is one block (the dims before the axis are all 1) and the next concat of
//! the chain is the last reader of this one's result, the next one can append to this one's
//! buffer instead, if that buffer has room. The plan says how much room to make: the size of
//! the chain's last concat.

use graphc_ir::{DType, Graph, Node, Op, TensorType, Use, Value};

/// A concat of f32 tensors along one axis: `outer` blocks (the product of the dims before the
/// axis), each the inputs' rows of `rows[i]` elements (the product of their dims from the
/// axis) in turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcatPlan {
    pub inputs: Vec<TensorType>,
    pub out: TensorType,
    pub outer: usize,
    pub rows: Vec<usize>,
    /// The elements to make room for in the result's buffer: its own, or where a later concat
    /// of a chain appends to it, the chain's last result's.
    pub reserve: usize,
}

/// The plan for a `concat` of f32 tensors of static shapes with a non-empty result, or `None`
/// (it stays with the reference kernel).
pub fn concat_plan(g: &Graph, node: Node) -> Option<ConcatPlan> {
    let (out, outer, rows) = layout(g, node)?;
    let mut reserve = out.num_elements()? as usize;
    // Follow the chain: while the result is one block, read last by a concat that puts it
    // first. Each link is a later node of the region, so the walk ends.
    let mut at = node;
    while let Some(next) = appended_by(g, at).filter(|_| outer == 1) {
        match layout(g, next) {
            Some((o, 1, _)) => reserve = reserve.max(o.num_elements()? as usize),
            _ => break,
        }
        at = next;
    }
    let inputs = g.nodes[node].operands.iter().map(|&v| g.values[v].ty.as_tensor().cloned()).collect::<Option<_>>()?;
    Some(ConcatPlan { inputs, out, outer, rows, reserve })
}

/// A concat's result type, its blocks and each operand's rows, when it is one the run half
/// copies: f32 operands of the result's rank, every size (in bytes too) within isize.
fn layout(g: &Graph, node: Node) -> Option<(TensorType, usize, Vec<usize>)> {
    let nd = &g.nodes[node];
    if nd.op != Op::Concat || nd.operands.is_empty() || nd.results.len() != 1 {
        return None;
    }
    let out = g.values[nd.results[0]].ty.as_tensor()?.clone();
    let elements = out.num_elements()?;
    if out.dtype != DType::F32 || elements == 0 || elements.checked_mul(4)? > isize::MAX as u64 {
        return None;
    }
    let axis = graphc_ir::shape::normalize_axis(nd.attrs.int("axis")?, out.rank()).ok()?;
    let outer = usize::try_from(out.shape[..axis].iter().product::<u64>()).ok()?;
    let mut rows = Vec::with_capacity(nd.operands.len());
    for &v in &nd.operands {
        let t = g.values[v].ty.as_tensor()?;
        if t.dtype != DType::F32
            || t.rank() != out.rank()
            || t.shape[..axis] != out.shape[..axis]
            || t.shape[axis + 1..] != out.shape[axis + 1..]
        {
            return None;
        }
        rows.push(usize::try_from(t.shape[axis..].iter().product::<u64>()).ok()?);
    }
    // The type rule made the result the operands' sum along the axis; a plan does not trust
    // that blindly, since the run half copies by these sizes.
    if rows.iter().try_fold(0usize, |a, &r| a.checked_add(r))?.checked_mul(outer)? as u64 != elements {
        return None;
    }
    Some((out, outer, rows))
}

/// The concat that appends to `node`'s result: the node of the same region that reads it
/// as its first operand, after every other reader (so by then nothing else needs it).
fn appended_by(g: &Graph, node: Node) -> Option<Node> {
    let result: Value = *g.nodes[node].results.first()?;
    let region = &g.regions[g.nodes[node].parent].nodes;
    let position = |n: Node| region.iter().position(|&m| m == n);
    let mut last: Option<(usize, Use)> = None;
    for &u in g.uses(result) {
        // A yield or a reader elsewhere keeps the result alive past any concat here.
        let at = position(u.user()?)?;
        if last.is_none_or(|(p, _)| at >= p) {
            last = Some((at, u));
        }
    }
    match last? {
        (_, Use::Operand(next, 0))
            if g.nodes[next].op == Op::Concat && g.nodes[next].operands[1..].iter().all(|&v| v != result) =>
        {
            Some(next)
        }
        _ => None,
    }
}
