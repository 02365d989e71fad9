//! Normalizations composed of reductions and elementwise ops: RMSNormalization,
//! InstanceNormalization, GroupNormalization, MeanVarianceNormalization and LpNormalization.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use crate::tensor::dtype_of;
use graphc_ir::shape::{broadcasts_to, fmt_shape};
use graphc_ir::{DType, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::since("RMSNormalization", 23, rms_norm),
    // InstanceNormalization 6 and 22 differ in types only.
    OpEntry::since("InstanceNormalization", 6, instance_norm),
    // GroupNormalization 21 scales per channel; 18 (deprecated by 21) per group.
    OpEntry::since("GroupNormalization", 21, |imp, n| group_norm(imp, n, true)),
    OpEntry::since("GroupNormalization", 18, |imp, n| group_norm(imp, n, false)),
    OpEntry::since("MeanVarianceNormalization", 9, mean_variance_norm),
    OpEntry::since("LpNormalization", 1, lp_norm),
];

/// `(x - mean) / sqrt(var + epsilon)` over `axes`, in x's type (biased variance).
fn standardize(imp: &mut Importer, x: Value, axes: Vec<i64>, epsilon: f64) -> Result<Value> {
    let dtype = imp.ty(x)?.dtype;
    let mean = imp.reduce(Op::ReduceMean, x, axes.clone(), true)?;
    let d = imp.binary(Op::Sub, x, mean)?;
    let sq = imp.binary(Op::Mul, d, d)?;
    let var = imp.reduce(Op::ReduceMean, sq, axes, true)?;
    let eps = imp.scalar(dtype, epsilon)?;
    let ve = imp.binary(Op::Add, var, eps)?;
    let sd = imp.unary(Op::Sqrt, ve)?;
    imp.binary(Op::Div, d, sd)
}

/// `[C]` as `[1, C, 1, ...]` for an input of rank `rank`.
fn per_channel(imp: &mut Importer, v: Value, c: i64, rank: usize) -> Result<Value> {
    let mut shape = vec![1; rank];
    shape[1] = c;
    imp.reshape(v, shape)
}

/// InstanceNormalization: each (n, c) plane standardized over its spatial axes, then
/// `scale[c] * y + B[c]`.
fn instance_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    if dims.len() < 3 {
        return Err(format!("InstanceNormalization takes [N, C, D1, ...], got rank {}", dims.len()));
    }
    let axes: Vec<i64> = (2..dims.len() as i64).collect();
    let y = standardize(imp, x, axes, Attrs(n).float("epsilon", 1e-5) as f64)?;
    let scale = per_channel(imp, imp.input(n, 1)?, dims[1], dims.len())?;
    let bias = per_channel(imp, imp.input(n, 2)?, dims[1], dims.len())?;
    let y = imp.binary(Op::Mul, y, scale)?;
    Ok(vec![imp.binary(Op::Add, y, bias)?])
}

/// GroupNormalization: the channels split into `num_groups` groups, each (n, group)
/// standardized over its channels and spatial positions (in `stash_type`, f32 by default, for
/// version 21), then scaled and shifted per channel (21) or per group (18).
fn group_norm(imp: &mut Importer, n: &NodeProto, per_channel_scale: bool) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let xt = imp.ty(x)?;
    let dims = imp.shape(x)?;
    let g = a.int("num_groups", 0);
    if dims.len() < 3 || g <= 0 || dims[1] % g != 0 {
        return Err(format!(
            "GroupNormalization: num_groups {g} must divide the channels of [N, C, D1, ...], got {dims:?}"
        ));
    }
    let stash = if per_channel_scale { stash_type(&a, "GroupNormalization-21")? } else { xt.dtype };
    let (nb, c) = (dims[0], dims[1]);
    let xs = imp.cast(x, stash)?;
    let grouped = imp.reshape(xs, vec![nb, g, -1])?;
    let y = standardize(imp, grouped, vec![2], a.float("epsilon", 1e-5) as f64)?;
    let y = imp.cast(y, xt.dtype)?;
    let (scale, bias) = (imp.input(n, 1)?, imp.input(n, 2)?);
    let y = if per_channel_scale {
        let y = imp.reshape(y, dims.clone())?;
        let (scale, bias) = (per_channel(imp, scale, c, dims.len())?, per_channel(imp, bias, c, dims.len())?);
        let y = imp.binary(Op::Mul, y, scale)?;
        imp.binary(Op::Add, y, bias)?
    } else {
        let (scale, bias) = (imp.reshape(scale, vec![1, g, 1])?, imp.reshape(bias, vec![1, g, 1])?);
        let y = imp.binary(Op::Mul, y, scale)?;
        let y = imp.binary(Op::Add, y, bias)?;
        imp.reshape(y, dims)?
    };
    Ok(vec![y])
}

/// MeanVarianceNormalization, as its function body: `(x - E[x]) / (sqrt(E[x²] - E[x]²) + 1e-9)`
/// over `axes` (default [0, 2, 3]).
fn mean_variance_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dtype = imp.ty(x)?.dtype;
    let axes = Attrs(n).ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    let mean = imp.reduce(Op::ReduceMean, x, axes.clone(), true)?;
    let mean_sq = imp.binary(Op::Mul, mean, mean)?;
    let sq = imp.binary(Op::Mul, x, x)?;
    let sq_mean = imp.reduce(Op::ReduceMean, sq, axes, true)?;
    let var = imp.binary(Op::Sub, sq_mean, mean_sq)?;
    let sd = imp.unary(Op::Sqrt, var)?;
    let eps = imp.scalar(dtype, 1e-9)?;
    let den = imp.binary(Op::Add, sd, eps)?;
    let d = imp.binary(Op::Sub, x, mean)?;
    Ok(vec![imp.binary(Op::Div, d, den)?])
}

/// LpNormalization: `x` divided by its L1 (`p = 1`) or L2 (`p = 2`, the default) norm along
/// `axis` (default -1); where the norm is 0, x (all zeros there) is left as it is.
fn lp_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let rank = imp.shape(x)?.len();
    let axis = norm_axis(a.int("axis", -1), rank)? as i64;
    let norm = match a.int("p", 2) {
        1 => {
            let ax = imp.unary(Op::Abs, x)?;
            imp.reduce(Op::ReduceSum, ax, vec![axis], true)?
        }
        2 => {
            let sq = imp.binary(Op::Mul, x, x)?;
            let s = imp.reduce(Op::ReduceSum, sq, vec![axis], true)?;
            imp.unary(Op::Sqrt, s)?
        }
        p => return Err(format!("LpNormalization: p must be 1 or 2, got {p}")),
    };
    // A zero norm (every element along the axis 0) leaves the zeros, as the reference does.
    let dtype = imp.ty(x)?.dtype;
    let (zero, one) = (imp.scalar(dtype, 0.0)?, imp.scalar(dtype, 1.0)?);
    let none = imp.binary(Op::Equal, norm, zero)?;
    let norm = imp.emit1(NodeSpec::new(Op::Select, vec![none, one, norm]))?;
    Ok(vec![imp.binary(Op::Div, x, norm)?])
}

/// The floating-point type the `stash_type` attribute names (f32 by default).
fn stash_type(a: &Attrs, op: &str) -> Result<DType> {
    let code = a.int("stash_type", 1);
    let stash = i32::try_from(code)
        .map_err(|_| format!("unknown data type {code}"))
        .and_then(dtype_of)
        .map_err(|e| format!("{op}: stash_type {code}: {e}"))?;
    if !stash.is_float() {
        return Err(format!("{op}: stash_type {code} ({stash}) is not a floating-point type"));
    }
    Ok(stash)
}

/// RMSNormalization 23, as its function body: over the axes from `axis` on,
/// `Normalized = X / sqrt(mean(X * X) + epsilon)` computed in `stash_type` (X cast to it and
/// the result cast back to X's type), then `Y = Normalized * scale`, where `scale` broadcasts
/// unidirectionally (numpy, aligned on the right) to X's shape. Y has scale's type: where it
/// differs from X's, the normalized values are cast to it before the product.
fn rms_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let (xt, st) = (imp.ty(x)?, imp.ty(scale)?);
    if !xt.dtype.is_float() || !st.dtype.is_float() {
        return Err(format!("RMSNormalization-23 takes floating-point X and scale, got {} and {}", xt.dtype, st.dtype));
    }
    if !broadcasts_to(&st.shape, &xt.shape) {
        return Err(format!(
            "RMSNormalization-23: scale of shape {} does not broadcast to X's shape {} (unidirectional broadcasting)",
            fmt_shape(&st.shape),
            fmt_shape(&xt.shape)
        ));
    }
    let rank = xt.shape.len();
    let axis = norm_axis(a.int("axis", -1), rank).map_err(|e| format!("RMSNormalization-23: {e}"))?;
    let stash = stash_type(&a, "RMSNormalization-23")?;
    let xu = imp.cast(x, stash)?;
    let sq = imp.binary(Op::Mul, xu, xu)?;
    let axes: Vec<i64> = (axis as i64..rank as i64).collect();
    let mean = imp.reduce(Op::ReduceMean, sq, axes, true)?;
    let eps = imp.scalar(stash, a.float("epsilon", 1e-5) as f64)?;
    let me = imp.binary(Op::Add, mean, eps)?;
    let rms = imp.unary(Op::Sqrt, me)?;
    let normalized = imp.binary(Op::Div, xu, rms)?;
    let normalized = imp.cast(normalized, xt.dtype)?;
    let normalized = imp.cast(normalized, st.dtype)?;
    Ok(vec![imp.binary(Op::Mul, normalized, scale)?])
}
