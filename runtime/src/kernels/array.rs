//! Data-movement kernels: reshape, broadcast, transpose, concat, slice, split, gather, and the
//! adjoints of the last two: pad (of slice) and scatter_add (of gather).

use super::elem::Num;
use super::error::KernelError;
use crate::map_dtype;
use crate::tensor::{ix, row_major};
use crate::tensor::{Element, Tensor};
use graphc_ir::shape::normalize_axis;
use graphc_ir::TensorType;
use ndarray::{ArrayD, Axis, IxDyn, Slice};

/// Same elements in row-major order under the result's shape.
pub fn reshape(x: &Tensor, result: &TensorType) -> Result<Tensor, KernelError> {
    let shape = ix(&result.shape);
    Ok(map_dtype!(x, a => a
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order(shape.clone())
        .map_err(|e| KernelError::new(format!("cannot reshape {:?} to {:?}: {e}", a.shape(), result.shape)))?))
}

pub fn broadcast(x: &Tensor, result: &TensorType) -> Result<Tensor, KernelError> {
    let shape = ix(&result.shape);
    Ok(map_dtype!(x, a => a
        .broadcast(shape.clone())
        .ok_or_else(|| KernelError::new(format!("cannot broadcast {:?} to {:?}", a.shape(), result.shape)))?
        .to_owned()))
}

pub fn transpose(x: &Tensor, perm: &[i64]) -> Result<Tensor, KernelError> {
    let perm: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
    let rank = x.shape().len();
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
        return Err(KernelError::new(format!("perm {perm:?} is not a permutation of 0..{rank}")));
    }
    fn permuted<T: Clone>(a: &ArrayD<T>, perm: &[usize]) -> Result<ArrayD<T>, KernelError> {
        let v = a.view().permuted_axes(IxDyn(perm));
        let shape = v.raw_dim();
        let elements =
            row_major(v).map_err(|_| KernelError::new(format!("cannot allocate a transpose to {shape:?}")))?;
        ArrayD::from_shape_vec(shape, elements).map_err(|e| KernelError::new(format!("transpose: {e}")))
    }
    Ok(map_dtype!(x, a => permuted(a, &perm)?))
}

pub fn concat(inputs: &[&Tensor], axis: i64) -> Result<Tensor, KernelError> {
    let first = inputs.first().ok_or_else(|| KernelError::new("concat of no tensors"))?;
    let axis = Axis(normalize_axis(axis, first.shape().len()).map_err(KernelError::new)?);
    macro_rules! join {
        ($variant:ident) => {{
            let views = inputs
                .iter()
                .map(|t| match t {
                    Tensor::$variant(a) => Ok(a.view()),
                    other => Err(KernelError::new(format!("concat of {} and {}", first.dtype(), other.dtype()))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::$variant(join(axis, &views)?)
        }};
    }
    Ok(match first {
        Tensor::F32(_) => join!(F32),
        Tensor::F64(_) => join!(F64),
        Tensor::I32(_) => join!(I32),
        Tensor::I64(_) => join!(I64),
        Tensor::Bool(_) => join!(Bool),
        Tensor::F16(_) => join!(F16),
        Tensor::BF16(_) => join!(BF16),
        Tensor::I8(_) => join!(I8),
        Tensor::I16(_) => join!(I16),
        Tensor::U8(_) => join!(U8),
        Tensor::U16(_) => join!(U16),
        Tensor::U32(_) => join!(U32),
        Tensor::U64(_) => join!(U64),
    })
}

/// The views joined along `axis`: each one's rows of `shape[axis..]` elements copied in
/// turn, a copy per input per index before the axis (one per input for a batch-1 channel
/// concat); views that are not row-major go through ndarray.
fn join<T: Clone>(axis: Axis, views: &[ndarray::ArrayViewD<'_, T>]) -> Result<ArrayD<T>, KernelError> {
    let err = |e: ndarray::ShapeError| KernelError::new(format!("concat: {e}"));
    let slices: Option<Vec<&[T]>> = views.iter().map(|v| v.as_slice()).collect();
    let (Some(slices), Some(first)) = (slices, views.first()) else {
        return ndarray::concatenate(axis, views).map_err(err);
    };
    let a = axis.index();
    let mut shape = first.shape().to_vec();
    for v in &views[1..] {
        let s = v.shape();
        if s.len() != shape.len() || s.iter().zip(&shape).enumerate().any(|(d, (x, y))| d != a && x != y) {
            return ndarray::concatenate(axis, views).map_err(err);
        }
        shape[a] = shape[a].checked_add(s[a]).ok_or_else(|| KernelError::new("a concat too large to index"))?;
    }
    let outer: usize = shape[..a].iter().product();
    let rows: Vec<usize> = views.iter().map(|v| v.shape()[a..].iter().product()).collect();
    let mut out = Vec::new();
    out.try_reserve_exact(shape.iter().product())
        .map_err(|_| KernelError::new(format!("cannot allocate a concat of shape {shape:?}")))?;
    for o in 0..outer {
        for (s, &r) in slices.iter().zip(&rows) {
            out.extend_from_slice(&s[o * r..(o + 1) * r]);
        }
    }
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(err)
}

/// Python-style slicing with positive steps: negative bounds count from the end, then clamp.
pub fn slice(x: &Tensor, starts: &[i64], ends: &[i64], steps: Option<&[i64]>) -> Result<Tensor, KernelError> {
    let shape = x.shape().to_vec();
    if starts.len() != shape.len() || ends.len() != shape.len() || steps.is_some_and(|s| s.len() != shape.len()) {
        return Err(KernelError::new(format!("slice bounds do not match rank {}", shape.len())));
    }
    let mut boxes = Vec::with_capacity(shape.len());
    for (d, &dim) in shape.iter().enumerate() {
        let step = steps.map_or(1, |s| s[d]);
        if step < 1 {
            return Err(KernelError::new(format!("slice step {step} on dim {d} is not positive")));
        }
        let resolve = |i: i64| (if i < 0 { i + dim as i64 } else { i }).clamp(0, dim as i64);
        let (start, end) = (resolve(starts[d]), resolve(ends[d]));
        // An empty range is a zero-length dim; ndarray wants start <= end.
        boxes.push(Slice::new(start as isize, Some(end.max(start) as isize), step as isize));
    }
    Ok(map_dtype!(x, a => a.slice_each_axis(|ad| boxes[ad.axis.index()]).to_owned()))
}

pub fn split(x: &Tensor, axis: i64, sizes: &[i64]) -> Result<Vec<Tensor>, KernelError> {
    let axis = normalize_axis(axis, x.shape().len()).map_err(KernelError::new)?;
    let dim = x.shape()[axis] as i64;
    if sizes.iter().any(|&s| s < 0) || sizes.iter().try_fold(0i64, |a, &s| a.checked_add(s)) != Some(dim) {
        return Err(KernelError::new(format!("split sizes {sizes:?} do not sum to the axis' dim {dim}")));
    }
    let mut start = 0isize;
    let mut out = Vec::with_capacity(sizes.len());
    for &size in sizes {
        let s = Slice::from(start..start + size as isize);
        out.push(map_dtype!(x, a => a.slice_axis(Axis(axis), s).to_owned()));
        start += size as isize;
    }
    Ok(out)
}

/// The indices of a gather or scatter_add, resolved (negative counts from the end) and checked
/// against the axis' size: an index out of range is an error naming it and its position.
pub fn resolve_indices(op: &str, indices: &Tensor, axis: usize, dim: usize) -> Result<Vec<usize>, KernelError> {
    let raw: Vec<i64> = match indices {
        Tensor::I32(a) => a.iter().map(|&i| i as i64).collect(),
        Tensor::I64(a) => a.iter().copied().collect(),
        other => return Err(KernelError::new(format!("{op} indices must be i32 or i64, got {}", other.dtype()))),
    };
    let mut flat = Vec::with_capacity(raw.len());
    for (pos, &i) in raw.iter().enumerate() {
        let j = if i < 0 { i + dim as i64 } else { i };
        if j < 0 || j >= dim as i64 {
            return Err(KernelError::new(format!(
                "{op} index {i} (element {pos} of the indices) is out of range for axis {axis} of size {dim}; valid indices are -{dim}..{dim}"
            )));
        }
        flat.push(j as usize);
    }
    Ok(flat)
}

/// numpy `take`: the result shape is `data[..axis] ++ indices ++ data[axis+1..]`.
pub fn gather(data: &Tensor, indices: &Tensor, axis: i64) -> Result<Tensor, KernelError> {
    let axis = normalize_axis(axis, data.shape().len()).map_err(KernelError::new)?;
    let dim = data.shape()[axis];
    let flat = resolve_indices("gather", indices, axis, dim)?;
    let mut shape = data.shape()[..axis].to_vec();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(&data.shape()[axis + 1..]);
    fn take<T: Clone>(a: &ArrayD<T>, axis: usize, idx: &[usize], shape: &[usize]) -> ArrayD<T> {
        let picked = a.select(Axis(axis), idx);
        // The picked axis is the flattened index shape, so row-major reshape unflattens it.
        picked
            .as_standard_layout()
            .into_owned()
            .into_shape_with_order(IxDyn(shape))
            .expect("gather result holds the picked elements")
    }
    Ok(map_dtype!(data, a => take(a, axis, &flat, &shape)))
}

/// `base` with `updates[a..., i..., b...]` added at `[a..., indices[i...], b...]` for every
/// index tuple `i`, repeated indices accumulating in index order: gather's adjoint.
pub fn scatter_add(base: &Tensor, indices: &Tensor, updates: &Tensor, axis: i64) -> Result<Tensor, KernelError> {
    let shape = base.shape().to_vec();
    let axis = normalize_axis(axis, shape.len()).map_err(KernelError::new)?;
    let dim = shape[axis];
    let flat = resolve_indices("scatter_add", indices, axis, dim)?;
    let mut want = shape[..axis].to_vec();
    want.extend_from_slice(indices.shape());
    want.extend_from_slice(&shape[axis + 1..]);
    if updates.shape() != want.as_slice() {
        return Err(KernelError::new(format!(
            "scatter_add updates of shape {:?} do not have gather's result shape {want:?}",
            updates.shape()
        )));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    fn add<T: Num>(base: &ArrayD<T>, updates: &ArrayD<T>, flat: &[usize], dims: (usize, usize, usize)) -> ArrayD<T> {
        let (outer, dim, inner) = dims;
        let mut out = base.as_standard_layout().into_owned();
        let updates = updates.as_standard_layout();
        let (dst, src) = (out.as_slice_mut().expect("standard layout"), updates.as_slice().expect("standard layout"));
        let n = flat.len();
        for o in 0..outer {
            for (p, &j) in flat.iter().enumerate() {
                let (to, from) = ((o * dim + j) * inner, (o * n + p) * inner);
                for i in 0..inner {
                    dst[to + i] = dst[to + i].add(src[from + i]);
                }
            }
        }
        out
    }
    let dims = (outer, dim, inner);
    numeric_pair!(base, updates, (b, u) => Ok(add(b, u, &flat, dims).into()), _ => {
        Err(KernelError::new(format!("scatter_add of {} updates into {}", updates.dtype(), base.dtype())))
    })
}

/// XLA's Pad with non-negative padding: input element `j` of each dim lands at
/// `low + j * (interior + 1)`; every other position holds `fill`.
pub fn pad(
    x: &Tensor,
    fill: &Tensor,
    low: &[i64],
    high: &[i64],
    interior: Option<&[i64]>,
    result: &TensorType,
) -> Result<Tensor, KernelError> {
    let shape = x.shape().to_vec();
    let rank = shape.len();
    let zeros = vec![0; rank];
    let interior = interior.unwrap_or(&zeros);
    if low.len() != rank || high.len() != rank || interior.len() != rank {
        return Err(KernelError::new(format!("pad lists do not match rank {rank}")));
    }
    if let Some(p) = low.iter().chain(high).chain(interior).find(|&&p| p < 0) {
        return Err(KernelError::new(format!("pad by {p}: padding is at least 0")));
    }
    // Where the input's elements land, per dim: a strided box of the result.
    let mut out = Vec::with_capacity(rank);
    let mut boxes = Vec::with_capacity(rank);
    for d in 0..rank {
        let (n, lo, hi, step) = (shape[d] as u128, low[d] as u128, high[d] as u128, interior[d] as u128 + 1);
        let size = lo + hi + n + n.saturating_sub(1) * (step - 1);
        out.push(u64::try_from(size).map_err(|_| KernelError::new(format!("pad: dim {d} of the result overflows")))?);
        let end = if n == 0 { lo } else { lo + (n - 1) * step + 1 };
        boxes.push(Slice::new(lo as isize, Some(end as isize), step as isize));
    }
    if out != result.shape {
        return Err(KernelError::new(format!("pad of {shape:?} gives {out:?}, not the result {}", result)));
    }
    fn place<T: Clone>(
        a: &ArrayD<T>,
        fill: &ArrayD<T>,
        boxes: &[Slice],
        result: &TensorType,
    ) -> Result<ArrayD<T>, KernelError> {
        let v = fill.iter().next().cloned().filter(|_| fill.len() == 1).ok_or_else(|| {
            KernelError::new(format!("pad's fill value must be a scalar, not of shape {:?}", fill.shape()))
        })?;
        let n = result.num_elements().unwrap_or(u64::MAX);
        let data = crate::tensor::filled(n, v, result).map_err(KernelError)?;
        let mut out = ArrayD::from_shape_vec(ix(&result.shape), data)
            .map_err(|e| KernelError::new(format!("pad result: {e}")))?;
        out.slice_each_axis_mut(|ad| boxes[ad.axis.index()]).assign(a);
        Ok(out)
    }
    if x.dtype() != fill.dtype() {
        return Err(KernelError::new(format!("pad of {} with a {} value", x.dtype(), fill.dtype())));
    }
    Ok(crate::map_dtype!(x, a => place(a, Element::array(fill).expect("the dtypes are equal"), &boxes, result)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_sizes_that_overflow_are_an_error() {
        let x = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[4])));
        // Wrapping, these sum to 4.
        let e = split(&x, 0, &[i64::MAX, i64::MAX, 6]).unwrap_err();
        assert!(e.0.contains("do not sum to the axis' dim 4"), "{e}");
        assert_eq!(split(&x, 0, &[1, 3]).unwrap().len(), 2);
    }

    #[test]
    fn row_copies_join_as_ndarray_does_on_every_axis() {
        let a = ArrayD::from_shape_vec(IxDyn(&[2, 3, 4]), (0..24).collect::<Vec<i64>>()).unwrap();
        let b = ArrayD::from_shape_vec(IxDyn(&[2, 3, 4]), (100..124).collect::<Vec<i64>>()).unwrap();
        let empty = ArrayD::<i64>::zeros(IxDyn(&[2, 0, 4]));
        for axis in 0..3 {
            for views in [vec![a.view(), b.view()], vec![a.view(), b.view(), a.view()], vec![b.view()]] {
                let want = ndarray::concatenate(Axis(axis), &views).unwrap();
                assert_eq!(join(Axis(axis), &views).unwrap(), want, "axis {axis}");
            }
        }
        let views = [a.view(), empty.view(), b.view()];
        assert_eq!(join(Axis(1), &views).unwrap(), ndarray::concatenate(Axis(1), &views).unwrap());
        // Views that are not row-major (strided, reversed): ndarray's answer.
        let sliced = a.slice(ndarray::s![.., ..;2, ..]).into_dyn();
        let views = [a.view(), sliced];
        assert_eq!(join(Axis(1), &views).unwrap(), ndarray::concatenate(Axis(1), &views).unwrap());
        let reversed = a.view().reversed_axes();
        assert!(join(Axis(0), &[a.view(), reversed]).is_err(), "[2,3,4] and [4,3,2] do not join");
        // Shapes that differ off the axis: an error, not a wrong join.
        let c = ArrayD::<i64>::zeros(IxDyn(&[2, 3, 5]));
        assert!(join(Axis(1), &[a.view(), c.view()]).is_err());
    }
}
