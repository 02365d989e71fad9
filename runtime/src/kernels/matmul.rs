//! Matrix product with numpy `matmul` batch broadcasting.

use super::elem::Num;
use super::KernelError;
use crate::Tensor;
use graphc_ir::TensorType;
use ndarray::{s, Array2, Array3, ArrayD, ArrayView2, Ix2, IxDyn, LinalgScalar};

pub fn matmul(a: &Tensor, b: &Tensor, result: &TensorType) -> Result<Tensor, KernelError> {
    let out: Vec<usize> = result.shape.iter().map(|&d| d as usize).collect();
    Ok(match (a, b) {
        // Floats use ndarray's blocked product (matrixmultiply); integers a plain triple loop,
        // because the spec makes integer products wrap.
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(batched(a, b, &out, float_mm)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(batched(a, b, &out, float_mm)?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(batched(a, b, &out, int_mm)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(batched(a, b, &out, int_mm)?),
        _ => return Err(KernelError::new(format!("matmul of {} and {}", a.dtype(), b.dtype()))),
    })
}

fn float_mm<T: LinalgScalar>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    a.dot(&b)
}

fn int_mm<T: Num>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    let (m, k) = a.dim();
    let n = b.dim().1;
    Array2::from_shape_fn((m, n), |(i, j)| (0..k).fold(T::ZERO, |acc, p| acc.add(a[(i, p)].mul(b[(p, j)]))))
}

/// Runs `mm` on each pair of matrices of the broadcast batch.
fn batched<T: Copy + Default>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    out: &[usize],
    mm: impl Fn(ArrayView2<T>, ArrayView2<T>) -> Array2<T>,
) -> Result<ArrayD<T>, KernelError> {
    let layout = |e: ndarray::ShapeError| KernelError::new(format!("matmul layout: {e}"));
    if a.ndim() < 2 || b.ndim() < 2 || out.len() < 2 {
        return Err(KernelError::new("matmul operands need rank at least 2"));
    }
    if a.ndim() == 2 && b.ndim() == 2 {
        let (a, b) = (
            a.view().into_dimensionality::<Ix2>().map_err(layout)?,
            b.view().into_dimensionality::<Ix2>().map_err(layout)?,
        );
        if a.dim().1 != b.dim().0 {
            return Err(KernelError::new(format!("matmul of {:?} and {:?}: inner dims differ", a.shape(), b.shape())));
        }
        return Ok(mm(a, b).into_dyn());
    }
    let r = out.len();
    let batch = &out[..r - 2];
    let count: usize = batch.iter().product();
    let (m, n) = (out[r - 2], out[r - 1]);
    let k = a.shape()[a.ndim() - 1];
    let stack = |x: &ArrayD<T>, rows: usize, cols: usize| -> Result<Array3<T>, KernelError> {
        let full: Vec<usize> = batch.iter().copied().chain([rows, cols]).collect();
        let view = x.broadcast(IxDyn(&full)).ok_or_else(|| {
            KernelError::new(format!("matmul batch dims of {:?} do not broadcast to {batch:?}", x.shape()))
        })?;
        view.to_owned().into_shape_with_order((count, rows, cols)).map_err(layout)
    };
    let (lhs, rhs) = (stack(a, m, k)?, stack(b, k, n)?);
    let mut result = Array3::<T>::default((count, m, n));
    for i in 0..count {
        result.slice_mut(s![i, .., ..]).assign(&mm(lhs.slice(s![i, .., ..]), rhs.slice(s![i, .., ..])));
    }
    result.into_dyn().into_shape_with_order(IxDyn(out)).map_err(layout)
}
