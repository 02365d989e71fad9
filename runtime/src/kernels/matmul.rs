//! Matrix product with numpy `matmul` batch broadcasting; either operand may be read as its
//! transpose over its last two dims (`transpose_a`, `transpose_b`), as a view, never copied.

use super::elem::Num;
use super::error::KernelError;
use crate::tensor::{Element, Tensor};
use graphc_ir::TensorType;
use ndarray::{s, Array2, Array3, ArrayD, ArrayView2, ArrayViewD, Ix2, IxDyn, LinalgScalar};

/// `lhs x rhs`, each operand transposed over its last two dims first when its flag says so.
pub fn matmul(
    a: &Tensor,
    b: &Tensor,
    result: &TensorType,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Tensor, KernelError> {
    let out: Vec<usize> = result.shape.iter().map(|&d| d as usize).collect();
    let (ta, tb) = (transpose_a, transpose_b);
    Ok(match (a, b) {
        // Floats use ndarray's blocked product (matrixmultiply); integers a plain triple loop,
        // because the spec makes integer products wrap.
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(batched(read(a, ta)?, read(b, tb)?, &out, float_mm)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(batched(read(a, ta)?, read(b, tb)?, &out, float_mm)?),
        _ if a.dtype() == b.dtype() && a.dtype().is_int() => each_int!(a, x => {
            let y = Element::array(b).expect("the dtypes are equal");
            batched(read(x, ta)?, read(y, tb)?, &out, int_mm)?
        }, _ => unreachable!("an integer tensor")),
        _ => return Err(KernelError::new(format!("matmul of {} and {}", a.dtype(), b.dtype()))),
    })
}

/// The operand as the product reads it: a view, its last two axes swapped when `transpose`.
fn read<T>(x: &ArrayD<T>, transpose: bool) -> Result<ArrayViewD<'_, T>, KernelError> {
    let r = x.ndim();
    if r < 2 {
        return Err(KernelError::new("matmul operands need rank at least 2"));
    }
    let mut v = x.view();
    if transpose {
        v.swap_axes(r - 2, r - 1);
    }
    Ok(v)
}

fn float_mm<T: LinalgScalar>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    a.dot(&b)
}

fn int_mm<T: Num>(a: ArrayView2<T>, b: ArrayView2<T>) -> Array2<T> {
    let (m, k) = a.dim();
    let n = b.dim().1;
    Array2::from_shape_fn((m, n), |(i, j)| (0..k).fold(T::ZERO, |acc, p| acc.add(a[(i, p)].mul(b[(p, j)]))))
}

/// Runs `mm` on each pair of matrices of the broadcast batch. Operands are indexed in place
/// (a batch dim of size 1 repeats), never materialized at the broadcast size.
fn batched<T: Copy + Default>(
    a: ArrayViewD<T>,
    b: ArrayViewD<T>,
    out: &[usize],
    mm: impl Fn(ArrayView2<T>, ArrayView2<T>) -> Array2<T>,
) -> Result<ArrayD<T>, KernelError> {
    if a.ndim() < 2 || b.ndim() < 2 || out.len() < 2 {
        return Err(KernelError::new("matmul operands need rank at least 2"));
    }
    let (ka, kb) = (a.shape()[a.ndim() - 1], b.shape()[b.ndim() - 2]);
    if ka != kb {
        return Err(KernelError::new(format!("matmul of {:?} and {:?}: inner dims differ", a.shape(), b.shape())));
    }
    let r = out.len();
    let batch = &out[..r - 2];
    let count: usize = batch.iter().product();
    let (m, n) = (out[r - 2], out[r - 1]);
    let mut result = Array3::<T>::default((count, m, n));
    for i in 0..count {
        let index = unravel(i, batch);
        let (lhs, rhs) = (matrix(&a, &index)?, matrix(&b, &index)?);
        if lhs.dim() != (m, ka) || rhs.dim() != (kb, n) {
            return Err(KernelError::new(format!(
                "matmul of {:?} and {:?} does not give {out:?}",
                a.shape(),
                b.shape()
            )));
        }
        result.slice_mut(s![i, .., ..]).assign(&mm(lhs, rhs));
    }
    result.into_dyn().into_shape_with_order(IxDyn(out)).map_err(|e| KernelError::new(format!("matmul layout: {e}")))
}

/// The row-major multi-index of flat position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        index[d] = i % shape[d];
        i /= shape[d];
    }
    index
}

/// The matrix of `x` at a batch index of the broadcast batch shape: batch dims align on the
/// right, and a dim of size 1 stands for every index.
fn matrix<'a, T>(x: &ArrayViewD<'a, T>, batch_index: &[usize]) -> Result<ArrayView2<'a, T>, KernelError> {
    let own = x.ndim() - 2;
    let skip = batch_index.len().checked_sub(own).ok_or_else(|| {
        KernelError::new(format!("matmul operand {:?} has more batch dims than the result", x.shape()))
    })?;
    let mut view = x.clone();
    for &i in &batch_index[skip..] {
        let pick = if view.shape()[0] == 1 { 0 } else { i };
        view = view.index_axis_move(ndarray::Axis(0), pick);
    }
    view.into_dimensionality::<Ix2>().map_err(|e| KernelError::new(format!("matmul layout: {e}")))
}
