//! Reductions over axes and softmax. Float sums and products accumulate in f64 so the oracle is at least as
//! accurate as any compiled kernel it checks.

use super::elem::{Float, Num};
use super::error::KernelError;
use crate::tensor::Tensor;
use graphc_ir::shape::normalize_axis;
use graphc_ir::{Op, TensorType};
use ndarray::{ArrayD, ArrayView1, Axis, Ix2, IxDyn};

pub fn reduce(op: Op, x: &Tensor, axes: &[i64], result: &TensorType) -> Result<Tensor, KernelError> {
    let rank = x.shape().len();
    let mut reduced = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = normalize_axis(a, rank).map_err(KernelError::new)?;
        if reduced.contains(&a) {
            return Err(KernelError::new(format!("axis {a} is reduced twice")));
        }
        reduced.push(a);
    }
    let out = result.shape.iter().map(|&d| d as usize).collect::<Vec<_>>();
    let float_only = || KernelError::new(format!("'{}' is defined on floats, not {}", op.name(), x.dtype()));
    Ok(match (op, x) {
        (Op::ReduceSum, Tensor::F32(a)) => Tensor::F32(rows(a, &reduced, &out, float_sum)?),
        (Op::ReduceSum, Tensor::F64(a)) => Tensor::F64(rows(a, &reduced, &out, float_sum)?),
        (Op::ReduceSum, t) if t.dtype().is_int() => {
            each_int!(t, a => rows(a, &reduced, &out, int_sum)?, _ => unreachable!("an integer tensor"))
        }
        (Op::ReduceProd, Tensor::F32(a)) => Tensor::F32(rows(a, &reduced, &out, float_prod)?),
        (Op::ReduceProd, Tensor::F64(a)) => Tensor::F64(rows(a, &reduced, &out, float_prod)?),
        (Op::ReduceProd, t) if t.dtype().is_int() => {
            each_int!(t, a => rows(a, &reduced, &out, int_prod)?, _ => unreachable!("an integer tensor"))
        }
        (Op::ReduceMean, Tensor::F32(a)) => Tensor::F32(rows(a, &reduced, &out, mean)?),
        (Op::ReduceMean, Tensor::F64(a)) => Tensor::F64(rows(a, &reduced, &out, mean)?),
        (Op::ReduceMean, _) => return Err(float_only()),
        (Op::ReduceMax | Op::ReduceMin, Tensor::F32(a)) => Tensor::F32(rows(a, &reduced, &out, extreme(op))?),
        (Op::ReduceMax | Op::ReduceMin, Tensor::F64(a)) => Tensor::F64(rows(a, &reduced, &out, extreme(op))?),
        (Op::ReduceMax | Op::ReduceMin, t) if t.dtype().is_int() => {
            each_int!(t, a => rows(a, &reduced, &out, extreme(op))?, _ => unreachable!("an integer tensor"))
        }
        _ => return Err(KernelError::new(format!("'{}' is not defined on {}", op.name(), x.dtype()))),
    })
}

/// The sum from -0, the identity of IEEE addition (`-0 + x` is `x` for every x, -0 included),
/// so a row of -0 sums to -0 and an empty row to -0. Spelled out rather than left to `Sum`,
/// whose starting value for floats changed between Rust releases.
fn sum_f64(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(-0.0, |acc, v| acc + v)
}

fn float_sum<T: Float>(row: ArrayView1<T>) -> T {
    T::from_f64(sum_f64(row.iter().map(|&v| v.to_f64())))
}

fn int_sum<T: Num>(row: ArrayView1<T>) -> T {
    row.iter().fold(T::ZERO, |acc, &v| acc.add(v))
}

/// The product in f64 from 1, rounded once to the dtype.
fn float_prod<T: Float>(row: ArrayView1<T>) -> T {
    T::from_f64(row.iter().fold(1.0, |acc, &v| acc * v.to_f64()))
}

fn int_prod<T: Num>(row: ArrayView1<T>) -> T {
    row.iter().fold(T::ONE, |acc, &v| acc.mul(v))
}

/// NaN for an empty extent (0 / 0), as the spec says.
fn mean<T: Float>(row: ArrayView1<T>) -> T {
    let sum = sum_f64(row.iter().map(|&v| v.to_f64()));
    T::from_f64(sum / row.len() as f64)
}

fn extreme<T: Num>(op: Op) -> fn(ArrayView1<T>) -> T {
    if op == Op::ReduceMax {
        |row| row.iter().fold(T::LOWEST, |acc, &v| acc.max_nan(v))
    } else {
        |row| row.iter().fold(T::HIGHEST, |acc, &v| acc.min_nan(v))
    }
}

/// Moves the reduced axes last, views the tensor as `[kept, reduced]` rows, and folds each row
/// into one element of the result (whose shape already accounts for `keep_dims`).
fn rows<T: Copy>(
    a: &ArrayD<T>,
    reduced: &[usize],
    out_shape: &[usize],
    fold: impl Fn(ArrayView1<T>) -> T,
) -> Result<ArrayD<T>, KernelError> {
    let kept: Vec<usize> = (0..a.ndim()).filter(|d| !reduced.contains(d)).collect();
    let order: Vec<usize> = kept.iter().chain(reduced).copied().collect();
    let outer: usize = kept.iter().map(|&d| a.shape()[d]).product();
    let inner: usize = reduced.iter().map(|&d| a.shape()[d]).product();
    let moved = a.view().permuted_axes(IxDyn(&order)).as_standard_layout().into_owned();
    let table = moved
        .into_shape_with_order((outer, inner))
        .map_err(|e| KernelError::new(format!("reduction layout: {e}")))?
        .into_dimensionality::<Ix2>()
        .map_err(|e| KernelError::new(format!("reduction layout: {e}")))?;
    let values: Vec<T> = table.outer_iter().map(&fold).collect();
    ArrayD::from_shape_vec(IxDyn(out_shape), values)
        .map_err(|e| KernelError::new(format!("reduction result does not fit {out_shape:?}: {e}")))
}

/// `exp(x - max(x)) / sum(exp(x - max(x)))` along `axis`.
pub fn softmax(x: &Tensor, axis: i64) -> Result<Tensor, KernelError> {
    let axis = normalize_axis(axis, x.shape().len()).map_err(KernelError::new)?;
    fn lanes<T: Float>(a: &ArrayD<T>, axis: usize) -> ArrayD<T> {
        let mut out = a.as_standard_layout().into_owned();
        for mut lane in out.lanes_mut(Axis(axis)) {
            let max = lane.iter().fold(T::LOWEST, |m, &v| m.max_nan(v));
            lane.mapv_inplace(|v| v.sub(max).exp());
            let sum = T::from_f64(sum_f64(lane.iter().map(|&v| v.to_f64())));
            lane.mapv_inplace(|v| v.div(sum).unwrap_or(v));
        }
        out
    }
    match x {
        Tensor::F32(a) => Ok(Tensor::F32(lanes(a, axis))),
        Tensor::F64(a) => Ok(Tensor::F64(lanes(a, axis))),
        _ => Err(KernelError::new(format!("softmax is defined on floats, not {}", x.dtype()))),
    }
}
