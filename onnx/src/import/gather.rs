//! Data-dependent indexing: GatherElements, ScatterElements (and the older Scatter) and
//! ScatterND, composed on the flattened data. The indices (normalized for negatives with a
//! select) become flat positions, `index * stride` plus a constant iota of the other
//! coordinates' offsets; a `gather` or `scatter_add` on the data reshaped to one dim (or, for
//! ScatterND, to [positions, slice]) does the rest. Reductions: add is `scatter_add`; none
//! (overwrite) clears the positions that an update lands on (a mask from a scatter of ones)
//! first; mul sums logarithms of magnitudes and counts negative signs; max and min compare
//! every update with every position (a one-hot mask), so they are limited in size. CumSum is
//! here too: a product with a constant triangular 0/1 matrix along the axis.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    // GatherElements 11 and 13 differ only in element types.
    OpEntry::since("GatherElements", 11, gather_elements),
    // GatherND 11 has no `batch_dims` (12 adds it, 13 only types).
    OpEntry::since("GatherND", 11, gather_nd),
    // ScatterElements 11 (13: types) overwrites; 16 adds `reduction` add and mul, 18 max
    // and min. Scatter 9 is ScatterElements 11 under its old name (deprecated in 11).
    OpEntry::since("ScatterElements", 11, |imp, n| scatter_elements(imp, n, "ScatterElements")),
    OpEntry::since("Scatter", 9, |imp, n| scatter_elements(imp, n, "Scatter")),
    // ScatterND 11 (13: types) overwrites; 16 adds `reduction` add and mul, 18 max and min.
    OpEntry::since("ScatterND", 11, scatter_nd),
    // TensorScatter 24: a KV-cache update at per-batch write positions.
    OpEntry::since("TensorScatter", 24, tensor_scatter),
    // CumSum 14 only adds element types to 11.
    OpEntry::since("CumSum", 11, cumsum),
];

/// Indices as i64 with negatives counted from the end of a dim of size `d` (a scalar) or
/// dims `d` (a tensor broadcasting against them).
fn normalized(imp: &mut Importer, idx: Value, d: Value) -> Result<Value> {
    let idx = if imp.ty(idx)?.dtype == DType::I64 {
        idx
    } else {
        imp.emit1(NodeSpec::new(Op::Cast, vec![idx]).attr("to", Attr::DType(DType::I64)))?
    };
    let zero = imp.scalar(DType::I64, 0.0)?;
    let neg = imp.binary(Op::Less, idx, zero)?;
    let wrapped = imp.binary(Op::Add, idx, d)?;
    imp.emit1(NodeSpec::new(Op::Select, vec![neg, wrapped, idx]))
}

fn i64_tensor(shape: &[i64], data: Vec<i64>) -> Result<Tensor> {
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    Ok(Tensor::I64(ndarray::ArrayD::from_shape_vec(shape, data).map_err(|e| e.to_string())?))
}

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// The flat position in data (of `dims`) of every element of `indices` read along `axis`:
/// `normalized(indices) * stride[axis] + sum_{j != axis} i_j * stride[j]`, shaped as indices.
fn flat_positions(imp: &mut Importer, op: &str, indices: Value, dims: &[i64], axis: usize) -> Result<Value> {
    let ishape = imp.shape(indices)?;
    if ishape.len() != dims.len() {
        return Err(format!("{op}: indices have rank {} but data rank {}", ishape.len(), dims.len()));
    }
    for (j, (&i, &d)) in ishape.iter().zip(dims).enumerate() {
        if j != axis && i > d {
            return Err(format!("{op}: indices dim {j} ({i}) exceeds data's ({d})"));
        }
    }
    let st = strides(dims);
    let count: i64 = ishape.iter().product();
    let ist = strides(&ishape);
    let offsets: Vec<i64> = (0..count)
        .map(|f| (0..ishape.len()).filter(|&j| j != axis).map(|j| (f / ist[j]) % ishape[j] * st[j]).sum())
        .collect();
    let d = imp.scalar(DType::I64, dims[axis] as f64)?;
    let idx = normalized(imp, indices, d)?;
    let s = imp.scalar(DType::I64, st[axis] as f64)?;
    let scaled = imp.binary(Op::Mul, idx, s)?;
    let off = imp.constant(i64_tensor(&ishape, offsets)?)?;
    imp.binary(Op::Add, scaled, off)
}

fn gather_elements(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let data = imp.input(n, 0)?;
    let indices = imp.input(n, 1)?;
    let dims = imp.shape(data)?;
    let axis = norm_axis(Attrs(n).int("axis", 0), dims.len())?;
    let flat = flat_positions(imp, "GatherElements", indices, &dims, axis)?;
    let all: i64 = dims.iter().product();
    let data = imp.reshape(data, vec![all])?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Gather, vec![data, flat]).attr("axis", Attr::Int(0)))?])
}

/// GatherND: the data as `[batch * rows, slice]` (rows: the dims the index tuples address),
/// each index tuple a flat row (its batch's first row plus `sum_j index_j * stride_j`), one
/// `gather` of rows, reshaped to `indices.shape[..-1] ++ slice dims`.
fn gather_nd(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let op = "GatherND";
    let data = imp.input(n, 0)?;
    let indices = imp.input(n, 1)?;
    let dims = imp.shape(data)?;
    let ishape = imp.shape(indices)?;
    let b = Attrs(n).int("batch_dims", 0);
    if b != 0 && imp.opset < 12 {
        return Err(format!("{op}: batch_dims is only in version 12 and later (opset {})", imp.opset));
    }
    let b = b as usize;
    let k = *ishape.last().ok_or(format!("{op}: indices must have rank at least 1"))? as usize;
    if b >= ishape.len() || b + k > dims.len() || ishape[..b] != dims[..b] {
        return Err(format!(
            "{op}: indices {ishape:?} with batch_dims {b} do not fit data {dims:?} (batch dims equal, tuples of at most rank - batch_dims)"
        ));
    }
    let batch: i64 = dims[..b].iter().product();
    let rows: i64 = dims[b..b + k].iter().product();
    let inner: i64 = dims[b + k..].iter().product();
    let lead = &ishape[..ishape.len() - 1];
    let count: i64 = lead.iter().product();
    let per_batch = count / batch.max(1);
    let base: Vec<i64> = (0..count).map(|f| f / per_batch.max(1) * rows).collect();
    let mut flat = imp.constant(i64_tensor(lead, base)?)?;
    if k > 0 {
        let dvec = imp.constant(i64_tensor(&[k as i64], dims[b..b + k].to_vec())?)?;
        let svec = imp.constant(i64_tensor(&[k as i64], strides(&dims[b..b + k]))?)?;
        let idx = normalized(imp, indices, dvec)?;
        let scaled = imp.binary(Op::Mul, idx, svec)?;
        let sum = imp.reduce(Op::ReduceSum, scaled, vec![ishape.len() as i64 - 1], false)?;
        flat = imp.binary(Op::Add, sum, flat)?;
    }
    let table = imp.reshape(data, vec![batch * rows, inner])?;
    let out = imp.emit1(NodeSpec::new(Op::Gather, vec![table, flat]).attr("axis", Attr::Int(0)))?;
    let mut shape = lead.to_vec();
    shape.extend(&dims[b + k..]);
    Ok(vec![imp.reshape(out, shape)?])
}

/// The `reduction` attribute, checked against the version that introduced each value.
fn reduction(imp: &Importer, n: &NodeProto, op: &str) -> Result<String> {
    let r = Attrs(n).string("reduction", "none");
    let since = match r.as_str() {
        "none" => 1,
        "add" | "mul" => 16,
        "max" | "min" => 18,
        other => return Err(format!("{op}: reduction '{other}' is not one of none, add, mul, max, min")),
    };
    if imp.opset < since {
        return Err(format!("{op}: reduction '{r}' is only in version {since} and later (opset {})", imp.opset));
    }
    Ok(r)
}

fn scatter_elements(imp: &mut Importer, n: &NodeProto, op: &str) -> Result<Vec<Value>> {
    let reduction = reduction(imp, n, op)?;
    let data = imp.input(n, 0)?;
    let indices = imp.input(n, 1)?;
    let updates = imp.input(n, 2)?;
    let dims = imp.shape(data)?;
    let ishape = imp.shape(indices)?;
    if imp.shape(updates)? != ishape {
        return Err(format!("{op}: updates must have the indices' shape {ishape:?}"));
    }
    let axis = norm_axis(Attrs(n).int("axis", 0), dims.len())?;
    let flat = flat_positions(imp, op, indices, &dims, axis)?;
    let count: i64 = ishape.iter().product();
    let all: i64 = dims.iter().product();
    let flat = imp.reshape(flat, vec![count])?;
    let base = imp.reshape(data, vec![all, 1])?;
    let updates = imp.reshape(updates, vec![count, 1])?;
    let out = scatter_rows(imp, op, &reduction, base, flat, updates)?;
    Ok(vec![imp.reshape(out, dims)?])
}

fn scatter_nd(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let op = "ScatterND";
    let reduction = reduction(imp, n, op)?;
    let data = imp.input(n, 0)?;
    let indices = imp.input(n, 1)?;
    let updates = imp.input(n, 2)?;
    let dims = imp.shape(data)?;
    let ishape = imp.shape(indices)?;
    let k = *ishape.last().ok_or(format!("{op}: indices must have rank at least 1"))? as usize;
    if k > dims.len() {
        return Err(format!("{op}: index tuples of {k} entries for data of rank {}", dims.len()));
    }
    let lead = &ishape[..ishape.len() - 1];
    let mut ushape = lead.to_vec();
    ushape.extend(&dims[k..]);
    if imp.shape(updates)? != ushape {
        return Err(format!("{op}: updates must have shape {ushape:?}"));
    }
    let rows: i64 = dims[..k].iter().product();
    let inner: i64 = dims[k..].iter().product();
    let count: i64 = lead.iter().product();
    // Flat row = sum_j normalized(idx[..., j]) * stride_j over the first k dims.
    let row_strides = strides(&dims[..k]);
    let dvec = imp.constant(i64_tensor(&[k as i64], dims[..k].to_vec())?)?;
    let svec = imp.constant(i64_tensor(&[k as i64], row_strides)?)?;
    let idx = normalized(imp, indices, dvec)?;
    let scaled = imp.binary(Op::Mul, idx, svec)?;
    let last = ishape.len() as i64 - 1;
    let flat = imp.reduce(Op::ReduceSum, scaled, vec![last], false)?;
    let flat = imp.reshape(flat, vec![count])?;
    let base = imp.reshape(data, vec![rows, inner])?;
    let updates = imp.reshape(updates, vec![count, inner])?;
    let out = scatter_rows(imp, op, &reduction, base, flat, updates)?;
    Ok(vec![imp.reshape(out, dims)?])
}

/// Scatters `updates` `[Q, S]` into the rows of `base` `[N, S]` at `rows` `[Q]` (i64, in
/// range) with a reduction.
fn scatter_rows(
    imp: &mut Importer,
    op: &str,
    reduction: &str,
    base: Value,
    rows: Value,
    updates: Value,
) -> Result<Value> {
    let ty = imp.ty(base)?;
    let dtype = ty.dtype;
    if dtype == DType::Bool {
        // As 0/1 integers, and back.
        let cast = |imp: &mut Importer, v: Value, to: DType| {
            imp.emit1(NodeSpec::new(Op::Cast, vec![v]).attr("to", Attr::DType(to)))
        };
        if !matches!(reduction, "none" | "max" | "min") {
            return Err(format!("{op}: reduction '{reduction}' on booleans is not supported"));
        }
        let b = cast(imp, base, DType::I32)?;
        let u = cast(imp, updates, DType::I32)?;
        let out = scatter_rows(imp, op, reduction, b, rows, u)?;
        return cast(imp, out, DType::Bool);
    }
    let dims = imp.shape(base)?;
    let (nrows, inner) = (dims[0], dims[1]);
    let q = imp.shape(rows)?[0];
    let scatter = |imp: &mut Importer, b: Value, u: Value| {
        imp.emit1(NodeSpec::new(Op::ScatterAdd, vec![b, rows, u]).attr("axis", Attr::Int(0)))
    };
    // Rows that some update lands on, as a [N, 1] mask.
    let hit = |imp: &mut Importer| -> Result<Value> {
        let zero = imp.scalar(DType::F32, 0.0)?;
        let zeros = imp.emit1(NodeSpec::new(Op::Broadcast, vec![zero]).attr("shape", Attr::Ints(vec![nrows])))?;
        let one = imp.scalar(DType::F32, 1.0)?;
        let ones = imp.emit1(NodeSpec::new(Op::Broadcast, vec![one]).attr("shape", Attr::Ints(vec![q])))?;
        let counts = scatter(imp, zeros, ones)?;
        let landed = imp.binary(Op::Greater, counts, zero)?;
        imp.reshape(landed, vec![nrows, 1])
    };
    match reduction {
        "add" => scatter(imp, base, updates),
        "none" => {
            let mask = hit(imp)?;
            let zero = imp.scalar(dtype, 0.0)?;
            let cleared = imp.emit1(NodeSpec::new(Op::Select, vec![mask, zero, base]))?;
            scatter(imp, cleared, updates)
        }
        "mul" => {
            // In f64: |product| = exp(sum log|u|) (a zero gives exp(-inf) = 0), its sign from
            // the count of negative factors; integers are rounded back.
            let f = |imp: &mut Importer, v: Value| {
                imp.emit1(NodeSpec::new(Op::Cast, vec![v]).attr("to", Attr::DType(DType::F64)))
            };
            let u = f(imp, updates)?;
            let b = f(imp, base)?;
            let zero = imp.scalar(DType::F64, 0.0)?;
            let one = imp.scalar(DType::F64, 1.0)?;
            let two = imp.scalar(DType::F64, 2.0)?;
            let zeros =
                imp.emit1(NodeSpec::new(Op::Broadcast, vec![zero]).attr("shape", Attr::Ints(vec![nrows, inner])))?;
            let mag = imp.unary(Op::Abs, u)?;
            let logs = imp.unary(Op::Log, mag)?;
            let sum = scatter(imp, zeros, logs)?;
            let prod = imp.unary(Op::Exp, sum)?;
            let neg = imp.binary(Op::Less, u, zero)?;
            let negs = imp.emit1(NodeSpec::new(Op::Select, vec![neg, one, zero]))?;
            let count = scatter(imp, zeros, negs)?;
            // sign = 1 - 2 * (count mod 2), count mod 2 = count - 2 * floor(count / 2).
            let half = imp.binary(Op::Div, count, two)?;
            let half_i = imp.emit1(NodeSpec::new(Op::Cast, vec![half]).attr("to", Attr::DType(DType::I64)))?;
            let half_f = f(imp, half_i)?;
            let twice = imp.binary(Op::Mul, half_f, two)?;
            let odd = imp.binary(Op::Sub, count, twice)?;
            let odd2 = imp.binary(Op::Mul, odd, two)?;
            let sign = imp.binary(Op::Sub, one, odd2)?;
            let signed = imp.binary(Op::Mul, prod, sign)?;
            let mut out = imp.binary(Op::Mul, b, signed)?;
            if !dtype.is_float() {
                // Round to nearest: floor(|x| + 0.5) with the sign, by a cast's truncation.
                let halfv = imp.scalar(DType::F64, 0.5)?;
                let negout = imp.binary(Op::Less, out, zero)?;
                let mag = imp.unary(Op::Abs, out)?;
                let up = imp.binary(Op::Add, mag, halfv)?;
                let upn = imp.unary(Op::Neg, up)?;
                out = imp.emit1(NodeSpec::new(Op::Select, vec![negout, upn, up]))?;
            }
            imp.emit1(NodeSpec::new(Op::Cast, vec![out]).attr("to", Attr::DType(dtype)))
        }
        "max" | "min" => {
            // Every update against every row: [Q, N, S] elements.
            let size = q * nrows * inner;
            if size > 1 << 24 {
                return Err(format!(
                    "{op}: reduction '{reduction}' compares each of {q} updates with each of {nrows} rows; graphc limits that to 2^24 elements (got {size})"
                ));
            }
            let iota = imp.constant(i64_tensor(&[1, nrows], (0..nrows).collect())?)?;
            let col = imp.reshape(rows, vec![q, 1])?;
            let onehot = imp.binary(Op::Equal, col, iota)?;
            let onehot = imp.reshape(onehot, vec![q, nrows, 1])?;
            let u = imp.reshape(updates, vec![q, 1, inner])?;
            let (reduce, fill) =
                if reduction == "max" { (Op::ReduceMax, f64::NEG_INFINITY) } else { (Op::ReduceMin, f64::INFINITY) };
            let fill = imp.scalar(dtype, fill)?;
            let spread = imp.emit1(NodeSpec::new(Op::Select, vec![onehot, u, fill]))?;
            let best = imp.reduce(reduce, spread, vec![0], false)?;
            let combined = imp.binary(if reduction == "max" { Op::Max } else { Op::Min }, base, best)?;
            let mask = hit(imp)?;
            imp.emit1(NodeSpec::new(Op::Select, vec![mask, combined, base]))
        }
        other => Err(format!("{op}: reduction '{other}' is not supported")),
    }
}

/// TensorScatter: `update` written into `past_cache` along `axis` (not the batch dim 0) from
/// `write_indices[b]` on (0 without them), wrapping modulo the cache length in circular mode;
/// an overwrite scatter at flat positions computed as for ScatterElements.
fn tensor_scatter(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let op = "TensorScatter";
    let a = Attrs(n);
    let cache = imp.input(n, 0)?;
    let update = imp.input(n, 1)?;
    let dims = imp.shape(cache)?;
    let udims = imp.shape(update)?;
    let r = dims.len();
    let axis = norm_axis(a.int("axis", -2), r)?;
    if axis == 0 {
        return Err(format!("{op}: the axis cannot be the batch dim 0"));
    }
    if udims.len() != r || (0..r).any(|i| if i == axis { udims[i] > dims[i] } else { udims[i] != dims[i] }) {
        return Err(format!("{op}: update shape {udims:?} does not fit the cache's {dims:?} along axis {axis}"));
    }
    let circular = match a.string("mode", "linear").as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(format!("{op}: mode '{other}' is not one of linear, circular")),
    };
    let st = strides(&dims);
    let count: i64 = udims.iter().product();
    let ust = strides(&udims);
    let offsets: Vec<i64> =
        (0..count).map(|f| (0..r).filter(|&j| j != axis).map(|j| (f / ust[j]) % udims[j] * st[j]).sum()).collect();
    let mut ishape = vec![1i64; r];
    ishape[axis] = udims[axis];
    let iota = imp.constant(i64_tensor(&ishape, (0..udims[axis]).collect())?)?;
    let mut pos = match imp.opt_input(n, 2)? {
        Some(w) => {
            let wd = imp.shape(w)?;
            if wd != [dims[0]] {
                return Err(format!("{op}: write_indices must have shape [{}], got {wd:?}", dims[0]));
            }
            let w = if imp.ty(w)?.dtype == DType::I64 {
                w
            } else {
                imp.emit1(NodeSpec::new(Op::Cast, vec![w]).attr("to", Attr::DType(DType::I64)))?
            };
            let mut wshape = vec![1i64; r];
            wshape[0] = dims[0];
            let w = imp.reshape(w, wshape)?;
            imp.binary(Op::Add, w, iota)?
        }
        None => iota,
    };
    if circular {
        // Write positions are below the cache length L and updates no longer than it, so one
        // subtraction of L wraps.
        let l = imp.scalar(DType::I64, dims[axis] as f64)?;
        let over = imp.binary(Op::GreaterEqual, pos, l)?;
        let back = imp.binary(Op::Sub, pos, l)?;
        pos = imp.emit1(NodeSpec::new(Op::Select, vec![over, back, pos]))?;
    }
    let s = imp.scalar(DType::I64, st[axis] as f64)?;
    let scaled = imp.binary(Op::Mul, pos, s)?;
    let off = imp.constant(i64_tensor(&udims, offsets)?)?;
    let flat = imp.binary(Op::Add, scaled, off)?;
    let flat = imp.reshape(flat, vec![count])?;
    let all: i64 = dims.iter().product();
    let base = imp.reshape(cache, vec![all, 1])?;
    let updates = imp.reshape(update, vec![count, 1])?;
    let out = scatter_rows(imp, op, "none", base, flat, updates)?;
    Ok(vec![imp.reshape(out, dims)?])
}

/// CumSum along `axis` (input 1, known at import): the axis moved last, then a matmul with the
/// 0/1 matrix `T[j, i]` = "element j counts towards sum i" (j <= i; j < i when `exclusive`;
/// reversed with `reverse`), and moved back. Integers, which matmul may not take, multiply
/// and reduce_sum over j instead.
fn cumsum(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let axis = imp.const_ints(n, 1, "axis")?.ok_or("CumSum: input 1 (axis) is required")?;
    let [axis] = axis[..] else {
        return Err(format!("CumSum: the axis must be one integer, got {axis:?}"));
    };
    let exclusive = a.int("exclusive", 0) != 0;
    let reverse = a.int("reverse", 0) != 0;
    let ty = imp.ty(x)?;
    let dims = imp.shape(x)?;
    let r = dims.len();
    if r == 0 {
        return Err("CumSum: the input must have rank at least 1".into());
    }
    let axis = norm_axis(axis, r)?;
    let d = dims[axis];
    let counts = |j: i64, i: i64| match (exclusive, reverse) {
        (false, false) => j <= i,
        (true, false) => j < i,
        (false, true) => j >= i,
        (true, true) => j > i,
    };
    let tri: Vec<f64> = (0..d * d).map(|f| if counts(f / d, f % d) { 1.0 } else { 0.0 }).collect();
    let tri =
        Tensor::F64(ndarray::ArrayD::from_shape_vec(vec![d as usize, d as usize], tri).map_err(|e| e.to_string())?);
    let tri = imp.constant(graphc_runtime::kernels::cast(&tri, ty.dtype))?;
    // Move the axis last.
    let mut perm: Vec<i64> = (0..r as i64).filter(|&i| i != axis as i64).collect();
    perm.push(axis as i64);
    let moved = axis != r - 1;
    let xt = if moved {
        imp.emit1(NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(perm.clone())))?
    } else {
        x
    };
    let mut tdims: Vec<i64> = perm.iter().map(|&p| dims[p as usize]).collect();
    let y = if ty.dtype.is_float() {
        let (xm, reshaped) = if r == 1 { (imp.reshape(xt, vec![1, d])?, true) } else { (xt, false) };
        let y = imp.binary(Op::MatMul, xm, tri)?;
        if reshaped {
            imp.reshape(y, vec![d])?
        } else {
            y
        }
    } else {
        // [..., d, 1] * [d, d] summed over the second last dim.
        tdims.push(1);
        let col = imp.reshape(xt, tdims.clone())?;
        let prod = imp.binary(Op::Mul, col, tri)?;
        imp.reduce(Op::ReduceSum, prod, vec![r as i64 - 1], false)?
    };
    if !moved {
        return Ok(vec![y]);
    }
    let mut inv = vec![0i64; r];
    for (i, &p) in perm.iter().enumerate() {
        inv[p as usize] = i as i64;
    }
    Ok(vec![imp.emit1(NodeSpec::new(Op::Transpose, vec![y]).attr("perm", Attr::Ints(inv)))?])
}
