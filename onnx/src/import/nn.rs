//! Neural-network layers: MatMul (numpy semantics), Gemm, Softmax, and the composites that
//! expand to several IR ops: LogSoftmax, LayerNormalization and BatchNormalization (inference
//! and training mode).

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("MatMul", matmul),
    OpEntry::new("Gemm", gemm),
    OpEntry::new("Softmax", softmax),
    OpEntry::new("LogSoftmax", log_softmax),
    OpEntry::new("LayerNormalization", layer_norm),
    OpEntry::new("BatchNormalization", batch_norm),
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

/// Inference: normalize with the given mean and variance. Training mode: normalize with the
/// batch's own (population) statistics over every axis but 1, and also return the running
/// statistics updated with `momentum`.
fn batch_norm(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let rank = imp.shape(x)?.len();
    let dt = imp.ty(x)?.dtype;
    // Per-channel parameters broadcast over dim 1: [C] -> [C, 1, ..., 1].
    let per_channel = |imp: &mut Importer, i: usize| -> Result<Value> {
        let v = imp.input(n, i)?;
        let c = imp.shape(v)?;
        let mut shape = c.clone();
        shape.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
        imp.reshape(v, shape)
    };
    let (scale, bias, mean, var) =
        (per_channel(imp, 1)?, per_channel(imp, 2)?, per_channel(imp, 3)?, per_channel(imp, 4)?);
    let eps = imp.scalar(dt, a.float("epsilon", 1e-5) as f64)?;
    let training = a.int("training_mode", 0) != 0;
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
