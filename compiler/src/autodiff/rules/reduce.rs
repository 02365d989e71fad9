//! Gradients of the reductions, softmax and the losses: the adjoint spread back over the
//! reduced axes.

use crate::autodiff::emit::{Emit, Result, Site};
use graphc_ir::{Attr, DType, Op, TensorData, TensorType, Value};

type Grads = Result<Vec<Option<Value>>>;

/// The node's `axes`, resolved against the operand's rank.
fn axes(s: &Site, rank: usize) -> Vec<usize> {
    let axes = s.attrs.ints("axes").unwrap_or(&[]);
    axes.iter().map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize }).collect()
}

pub fn reduce(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, y, dy) = (s.x[0], s.y[0], s.dy());
    let shape = e.shape(x);
    let axes = axes(s, shape.len());
    let spread = e.unreduce(dy, &shape, &axes)?;
    let dx = match s.op {
        Op::ReduceSum => spread,
        Op::ReduceMean => {
            let count: u64 = axes.iter().map(|&a| shape[a]).product();
            e.scale(spread, 1.0 / count as f64)?
        }
        // Split among the elements equal to the extreme, TensorFlow's `indicators /
        // num_selected * grad`: where the extreme is NaN no element equals it, and the
        // gradient is NaN (0 / 0), as TensorFlow's and JAX's, rather than a silent 0.
        Op::ReduceMax | Op::ReduceMin => {
            let ext = e.unreduce(y, &shape, &axes)?;
            let hit = e.op(Op::Equal, &[x, ext], &[])?;
            let ones = e.cast(hit, e.dtype(x))?;
            let ties = e.reduce_sum(ones, &axes, true)?;
            let per = e.unreduce(ties, &shape, &axes)?;
            let share = e.div(ones, per)?;
            e.mul(share, spread)?
        }
        // The product of the other elements of each slice (TensorFlow's rule): `y / x` where
        // x is not 0; where it is, the product of the slice's nonzero elements if it is the
        // slice's only zero, else 0.
        Op::ReduceProd => {
            let dt = e.dtype(x);
            let zero = e.scalar(dt, 0.0)?;
            let one = e.scalar(dt, 1.0)?;
            let is_zero = e.op(Op::Equal, &[x, zero], &[])?;
            let safe = e.op(Op::Select, &[is_zero, one, x], &[])?;
            let axes_attr = Attr::Ints(axes.iter().map(|&a| a as i64).collect());
            let nonzero_prod =
                e.op(Op::ReduceProd, &[safe], &[("axes", axes_attr), ("keep_dims", Attr::Bool(true))])?;
            let nonzero_prod = e.unreduce(nonzero_prod, &shape, &axes)?;
            let zeros = e.cast(is_zero, dt)?;
            let count = e.reduce_sum(zeros, &axes, true)?;
            let count = e.unreduce(count, &shape, &axes)?;
            let lone = e.op(Op::Equal, &[count, one], &[])?;
            let at_zero = e.mask(lone, nonzero_prod, true)?;
            let yb = e.unreduce(y, &shape, &axes)?;
            let elsewhere = e.div(yb, safe)?;
            let others = e.op(Op::Select, &[is_zero, at_zero, elsewhere], &[])?;
            e.mul(others, spread)?
        }
        other => return e.fail(format!("internal error: '{}' is not a reduction", other.name())),
    };
    Ok(vec![Some(dx)])
}

/// `y = softmax(x)`: `dx = y (dy - sum(dy y))` along the axis.
pub fn softmax(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (y, dy) = (s.y[0], s.dy());
    let rank = e.shape(y).len();
    let axis = s.attrs.int("axis").unwrap_or(-1);
    let axis = if axis < 0 { (axis + rank as i64) as usize } else { axis as usize };
    let dyy = e.mul(dy, y)?;
    let sum = e.reduce_sum(dyy, &[axis], true)?;
    let diff = e.sub(dy, sum)?;
    Ok(vec![Some(e.mul(y, diff)?)])
}

/// How a loss's per-example adjoint scales its gradient: `dy` itself for "none" (reshaped to
/// broadcast against the per-element gradient), the scalar `dy` for "sum", `dy / count` for
/// "mean".
fn loss_scale(e: &mut Emit<'_>, s: &Site, per_example: &[u64], elem_rank: usize) -> Result<Value> {
    let dy = s.dy();
    match s.attrs.str("reduction").unwrap_or("mean") {
        "none" => {
            let mut shape = per_example.to_vec();
            shape.resize(elem_rank, 1);
            e.reshape(dy, &shape)
        }
        "sum" => Ok(dy),
        _ => {
            let count: u64 = per_example.iter().product();
            e.scale(dy, 1.0 / count as f64)
        }
    }
}

/// `softmax_cross_entropy %logits, %labels`: `(softmax(logits) - onehot(labels)) dy`.
pub fn softmax_cross_entropy(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (logits, labels) = (s.x[0], s.x[1]);
    let lt = e.ty(logits);
    let classes = *lt.shape.last().unwrap_or(&1);
    let examples = &lt.shape[..lt.shape.len() - 1];
    let p = e.op(Op::Softmax, &[logits], &[("axis", Attr::Int(-1))])?;
    let label_dtype = e.dtype(labels);
    let mut col = examples.to_vec();
    col.push(1);
    let lab = e.reshape(labels, &col)?;
    let range = match label_dtype {
        DType::I32 => TensorData::I32((0..classes as i32).collect()),
        _ => TensorData::I64((0..classes as i64).collect()),
    };
    let iota = e.literal(TensorType::new(label_dtype, vec![classes]), range)?;
    let hit = e.op(Op::Equal, &[lab, iota], &[])?;
    let onehot = e.cast(hit, lt.dtype)?;
    let diff = e.sub(p, onehot)?;
    let scale = loss_scale(e, s, examples, lt.shape.len())?;
    // After the loss itself, which checks the labels: a label out of range is the forward's
    // error even when only the gradient is fetched (the one-hot would silently be all zeros).
    let spec = graphc_ir::NodeSpec::new(Op::Mul, vec![diff, scale]).after(vec![s.y[0]]);
    Ok(vec![Some(e.node(spec)?[0]), None])
}

/// `mean_squared_error %pred, %target`: `2 (pred - target) dy`, and its negation.
pub fn mean_squared_error(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (pred, target) = (s.x[0], s.x[1]);
    let shape = e.shape(pred);
    let diff = e.sub(pred, target)?;
    let twice = e.scale(diff, 2.0)?;
    let scale = loss_scale(e, s, &shape, shape.len())?;
    let dp = e.mul(twice, scale)?;
    let dt = e.neg(dp)?;
    Ok(vec![Some(dp), Some(dt)])
}
