//! `top_k`: each slice along the axis sorted by value (descending when `largest`; NaN above
//! every number; equal values in index order), the first `k` kept with their indices.

use super::elem::Num;
use super::error::KernelError;
use crate::tensor::Tensor;
use graphc_ir::TensorType;
use ndarray::{ArrayD, Axis, IxDyn, Zip};
use std::cmp::Ordering;

pub fn top_k(x: &Tensor, axis: usize, largest: bool, result: &TensorType) -> Result<Vec<Tensor>, KernelError> {
    let shape: Vec<usize> = result.shape.iter().map(|&d| d as usize).collect();
    if axis >= x.shape().len() || shape.len() != x.shape().len() || shape[axis] > x.shape()[axis] {
        return Err(KernelError::new(format!("top_k of {:?} along {axis} into {shape:?}", x.shape())));
    }
    fn run<T: Num>(x: &ArrayD<T>, axis: usize, largest: bool, shape: &[usize]) -> (ArrayD<T>, ArrayD<i64>) {
        let mut values = ArrayD::<T>::default(IxDyn(shape));
        let mut indices = ArrayD::<i64>::zeros(IxDyn(shape));
        let k = shape[axis];
        // NaN ranks above every number.
        let rank = |a: &T, b: &T| match (a.is_nan(), b.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
        };
        let mut order: Vec<usize> = Vec::new();
        Zip::from(x.lanes(Axis(axis))).and(values.lanes_mut(Axis(axis))).and(indices.lanes_mut(Axis(axis))).for_each(
            |lane, mut vals, mut idx| {
                order.clear();
                order.extend(0..lane.len());
                // A stable sort keeps equal values in index order either way.
                if largest {
                    order.sort_by(|&i, &j| rank(&lane[j], &lane[i]));
                } else {
                    order.sort_by(|&i, &j| rank(&lane[i], &lane[j]));
                }
                for (slot, &i) in order.iter().take(k).enumerate() {
                    vals[slot] = lane[i];
                    idx[slot] = i as i64;
                }
            },
        );
        (values, indices)
    }
    macro_rules! numeric {
        ($($v:ident),*) => {
            match x {
                $(Tensor::$v(a) => {
                    let (v, i) = run(a, axis, largest, &shape);
                    Ok(vec![Tensor::$v(v), Tensor::I64(i)])
                })*
                _ => Err(KernelError::new(format!("top_k takes numbers, got {}", x.dtype()))),
            }
        };
    }
    numeric!(F32, F64, I8, I16, I32, I64, U8, U16, U32, U64)
}
