//! Neural-network layers: MatMul (numpy semantics), Gemm, Softmax, and the composites that
//! expand to several IR ops: LogSoftmax, LayerNormalization and BatchNormalization (inference
//! and training mode).

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("MatMul", matmul),
    OpEntry::new("Gemm", gemm),
    OpEntry::new("Softmax", softmax),
    OpEntry::new("LogSoftmax", log_softmax),
    OpEntry::new("LayerNormalization", layer_norm),
    OpEntry::new("BatchNormalization", batch_norm),
    OpEntry::since("LRN", 1, lrn),
    OpEntry::since("Dropout", 12, dropout_v12),
    // Older versions.
    OpEntry::since("MatMul", 1, matmul),
    // Gemm 7 broadcasts C as later versions do (11 makes C optional: a superset); Gemm 6
    // broadcasts it only with `broadcast = 1`.
    OpEntry::since("Gemm", 7, gemm),
    OpEntry::since("Gemm", 6, gemm_v6),
    // Softmax and LogSoftmax before 13 work on the input coerced to a matrix at `axis`.
    OpEntry::since("Softmax", 1, |imp, n| softmax_2d(imp, n, false)),
    OpEntry::since("LogSoftmax", 1, |imp, n| softmax_2d(imp, n, true)),
    OpEntry::since("BatchNormalization", 9, |imp, n| batch_norm_legacy(imp, n, 9)),
    OpEntry::since("BatchNormalization", 7, |imp, n| batch_norm_legacy(imp, n, 7)),
    OpEntry::since("BatchNormalization", 6, |imp, n| batch_norm_legacy(imp, n, 6)),
    OpEntry::since("Dropout", 10, |imp, n| dropout_legacy(imp, n, 10)),
    OpEntry::since("Dropout", 7, |imp, n| dropout_legacy(imp, n, 7)),
    OpEntry::since("Dropout", 6, |imp, n| dropout_legacy(imp, n, 6)),
];

/// numpy matmul: 1-D operands are promoted to matrices and the added dim removed after.
fn matmul(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, y) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let (xs, ys) = (imp.shape(x)?, imp.shape(y)?);
    let x2 = if xs.len() == 1 { imp.reshape(x, vec![1, xs[0]])? } else { x };
    let y2 = if ys.len() == 1 { imp.reshape(y, vec![ys[0], 1])? } else { y };
    let m = imp.binary(Op::MatMul, x2, y2)?;
    if xs.len() > 1 && ys.len() > 1 {
        return Ok(vec![m]);
    }
    // Drop the dims the promotion added: M for a 1-D lhs, N for a 1-D rhs.
    let full = imp.shape(m)?;
    let r = full.len();
    let drop = |i: usize| (xs.len() == 1 && i == r - 2) || (ys.len() == 1 && i == r - 1);
    let out = full.iter().enumerate().filter(|&(i, _)| !drop(i)).map(|(_, &d)| d).collect();
    Ok(vec![imp.reshape(m, out)?])
}

/// alpha * op(A) op(B) + beta * C, the transposes, scalings and C only where needed.
fn gemm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let (mut x, mut y) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let t = |imp: &mut Importer, v: Value| {
        imp.emit1(NodeSpec::new(Op::Transpose, vec![v]).attr("perm", Attr::Ints(vec![1, 0])))
    };
    if a.int("transA", 0) != 0 {
        x = t(imp, x)?;
    }
    if a.int("transB", 0) != 0 {
        y = t(imp, y)?;
    }
    let dt = imp.ty(x)?.dtype;
    let mut out = imp.binary(Op::MatMul, x, y)?;
    let alpha = a.float("alpha", 1.0);
    if alpha != 1.0 {
        let s = imp.scalar(dt, alpha as f64)?;
        out = imp.binary(Op::Mul, out, s)?;
    }
    if let Some(mut c) = imp.opt_input(n, 2)? {
        let beta = a.float("beta", 1.0);
        if beta != 1.0 {
            let s = imp.scalar(dt, beta as f64)?;
            c = imp.binary(Op::Mul, c, s)?;
        }
        out = imp.binary(Op::Add, out, c)?;
    }
    Ok(vec![out])
}

/// Gemm 6: C broadcasts only with `broadcast = 1`; without it, C must be [M, N].
fn gemm_v6(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    if a.int("broadcast", 0) == 0 {
        if let Some(c) = imp.opt_input(n, 2)? {
            let (xs, ys) = (imp.shape(imp.input(n, 0)?)?, imp.shape(imp.input(n, 1)?)?);
            if xs.len() != 2 || ys.len() != 2 {
                return Err("A and B must be matrices".into());
            }
            let m = if a.int("transA", 0) != 0 { xs[1] } else { xs[0] };
            let nn = if a.int("transB", 0) != 0 { ys[0] } else { ys[1] };
            let cs = imp.shape(c)?;
            if cs != [m, nn] {
                return Err(format!("without broadcast = 1 this version needs C of shape [{m}, {nn}], got {cs:?}"));
            }
        }
    }
    gemm(imp, n)
}

/// Softmax and LogSoftmax before 13: over the input coerced to a matrix, the dims before
/// `axis` (default 1) as rows and the rest as columns, and the result back to the input's shape.
fn softmax_2d(imp: &mut Importer, n: &NodeProto, log: bool) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let axis = norm_axis(Attrs(n).int("axis", 1), dims.len().max(1))?;
    let rows: i64 = dims[..axis.min(dims.len())].iter().product();
    let cols: i64 = dims[axis.min(dims.len())..].iter().product();
    let m = imp.reshape(x, vec![rows, cols])?;
    let y = if log {
        let mx = imp.reduce(Op::ReduceMax, m, vec![1], true)?;
        let d = imp.binary(Op::Sub, m, mx)?;
        let e = imp.unary(Op::Exp, d)?;
        let s = imp.reduce(Op::ReduceSum, e, vec![1], true)?;
        let l = imp.unary(Op::Log, s)?;
        imp.binary(Op::Sub, d, l)?
    } else {
        imp.emit1(NodeSpec::new(Op::Softmax, vec![m]).attr("axis", Attr::Int(1)))?
    };
    Ok(vec![imp.reshape(y, dims)?])
}

/// Local response normalization across channels:
/// `y = x / (bias + alpha / size * sum of x^2 over the size channels around c)^beta`, the window
/// from `c - floor((size - 1) / 2)` to `c + ceil((size - 1) / 2)`. The windowed sum is an
/// average pool (padding counted) over the channel axis of `x^2` viewed as `[N, 1, C, rest]`.
fn lrn(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    if dims.len() < 2 {
        return Err(format!("the input must be [N, C, ...], got rank {}", dims.len()));
    }
    let size = a.get("size").and_then(|v| v.i).ok_or("the size attribute is required")?;
    if size < 1 {
        return Err(format!("size must be positive, got {size}"));
    }
    let (alpha, beta, bias) =
        (a.float("alpha", 1e-4) as f64, a.float("beta", 0.75) as f64, a.float("bias", 1.0) as f64);
    let dt = imp.ty(x)?.dtype;
    let rest: i64 = dims[2..].iter().product();
    let sq = imp.binary(Op::Mul, x, x)?;
    let sq = imp.reshape(sq, vec![dims[0], 1, dims[1], rest])?;
    let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let avg = imp.emit1(
        NodeSpec::new(Op::AvgPool, vec![sq])
            .attr("kernel", Attr::Ints(vec![size, 1]))
            .attr("strides", Attr::Ints(vec![1, 1]))
            .attr("pads", Attr::Ints(vec![before, 0, after, 0]))
            .attr("count_include_pad", Attr::Bool(true)),
    )?;
    let avg = imp.reshape(avg, dims)?;
    // alpha / size * sum = alpha * mean over the (padded) window.
    let av = imp.scalar(dt, alpha)?;
    let scaled = imp.binary(Op::Mul, avg, av)?;
    let bv = imp.scalar(dt, bias)?;
    let base = imp.binary(Op::Add, scaled, bv)?;
    let betav = imp.scalar(dt, beta)?;
    let den = imp.binary(Op::Pow, base, betav)?;
    Ok(vec![imp.binary(Op::Div, x, den)?])
}

/// Dropout at inference: a copy of the input, and the mask (where asked for) all kept.
fn dropout_identity(imp: &mut Importer, n: &NodeProto, mask_dtype: DType) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let y = imp.unary(Op::Identity, x)?;
    if n.output.get(1).is_none_or(|o| o.is_empty()) {
        return Ok(vec![y]);
    }
    let dims = imp.shape(x)?;
    let one = imp.scalar(mask_dtype, 1.0)?;
    let mask = imp.emit1(NodeSpec::new(Op::Broadcast, vec![one]).attr("shape", Attr::Ints(dims)))?;
    Ok(vec![y, mask])
}

/// Dropout 12: `ratio` and `training_mode` are inputs; training with a nonzero ratio drops at
/// random, which graphc does not do.
fn dropout_v12(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let ratio = imp.const_input(n, 1, "ratio")?.map(|t| t.to_f64_vec()).unwrap_or_else(|| vec![0.5]);
    let training = imp.const_input(n, 2, "training_mode")?.is_some_and(|t| t.to_f64_vec().iter().any(|&v| v != 0.0));
    if training && ratio.iter().any(|&r| r != 0.0) {
        return Err("Dropout in training mode with a nonzero ratio (random) is not supported".into());
    }
    dropout_identity(imp, n, DType::Bool)
}

/// Dropout 6 to 11: inference is a copy. Version 6 runs in training mode (random) unless
/// `is_test = 1`; the mask has the input's type until 10 makes it bool.
fn dropout_legacy(imp: &mut Importer, n: &NodeProto, version: i64) -> Result<Vec<Value>> {
    let a = Attrs(n);
    if version == 6 && a.int("is_test", 0) == 0 && a.float("ratio", 0.5) != 0.0 {
        return Err("Dropout-6 with is_test = 0 is in training mode (drops at random), which is not supported".into());
    }
    let dt = if version >= 10 { DType::Bool } else { imp.ty(imp.input(n, 0)?)?.dtype };
    dropout_identity(imp, n, dt)
}

fn softmax(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let axis = Attrs(n).int("axis", -1);
    Ok(vec![imp.emit1(NodeSpec::new(Op::Softmax, vec![x]).attr("axis", Attr::Int(axis)))?])
}

/// (x - max) - log(sum(exp(x - max))) along the axis.
fn log_softmax(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let axis = Attrs(n).int("axis", -1);
    let m = imp.reduce(Op::ReduceMax, x, vec![axis], true)?;
    let d = imp.binary(Op::Sub, x, m)?;
    let e = imp.unary(Op::Exp, d)?;
    let s = imp.reduce(Op::ReduceSum, e, vec![axis], true)?;
    let l = imp.unary(Op::Log, s)?;
    Ok(vec![imp.binary(Op::Sub, d, l)?])
}

/// Normalizes over the axes from `axis` on; the outputs are Y, the mean and 1/stddev.
fn layer_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let scale = imp.input(n, 1)?;
    let bias = imp.opt_input(n, 2)?;
    let rank = imp.shape(x)?.len();
    let axis = norm_axis(a.int("axis", -1), rank)?;
    let axes: Vec<i64> = (axis as i64..rank as i64).collect();
    let dt = imp.ty(x)?.dtype;
    let eps = imp.scalar(dt, a.float("epsilon", 1e-5) as f64)?;
    let mean = imp.reduce(Op::ReduceMean, x, axes.clone(), true)?;
    let d = imp.binary(Op::Sub, x, mean)?;
    let sq = imp.binary(Op::Mul, d, d)?;
    let var = imp.reduce(Op::ReduceMean, sq, axes, true)?;
    let ve = imp.binary(Op::Add, var, eps)?;
    let std = imp.unary(Op::Sqrt, ve)?;
    let one = imp.scalar(dt, 1.0)?;
    let inv = imp.binary(Op::Div, one, std)?;
    let norm = imp.binary(Op::Mul, d, inv)?;
    let mut y = imp.binary(Op::Mul, norm, scale)?;
    if let Some(b) = bias {
        y = imp.binary(Op::Add, y, b)?;
    }
    Ok(vec![y, mean, inv])
}

/// BatchNormalization 6 to 13: inference only (training mode, where more outputs than Y are
/// asked for or, in version 6, `is_test = 0`, has other outputs than version 14's and is
/// refused). Versions 6 and 7 have `spatial`: 0 makes the parameters per activation,
/// `[C, D1, ...]`, rather than per channel.
fn batch_norm_legacy(imp: &mut Importer, n: &NodeProto, version: i64) -> Result<Vec<Value>> {
    let a = Attrs(n);
    if version == 6 && a.int("is_test", 0) == 0 {
        return Err("BatchNormalization-6 with is_test = 0 (training mode) is not supported".into());
    }
    if n.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(format!(
            "BatchNormalization-{version} in training mode (outputs beyond Y) is not supported; graphc imports \
             training mode from version 14"
        ));
    }
    let spatial = version >= 9 || a.int("spatial", 1) != 0;
    batch_norm_with(imp, n, false, spatial)
}

/// Inference: normalize with the given mean and variance. Training mode: normalize with the
/// batch's own (population) statistics over every axis but 1, and also return the running
/// statistics updated with `momentum`.
fn batch_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    batch_norm_with(imp, n, Attrs(n).int("training_mode", 0) != 0, true)
}

fn batch_norm_with(imp: &mut Importer, n: &NodeProto, training: bool, spatial: bool) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let rank = imp.shape(x)?.len();
    let dt = imp.ty(x)?.dtype;
    // Per-channel parameters broadcast over dim 1: [C] -> [C, 1, ..., 1]. Per-activation ones
    // ([C, D1, ...], not spatial) already line up with the input's dims after N.
    let per_channel = |imp: &mut Importer, i: usize| -> Result<Value> {
        let v = imp.input(n, i)?;
        if !spatial {
            return Ok(v);
        }
        let c = imp.shape(v)?;
        let mut shape = c.clone();
        shape.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
        imp.reshape(v, shape)
    };
    let (scale, bias, mean, var) =
        (per_channel(imp, 1)?, per_channel(imp, 2)?, per_channel(imp, 3)?, per_channel(imp, 4)?);
    let eps = imp.scalar(dt, a.float("epsilon", 1e-5) as f64)?;
    let (use_mean, use_var) = if training {
        let axes: Vec<i64> = std::iter::once(0).chain(2..rank as i64).collect();
        let bm = imp.reduce(Op::ReduceMean, x, axes.clone(), true)?;
        let d = imp.binary(Op::Sub, x, bm)?;
        let sq = imp.binary(Op::Mul, d, d)?;
        let bv = imp.reduce(Op::ReduceMean, sq, axes, true)?;
        // Back to [C, 1, ...] to line up with the per-channel parameters.
        let shape = imp.shape(mean)?;
        (imp.reshape(bm, shape.clone())?, imp.reshape(bv, shape)?)
    } else {
        (mean, var)
    };
    let ve = imp.binary(Op::Add, use_var, eps)?;
    let std = imp.unary(Op::Sqrt, ve)?;
    let d = imp.binary(Op::Sub, x, use_mean)?;
    let norm = imp.binary(Op::Div, d, std)?;
    let scaled = imp.binary(Op::Mul, norm, scale)?;
    let y = imp.binary(Op::Add, scaled, bias)?;
    if !training {
        if n.output.iter().skip(1).any(|o| !o.is_empty()) {
            return Err("running statistics are outputs only in training mode".into());
        }
        return Ok(vec![y]);
    }
    let momentum = a.float("momentum", 0.9) as f64;
    let mom = imp.scalar(dt, momentum)?;
    let rest = imp.scalar(dt, 1.0 - momentum)?;
    let mut running = vec![y];
    for (old, new) in [(mean, use_mean), (var, use_var)] {
        let kept = imp.binary(Op::Mul, old, mom)?;
        let fresh = imp.binary(Op::Mul, new, rest)?;
        let r = imp.binary(Op::Add, kept, fresh)?;
        let c = imp.shape(imp.input(n, 3)?)?;
        running.push(imp.reshape(r, c)?);
    }
    Ok(running)
}
