//! Operators about positions: ArgMax and ArgMin (an index along an axis, composed from a
//! reduction, a comparison and a select of an iota constant), Hardmax (the iota equal to
//! ArgMax's index), Trilu (a constant triangular
//! mask and a select), OneHot (an iota compared with the indices), EyeLike (a constant), Range (a constant: its bounds must be known at import, its length being
//! the result's shape) and Tile (singleton axes interleaved by a reshape, broadcast, and
//! reshaped back). Inputs that decide shapes (Trilu's `k`, Range's bounds, Tile's repeats)
//! must be known at import time, as must Compress's condition and ReverseSequence's lengths
//! (both gathers of constant indices), and TopK's k (onto `top_k`).

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    // ArgMax/ArgMin 12 add `select_last_index` (13 adds only bfloat16, which graphc lacks);
    // 1 and 11 (11 allows a negative axis, a superset of 1) have no such attribute.
    OpEntry::since("ArgMax", 12, |imp, n| arg_extreme(imp, n, Op::ReduceMax, true)),
    OpEntry::since("ArgMin", 12, |imp, n| arg_extreme(imp, n, Op::ReduceMin, true)),
    OpEntry::since("ArgMax", 1, |imp, n| arg_extreme(imp, n, Op::ReduceMax, false)),
    OpEntry::since("ArgMin", 1, |imp, n| arg_extreme(imp, n, Op::ReduceMin, false)),
    OpEntry::new("Hardmax", hardmax),
    OpEntry::since("Hardmax", 1, hardmax_2d),
    OpEntry::since("Trilu", 14, trilu),
    // OneHot 11 allows negative indices (from the end of the depth), 9 does not: a superset.
    OpEntry::since("OneHot", 9, one_hot),
    // EyeLike 9 and 22 differ in types only.
    OpEntry::since("EyeLike", 9, eye_like),
    OpEntry::since("Range", 11, range),
    // Tile 6 takes `repeats` as an input, as 13 does (which adds types only); Tile 1, with
    // `tiles` and `axis` inputs, is older than the oldest opset graphc imports.
    OpEntry::since("Tile", 6, tile),
    // Compress 11 allows a negative axis, a superset of 9.
    OpEntry::since("Compress", 9, compress),
    OpEntry::since("ReverseSequence", 10, reverse_sequence),
    // TopK 1 has `k` as an attribute, 10 as an input; 11 adds `largest` and `sorted` (the
    // result is always sorted, which `sorted = 0` allows). Every version's default axis is -1.
    OpEntry::since("TopK", 11, top_k),
    OpEntry::since("TopK", 10, top_k),
    OpEntry::since("TopK", 1, top_k),
];

/// The index of the first (or, with `select_last_index`, the last) extreme element along
/// `axis`, as int64: where `x` equals its `reduce` (max or min) along the axis, an iota along
/// the axis, elsewhere a sentinel (the axis length, or -1), reduced by min (or max).
///
/// NaN: a slice holding a NaN has a NaN extreme, which equals nothing; graphc then takes the
/// first (or last) NaN's index, as numpy's argmax/argmin and ONNX Runtime do (NaN counts as
/// the extreme in both directions).
fn arg_extreme(imp: &mut Importer, n: &NodeProto, reduce: Op, has_select_last: bool) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let name = if reduce == Op::ReduceMax { "ArgMax" } else { "ArgMin" };
    if !has_select_last && a.get("select_last_index").is_some() {
        return Err(format!("{name} before version 12 has no select_last_index attribute (opset {})", imp.opset));
    }
    let last = match a.int("select_last_index", 0) {
        0 => false,
        1 => true,
        v => return Err(format!("select_last_index must be 0 or 1, got {v}")),
    };
    let keep = a.int("keepdims", 1) != 0;
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let axis = norm_axis(a.int("axis", 0), dims.len())?;
    let idx = extreme_index(imp, x, axis, reduce, last).map_err(|e| format!("{name}: {e}"))?;
    Ok(vec![if keep { idx } else { imp.reshape(idx, drop_axis(&dims, axis))? }])
}

/// `dims` without `axis`.
fn drop_axis(dims: &[i64], axis: usize) -> Vec<i64> {
    dims.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, &d)| d).collect()
}

/// The int64 index along `axis` (kept, of length 1) of the first (or last) element equal to
/// `x`'s extreme along it (NaN counting as the extreme).
fn extreme_index(imp: &mut Importer, mut x: Value, axis: usize, reduce: Op, last: bool) -> Result<Value> {
    let ty = imp.ty(x)?;
    let dims = imp.shape(x)?;
    let d = dims[axis];
    if d == 0 {
        return Err(format!("axis {axis} of length 0 has no index to return"));
    }
    if ty.dtype == DType::Bool {
        x = imp.cast(x, DType::I32)?;
    }
    let extreme = imp.reduce(reduce, x, vec![axis as i64], true)?;
    let mut hit = imp.binary(Op::Equal, x, extreme)?;
    if ty.dtype.is_float() {
        let nan = imp.binary(Op::NotEqual, x, x)?;
        hit = imp.binary(Op::Or, hit, nan)?;
    }
    let iota = iota(imp, dims.len(), axis, d)?;
    let sentinel = imp.constant(Tensor::I64(ndarray::arr0(if last { -1 } else { d }).into_dyn()))?;
    let idx = imp.emit1(NodeSpec::new(Op::Select, vec![hit, iota, sentinel]))?;
    let pick = if last { Op::ReduceMax } else { Op::ReduceMin };
    imp.reduce(pick, idx, vec![axis as i64], true)
}

/// 0..d along `axis` of a rank-`rank` int64 constant, 1 along the other axes.
fn iota(imp: &mut Importer, rank: usize, axis: usize, d: i64) -> Result<Value> {
    let mut shape = vec![1usize; rank];
    shape[axis] = d as usize;
    let iota = ndarray::Array1::from_iter(0..d).into_shape_with_order(ndarray::IxDyn(&shape));
    imp.constant(Tensor::I64(iota.map_err(|e| e.to_string())?))
}

/// Hardmax 13: 1 at the first maximum along `axis` (default -1), 0 elsewhere, in x's type.
fn hardmax(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let axis = norm_axis(Attrs(n).int("axis", -1), dims.len())?;
    Ok(vec![one_at_max(imp, x, axis)?])
}

/// Hardmax 1 and 11: over x coerced to 2-D at `axis` (default 1), as Softmax before 13.
fn hardmax_2d(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let axis = norm_axis(Attrs(n).int("axis", 1), dims.len().max(1))?.min(dims.len());
    let rows: i64 = dims[..axis].iter().product();
    let cols: i64 = dims[axis..].iter().product();
    let m = imp.reshape(x, vec![rows, cols])?;
    let y = one_at_max(imp, m, 1)?;
    Ok(vec![imp.reshape(y, dims)?])
}

fn one_at_max(imp: &mut Importer, x: Value, axis: usize) -> Result<Value> {
    let ty = imp.ty(x)?;
    let idx = extreme_index(imp, x, axis, Op::ReduceMax, false).map_err(|e| format!("Hardmax: {e}"))?;
    let iota = iota(imp, ty.rank(), axis, ty.shape[axis] as i64)?;
    let hit = imp.binary(Op::Equal, iota, idx)?;
    imp.cast(hit, ty.dtype)
}

/// Keeps the elements on and above (`upper`, the default) or below the `k`-th diagonal of the
/// last two dims: a constant bool mask of those dims selects between `x` and zero.
fn trilu(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let upper = match Attrs(n).int("upper", 1) {
        0 => false,
        1 => true,
        v => return Err(format!("upper must be 0 or 1, got {v}")),
    };
    let x = imp.input(n, 0)?;
    let dtype = imp.ty(x)?.dtype;
    let dims = imp.shape(x)?;
    if dims.len() < 2 {
        return Err(format!("the input must have rank 2 or more, got rank {}", dims.len()));
    }
    let k = match imp.const_ints(n, 1, "k")? {
        None => 0,
        Some(v) if v.len() == 1 => v[0],
        Some(v) => return Err(format!("k must hold one value, got {}", v.len())),
    };
    let (rows, cols) = (dims[dims.len() - 2] as usize, dims[dims.len() - 1] as usize);
    let mask = ndarray::Array2::from_shape_fn((rows, cols), |(i, j)| {
        let diag = j as i64 - i as i64;
        if upper {
            diag >= k
        } else {
            diag <= k
        }
    });
    let mask = imp.constant(Tensor::Bool(mask.into_dyn()))?;
    let zero = imp.scalar(dtype, 0.0)?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Select, vec![mask, x, zero]))?])
}

/// `start`, `start + delta`, ... up to (not including) `limit`: a constant of the inputs'
/// dtype and `max(ceil((limit - start) / delta), 0)` elements. Integers are computed exactly;
/// floats as `start + i * delta` in f64, rounded to the dtype.
fn range(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let mut scalars = Vec::new();
    for (i, what) in ["start", "limit", "delta"].into_iter().enumerate() {
        let t = imp.const_input(n, i, what)?.ok_or(format!("input {i} ({what}) is required"))?;
        if t.len() != 1 {
            return Err(format!("{what} must be a scalar, got shape {:?}", t.shape()));
        }
        scalars.push(t.clone());
    }
    let dtype = scalars[0].dtype();
    if scalars.iter().any(|t| t.dtype() != dtype) {
        return Err("start, limit and delta must have the same type".into());
    }
    const MAX_LEN: u64 = 1 << 28;
    let too_long = |len: u64| format!("the range would hold {len} elements (at most {MAX_LEN} are supported)");
    let t = match dtype {
        d if d.is_int() => {
            let v: Vec<i64> = scalars
                .iter()
                .map(|t| match graphc_runtime::kernels::cast(t, DType::I64) {
                    Tensor::I64(a) => a.iter().next().copied(),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or("start, limit and delta must be integers")?;
            let (start, limit, delta) = (v[0] as i128, v[1] as i128, v[2] as i128);
            if delta == 0 {
                return Err("delta must not be 0".into());
            }
            // ceil((limit - start) / delta) with a positive divisor: -floor(-a / b).
            let (a, b) = if delta < 0 { (start - limit, -delta) } else { (limit - start, delta) };
            let len = (-(-a).div_euclid(b)).max(0) as u64;
            if len > MAX_LEN {
                return Err(too_long(len));
            }
            let vals = (0..len as i128).map(|i| start + i * delta);
            graphc_runtime::kernels::cast(
                &Tensor::I64(ndarray::Array1::from_iter(vals.map(|x| x as i64)).into_dyn()),
                dtype,
            )
        }
        d if d.is_float() => {
            let v: Vec<f64> = scalars.iter().map(|t| t.to_f64_vec()[0]).collect();
            let (start, limit, delta) = (v[0], v[1], v[2]);
            if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
                return Err(format!("start {start}, limit {limit} and delta {delta} must be finite, delta nonzero"));
            }
            let len = ((limit - start) / delta).ceil().max(0.0);
            if len > MAX_LEN as f64 {
                return Err(too_long(len as u64));
            }
            let vals = ndarray::Array1::from_iter((0..len as u64).map(|i| start + i as f64 * delta)).into_dyn();
            graphc_runtime::kernels::cast(&Tensor::F64(vals), dtype)
        }
        other => return Err(format!("Range over {} is not supported (numbers only)", other.name())),
    };
    Ok(vec![imp.constant(t)?])
}

/// `x` repeated `repeats[i]` times along each axis `i`: each repeated axis gets a singleton
/// axis before it (a reshape), which is broadcast to the repeat count and merged back.
fn tile(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let repeats = imp.const_ints(n, 1, "repeats")?.ok_or("input 1 (repeats) is required")?;
    if repeats.len() != dims.len() {
        return Err(format!("repeats has {} entries for an input of rank {}", repeats.len(), dims.len()));
    }
    if let Some(r) = repeats.iter().find(|&&r| r < 0) {
        return Err(format!("repeats must not be negative, got {r}"));
    }
    if repeats.iter().all(|&r| r == 1) {
        return Ok(vec![imp.unary(Op::Identity, x)?]);
    }
    let (mut split, mut wide, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (&d, &r) in dims.iter().zip(&repeats) {
        if r != 1 {
            split.push(1);
            wide.push(r);
        }
        split.push(d);
        wide.push(d);
        out.push(d * r);
    }
    let y = imp.reshape(x, split)?;
    let y = imp.emit1(NodeSpec::new(Op::Broadcast, vec![y]).attr("shape", Attr::Ints(wide)))?;
    Ok(vec![imp.reshape(y, out)?])
}

/// OneHot: `values[1]` where the iota along the new axis equals the index (a negative index
/// counting from `depth`), else `values[0]`; indices outside `[-depth, depth)` give a row of
/// `values[0]`. `depth` must be known at import (it is the new axis's length).
fn one_hot(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let indices = imp.input(n, 0)?;
    let depth = imp.const_input(n, 1, "depth")?.ok_or("input 1 (depth) is required")?;
    if depth.len() != 1 {
        return Err(format!("depth must hold one value, got shape {:?}", depth.shape()));
    }
    let d = depth.to_f64_vec()[0];
    if !(d >= 1.0 && d <= (1u64 << 31) as f64) {
        return Err(format!("depth must be a positive count, got {d}"));
    }
    let d = d as i64;
    let values = imp.input(n, 2)?;
    if imp.shape(values)? != [2] {
        return Err(format!("values must be [off, on], got shape {:?}", imp.shape(values)?));
    }
    let dims = imp.shape(indices)?;
    let axis = norm_axis(Attrs(n).int("axis", -1), dims.len() + 1)?;
    let idx = imp.cast(indices, DType::I64)?;
    let (zero, depth) = (imp.scalar(DType::I64, 0.0)?, imp.scalar(DType::I64, d as f64)?);
    let negative = imp.binary(Op::Less, idx, zero)?;
    let wrapped = imp.binary(Op::Add, idx, depth)?;
    let idx = imp.emit1(NodeSpec::new(Op::Select, vec![negative, wrapped, idx]))?;
    let mut shape = dims.clone();
    shape.insert(axis, 1);
    let idx = imp.reshape(idx, shape)?;
    let iota = iota(imp, dims.len() + 1, axis, d)?;
    let hit = imp.binary(Op::Equal, iota, idx)?;
    let pick = |imp: &mut Importer, i: i64| -> Result<Value> {
        let v = imp.emit1(
            NodeSpec::new(Op::Slice, vec![values])
                .attr("starts", Attr::Ints(vec![i]))
                .attr("ends", Attr::Ints(vec![i + 1])),
        )?;
        imp.reshape(v, vec![])
    };
    let (off, on) = (pick(imp, 0)?, pick(imp, 1)?);
    Ok(vec![imp.emit1(NodeSpec::new(Op::Select, vec![hit, on, off]))?])
}

/// EyeLike: a constant of the 2-D input's shape with ones on the `k`-th diagonal, of `dtype`
/// (by default the input's).
fn eye_like(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let ty = imp.ty(x)?;
    let [rows, cols] = ty.shape[..] else {
        return Err(format!("EyeLike takes a 2-D input, got rank {}", ty.rank()));
    };
    let dtype = a.dtype("dtype")?.unwrap_or(ty.dtype);
    let k = a.int("k", 0);
    let eye = ndarray::Array2::from_shape_fn((rows as usize, cols as usize), |(i, j)| {
        if j as i64 - i as i64 == k {
            1.0
        } else {
            0.0
        }
    });
    let t = graphc_runtime::kernels::cast(&Tensor::F64(eye.into_dyn()), dtype);
    Ok(vec![imp.constant(t)?])
}

/// The slices of `x` along `axis` (of the flattened `x` without one) where `condition`, known at
/// import, is true; a condition shorter than the axis leaves out the rest (numpy's `compress`).
fn compress(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let mut x = imp.input(n, 0)?;
    let condition = imp.const_input(n, 1, "condition")?.ok_or("input 1 (condition) is required")?.to_f64_vec();
    let axis = match Attrs(n).get("axis") {
        Some(_) => norm_axis(Attrs(n).int("axis", 0), imp.shape(x)?.len())?,
        None => {
            x = imp.reshape(x, vec![-1])?;
            0
        }
    };
    let extent = imp.shape(x)?[axis];
    if condition.len() as i64 > extent {
        return Err(format!("the condition has {} entries for an axis of {extent}", condition.len()));
    }
    let keep: Vec<i64> = (0..condition.len() as i64).filter(|&i| condition[i as usize] != 0.0).collect();
    let idx = imp.constant(Tensor::I64(ndarray::Array1::from(keep).into_dyn()))?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Gather, vec![x, idx]).attr("axis", Attr::Int(axis as i64)))?])
}

/// Each batch entry's first `sequence_lens[b]` steps reversed (the lengths known at import): a
/// gather of (batch, time) rows in a constant order.
fn reverse_sequence(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let (batch_axis, time_axis) = (a.int("batch_axis", 1), a.int("time_axis", 0));
    if dims.len() < 2 || ![(0, 1), (1, 0)].contains(&(batch_axis, time_axis)) {
        return Err(format!(
            "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 of a tensor of rank 2 or more (rank {})",
            dims.len()
        ));
    }
    let lens = imp.const_ints(n, 1, "sequence_lens")?.ok_or("input 1 (sequence_lens) is required")?;
    let (batch, time) = (dims[batch_axis as usize], dims[time_axis as usize]);
    if lens.len() as i64 != batch || lens.iter().any(|&l| l < 0 || l > time) {
        return Err(format!("sequence_lens {lens:?} must be {batch} lengths of at most {time}"));
    }
    // Rows of the (batch, time)-major view, as the data's own first two axes order them.
    let row = |b: i64, t: i64| if batch_axis == 0 { b * time + t } else { t * batch + b };
    let mut order = vec![0; (batch * time) as usize];
    for (b, &len) in lens.iter().enumerate() {
        let b = b as i64;
        for t in 0..time {
            let from = if t < len { len - 1 - t } else { t };
            order[row(b, t) as usize] = row(b, from);
        }
    }
    let mut rows = vec![dims[0] * dims[1]];
    rows.extend(&dims[2..]);
    let flat = imp.reshape(x, rows)?;
    let idx = imp.constant(Tensor::I64(ndarray::Array1::from(order).into_dyn()))?;
    let y = imp.emit1(NodeSpec::new(Op::Gather, vec![flat, idx]).attr("axis", Attr::Int(0)))?;
    Ok(vec![imp.reshape(y, dims)?])
}

fn top_k(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let k = match imp.opset {
        ..10 => a.get("k").map(|_| a.int("k", 0)).ok_or("the k attribute is required")?,
        _ => match imp.const_ints(n, 1, "K")?.ok_or("input 1 (K) is required")?[..] {
            [k] => k,
            ref other => return Err(format!("input 1 (K) must hold one value, got {}", other.len())),
        },
    };
    let axis = norm_axis(a.int("axis", -1), imp.shape(x)?.len())?;
    imp.emit(
        NodeSpec::new(Op::TopK, vec![x])
            .attr("k", Attr::Int(k))
            .attr("axis", Attr::Int(axis as i64))
            .attr("largest", Attr::Bool(a.int("largest", 1) != 0)),
    )
}
