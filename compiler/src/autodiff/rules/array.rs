//! Gradients of the array ops: each moves the adjoint back where the elements came from
//! (the inverse permutation, a pad for a slice, a split for a concat, a scatter-add for a
//! gather), and of the ops those gradients use, so gradients of gradients work.

use crate::autodiff::emit::{Emit, Result, Site};
use graphc_ir::{Attr, NodeSpec, Op, Value};

type Grads = Result<Vec<Option<Value>>>;

fn axis(s: &Site, name: &str, rank: usize) -> usize {
    let a = s.attrs.int(name).unwrap_or(0);
    if a < 0 {
        (a + rank as i64) as usize
    } else {
        a as usize
    }
}

pub fn reshape(e: &mut Emit<'_>, s: &Site) -> Grads {
    let shape = e.shape(s.x[0]);
    Ok(vec![Some(e.reshape(s.dy(), &shape)?)])
}

pub fn broadcast(e: &mut Emit<'_>, s: &Site) -> Grads {
    let shape = e.shape(s.x[0]);
    Ok(vec![Some(e.unbroadcast(s.dy(), &shape)?)])
}

pub fn transpose(e: &mut Emit<'_>, s: &Site) -> Grads {
    let perm = s.attrs.ints("perm").unwrap_or(&[]);
    let mut inverse = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i64;
    }
    Ok(vec![Some(e.op(Op::Transpose, &[s.dy()], &[("perm", Attr::Ints(inverse))])?)])
}

/// Python's index resolution, as the slice's type rule does it.
fn clamp(i: i64, dim: i64) -> i64 {
    let i = if i < 0 { i.saturating_add(dim) } else { i };
    i.clamp(0, dim)
}

/// A slice's adjoint is the adjoint padded with zeros back to the input, the steps as
/// interior padding.
pub fn slice(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, y, dy) = (s.x[0], s.y[0], s.dy());
    let (xs, ys) = (e.shape(x), e.shape(y));
    if ys.contains(&0) {
        return Ok(vec![Some(e.zeros_like(x)?)]);
    }
    let starts = s.attrs.ints("starts").unwrap_or(&[]);
    let ones = vec![1; xs.len()];
    let steps = s.attrs.ints("steps").unwrap_or(&ones);
    let (mut low, mut high, mut interior) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..xs.len() {
        let start = clamp(starts[d], xs[d] as i64);
        let last = start + (ys[d] as i64 - 1) * steps[d];
        low.push(start);
        high.push(xs[d] as i64 - 1 - last);
        interior.push(steps[d] - 1);
    }
    let zero = e.scalar(e.dtype(x), 0.0)?;
    let dx = e.op(
        Op::Pad,
        &[dy, zero],
        &[("low", Attr::Ints(low)), ("high", Attr::Ints(high)), ("interior", Attr::Ints(interior))],
    )?;
    Ok(vec![Some(dx)])
}

/// `pad %x, %v`: the elements of `x` sliced back out; the fill value gets the rest's sum.
pub fn pad(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, dy) = (s.x[0], s.dy());
    let xs = e.shape(x);
    let low = s.attrs.ints("low").unwrap_or(&[]).to_vec();
    let zeros = vec![0; xs.len()];
    let interior = s.attrs.ints("interior").unwrap_or(&zeros).to_vec();
    let ends: Vec<i64> =
        (0..xs.len()).map(|d| low[d] + (xs[d] as i64 - 1).max(0) * (interior[d] + 1) + i64::from(xs[d] > 0)).collect();
    let steps: Vec<i64> = interior.iter().map(|i| i + 1).collect();
    let dx = e.op(
        Op::Slice,
        &[dy],
        &[("starts", Attr::Ints(low)), ("ends", Attr::Ints(ends)), ("steps", Attr::Ints(steps))],
    )?;
    let all: Vec<usize> = (0..xs.len()).collect();
    let total = e.reduce_sum(dy, &all, false)?;
    let inside = e.reduce_sum(dx, &all, false)?;
    let dv = e.sub(total, inside)?;
    Ok(vec![Some(dx), Some(dv)])
}

pub fn concat(e: &mut Emit<'_>, s: &Site) -> Grads {
    let rank = e.shape(s.y[0]).len();
    let axis = axis(s, "axis", rank);
    let sizes: Vec<i64> = s.x.iter().map(|&v| e.shape(v)[axis] as i64).collect();
    let types = s.x.iter().map(|&v| e.g.value_type(v).clone()).collect();
    let spec = NodeSpec::new(Op::Split, vec![s.dy()])
        .attr("axis", Attr::Int(axis as i64))
        .attr("sizes", Attr::Ints(sizes))
        .declared(types);
    Ok(e.node(spec)?.into_iter().map(Some).collect())
}

/// The pieces' adjoints joined again, zeros for pieces nothing depends on.
pub fn split(e: &mut Emit<'_>, s: &Site) -> Grads {
    let mut parts = Vec::with_capacity(s.y.len());
    for (&y, dy) in s.y.iter().zip(&s.dy) {
        parts.push(match dy {
            Some(d) => *d,
            None => e.zeros_like(y)?,
        });
    }
    let rank = e.shape(s.x[0]).len();
    let axis = axis(s, "axis", rank);
    Ok(vec![Some(e.op(Op::Concat, &parts, &[("axis", Attr::Int(axis as i64))])?)])
}

/// A gather's adjoint is scatter-added into zeros of the data's shape; repeated indices add up.
pub fn gather(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (data, idx) = (s.x[0], s.x[1]);
    let axis = axis(s, "axis", e.shape(data).len());
    let zeros = e.zeros_like(data)?;
    let dx = e.op(Op::ScatterAdd, &[zeros, idx, s.dy()], &[("axis", Attr::Int(axis as i64))])?;
    Ok(vec![Some(dx), None])
}

/// `scatter_add %base, %idx, %updates`: the base's adjoint passes through; the updates' is
/// gathered from it.
pub fn scatter_add(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (idx, dy) = (s.x[1], s.dy());
    let axis = axis(s, "axis", e.shape(dy).len());
    let du = e.op(Op::Gather, &[dy, idx], &[("axis", Attr::Int(axis as i64))])?;
    Ok(vec![Some(dy), None, Some(du)])
}
