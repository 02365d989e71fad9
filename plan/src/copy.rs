//! Data movement as strided copies: `transpose`, `slice`, `split`, `pad`, `reshape` and
//! `broadcast` each write their result's elements from the input's at offsets that are an
//! affine function of the index, so one plan covers them all: per result, a box of dims and,
//! per dim, a stride into the input and one into the result. Dims that run on in both tensors
//! are merged, so a transpose of `[1,S,H,D]` to `[1,H,S,D]` copies whole rows of `D`, and a
//! reshape is one run (which the run half hands over without copying where it may). `gather`
//! picks whole rows by run-time indices and has its own plan.

use graphc_ir::{DType, Graph, Node, Op, TensorType};

/// The strided copy of one result: for every index `i` of the box `dims`, result element
/// `out_offset + Σ i[d]·out_strides[d]` is input element `in_offset + Σ i[d]·in_strides[d]`.
/// Result elements outside the box (a pad's) hold the fill operand's value; without one the box
/// is the whole result, written once in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyPart {
    pub out: TensorType,
    pub dims: Vec<usize>,
    pub in_strides: Vec<usize>,
    pub out_strides: Vec<usize>,
    pub in_offset: usize,
    pub out_offset: usize,
}

impl CopyPart {
    /// The result's element count.
    pub fn len(&self) -> usize {
        self.out.num_elements().map_or(0, |n| n as usize)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the result is the input's elements as they are (a reshape, dims merged into
    /// one run): its buffer can be handed over.
    pub fn is_whole(&self, input_len: usize) -> bool {
        self.len() == input_len
            && self.dims == [input_len]
            && (self.in_strides == [1] && self.out_strides == [1])
            && (self.in_offset, self.out_offset) == (0, 0)
    }

    /// One past the last input element the box reads (0 for an empty box).
    pub fn in_reach(&self) -> usize {
        reach(&self.dims, &self.in_strides, self.in_offset)
    }

    /// One past the last result element the box writes.
    pub fn out_reach(&self) -> usize {
        reach(&self.dims, &self.out_strides, self.out_offset)
    }
}

fn reach(dims: &[usize], strides: &[usize], offset: usize) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    offset + dims.iter().zip(strides).map(|(&n, &s)| (n - 1) * s).sum::<usize>() + 1
}

/// A data-movement node as strided copies, one part per result.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyPlan {
    pub op: Op,
    pub input: TensorType,
    pub parts: Vec<CopyPart>,
    /// A pad's fill value is its operand 1 (a scalar).
    pub fill: bool,
}

/// `gather` along `axis` of data of any dtype viewed as `[outer, n, inner]`, by i32 or i64 indices
/// (any shape, `k` elements): the result `[outer, k, inner]` is whole rows of `inner`.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherPlan {
    pub data: TensorType,
    pub indices: TensorType,
    pub out: TensorType,
    pub axis: usize,
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

/// Row-major strides of `dims`.
fn row_major(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// A tensor's static dims, when its bytes fit in isize.
fn sizes(t: &TensorType) -> Option<Vec<usize>> {
    let n = t.num_elements()?;
    if n.checked_mul(4)? > isize::MAX as u64 {
        return None;
    }
    t.shape.iter().map(|&d| usize::try_from(d).ok()).collect()
}

/// The part that copies box `dims` with these strides, with dims of one element dropped and
/// dims that run on in both tensors merged.
fn part(
    out: &TensorType,
    dims: &[usize],
    ins: &[usize],
    outs: &[usize],
    in_offset: usize,
    out_offset: usize,
) -> CopyPart {
    let mut merged: Vec<(usize, usize, usize)> = Vec::new();
    for ((&n, &i), &o) in dims.iter().zip(ins).zip(outs) {
        if n == 1 {
            continue;
        }
        match merged.last_mut() {
            Some(last) if last.1 == i * n && last.2 == o * n => {
                last.0 *= n;
                last.1 = i;
                last.2 = o;
            }
            _ => merged.push((n, i, o)),
        }
    }
    if dims.contains(&0) {
        merged = vec![(0, 1, 1)];
    } else if merged.is_empty() {
        // One element.
        merged = vec![(1, 1, 1)];
    }
    CopyPart {
        out: out.clone(),
        dims: merged.iter().map(|m| m.0).collect(),
        in_strides: merged.iter().map(|m| m.1).collect(),
        out_strides: merged.iter().map(|m| m.2).collect(),
        in_offset,
        out_offset,
    }
}

/// The plan for a `transpose`, `slice`, `split`, `pad`, `reshape` or `broadcast` of a
/// non-empty tensor (of any dtype) with static shapes, or `None` (it stays with the reference kernel).
/// Every part's reach is checked against the sizes here, whatever verified the graph: the run
/// half indexes the buffers by it.
pub fn copy_plan(g: &Graph, node: Node) -> Option<CopyPlan> {
    let nd = &g.nodes[node];
    if !matches!(nd.op, Op::Transpose | Op::Slice | Op::Split | Op::Pad | Op::Reshape | Op::Broadcast)
        || nd.operands.is_empty()
        || nd.results.is_empty()
    {
        return None;
    }
    let input = g.values[nd.operands[0]].ty.as_tensor()?.clone();
    let outs: Vec<TensorType> =
        nd.results.iter().map(|&v| g.values[v].ty.as_tensor().cloned()).collect::<Option<_>>()?;
    if outs.iter().any(|t| t.dtype != input.dtype) {
        return None;
    }
    let shape = sizes(&input)?;
    let in_len: usize = shape.iter().product();
    if in_len == 0 {
        return None;
    }
    let out_shapes: Vec<Vec<usize>> = outs.iter().map(sizes).collect::<Option<_>>()?;
    let rank = shape.len();
    let strides = row_major(&shape);
    let ints = |name: &str| nd.attrs.ints(name);
    let mut fill = false;
    let parts = match nd.op {
        Op::Reshape => {
            let (out, os) = (&outs[0], &out_shapes[0]);
            if os.iter().product::<usize>() != in_len {
                return None;
            }
            vec![part(out, &[in_len], &[1], &[1], 0, 0)]
        }
        Op::Broadcast => {
            let os = &out_shapes[0];
            if os.len() < rank {
                return None;
            }
            let lead = os.len() - rank;
            let mut ins = vec![0; os.len()];
            for d in 0..rank {
                match (shape[d], os[lead + d]) {
                    (a, b) if a == b => ins[lead + d] = strides[d],
                    (1, _) => {}
                    _ => return None,
                }
            }
            vec![part(&outs[0], os, &ins, &row_major(os), 0, 0)]
        }
        Op::Transpose => {
            let perm: Vec<usize> = ints("perm")?.iter().map(|&p| usize::try_from(p).ok()).collect::<Option<_>>()?;
            let mut seen = vec![false; rank];
            if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
                return None;
            }
            let os = &out_shapes[0];
            if perm.iter().map(|&p| shape[p]).collect::<Vec<_>>() != *os {
                return None;
            }
            let ins: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
            vec![part(&outs[0], os, &ins, &row_major(os), 0, 0)]
        }
        Op::Slice => {
            let (starts, ends) = (ints("starts")?, ints("ends")?);
            let steps = nd.attrs.ints("steps");
            if starts.len() != rank || ends.len() != rank || steps.is_some_and(|s| s.len() != rank) {
                return None;
            }
            let (mut dims, mut ins, mut offset) = (Vec::with_capacity(rank), Vec::with_capacity(rank), 0usize);
            for d in 0..rank {
                // As the reference resolves them: negative bounds count from the end, then clamp.
                let step = steps.map_or(1, |s| s[d]);
                let dim = shape[d] as i64;
                let resolve = |i: i64| (if i < 0 { i.checked_add(dim) } else { Some(i) }).map(|i| i.clamp(0, dim));
                let (start, end) = (resolve(starts[d])?, resolve(ends[d])?);
                if step < 1 {
                    return None;
                }
                let n = if end > start { (end - start - 1) / step + 1 } else { 0 };
                dims.push(n as usize);
                // A dim of one element is dropped, whatever its step.
                ins.push(if n > 1 { strides[d].checked_mul(usize::try_from(step).ok()?)? } else { 0 });
                offset += start as usize * strides[d];
            }
            if dims != out_shapes[0] || dims.contains(&0) {
                return None;
            }
            let p = part(&outs[0], &dims, &ins, &row_major(&dims), offset, 0);
            vec![p]
        }
        Op::Split => {
            let axis = graphc_ir::shape::normalize_axis(nd.attrs.int("axis")?, rank).ok()?;
            let split_sizes = ints("sizes")?;
            if split_sizes.len() != outs.len() {
                return None;
            }
            let mut parts = Vec::with_capacity(outs.len());
            let mut at = 0usize;
            for (k, &s) in split_sizes.iter().enumerate() {
                let s = usize::try_from(s).ok()?;
                let mut dims = shape.clone();
                dims[axis] = s;
                if dims != out_shapes[k] || dims.contains(&0) {
                    return None;
                }
                parts.push(part(&outs[k], &dims, &strides, &row_major(&dims), at * strides[axis], 0));
                at += s;
            }
            if at != shape[axis] {
                return None;
            }
            parts
        }
        Op::Pad => {
            let (low, high) = (ints("low")?, ints("high")?);
            let interior = nd.attrs.ints("interior");
            if nd.operands.len() != 2
                || low.len() != rank
                || high.len() != rank
                || interior.is_some_and(|i| i.len() != rank)
                || g.values[nd.operands[1]].ty.as_tensor().is_none_or(|t| t.dtype != input.dtype || t.rank() != 0)
            {
                return None;
            }
            let os = &out_shapes[0];
            let ostrides = row_major(os);
            let (mut outs_s, mut offset) = (Vec::with_capacity(rank), 0usize);
            for d in 0..rank {
                let lo = usize::try_from(low[d]).ok()?;
                let hi = usize::try_from(high[d]).ok()?;
                let gap = usize::try_from(interior.map_or(0, |i| i[d])).ok()?;
                let size = lo.checked_add(hi)?.checked_add(shape[d].checked_add((shape[d] - 1).checked_mul(gap)?)?)?;
                if size != os[d] {
                    return None;
                }
                outs_s.push(ostrides[d].checked_mul(gap + 1)?);
                offset += lo * ostrides[d];
            }
            fill = true;
            vec![part(&outs[0], &shape, &strides, &outs_s, 0, offset)]
        }
        _ => return None,
    };
    let fits = parts.iter().all(|p| p.in_reach() <= in_len && p.out_reach() <= p.len() && !p.is_empty());
    fits.then_some(CopyPlan { op: nd.op, input, parts, fill })
}

/// The plan for a `gather` of a non-empty tensor by i32 or i64 indices, static shapes,
/// or `None` (it stays with the reference kernel).
pub fn gather_plan(g: &Graph, node: Node) -> Option<GatherPlan> {
    let nd = &g.nodes[node];
    if nd.op != Op::Gather || nd.operands.len() != 2 || nd.results.len() != 1 {
        return None;
    }
    let data = g.values[nd.operands[0]].ty.as_tensor()?.clone();
    let indices = g.values[nd.operands[1]].ty.as_tensor()?.clone();
    let out = g.values[nd.results[0]].ty.as_tensor()?.clone();
    if data.dtype != out.dtype || !matches!(indices.dtype, DType::I32 | DType::I64) {
        return None;
    }
    let (shape, ishape, oshape) = (sizes(&data)?, sizes(&indices)?, sizes(&out)?);
    let axis = graphc_ir::shape::normalize_axis(nd.attrs.int("axis").unwrap_or(0), shape.len()).ok()?;
    let expected: Vec<usize> = shape[..axis].iter().chain(&ishape).chain(&shape[axis + 1..]).copied().collect();
    if expected != oshape || oshape.contains(&0) || shape[axis] == 0 {
        return None;
    }
    Some(GatherPlan {
        axis,
        outer: shape[..axis].iter().product(),
        n: shape[axis],
        inner: shape[axis + 1..].iter().product(),
        data,
        indices,
        out,
    })
}
