//! Losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, with the class axis at 1
//! (scores `[N, C, d1, ..., dk]`, labels `[N, d1, ..., dk]`), optional per-class `weights`,
//! `ignore_index` and `reduction`, and SoftmaxCrossEntropyLoss's optional `log_prob` output.
//!
//! Without weights, `ignore_index` or `log_prob`, SoftmaxCrossEntropyLoss is the IR's
//! `softmax_cross_entropy` on the scores with the class axis moved last. Everything else is
//! composed from ops graphc differentiates: the class axis transposed last, log-softmax as
//! `x - max - log(sum(exp(x - max)))`, the label's entry picked by a one-hot mask (`equal` of
//! the labels against `[0, C)`) and a sum over the class axis, the weights by `gather`, and
//! ignored labels masked with `select` (replaced by 0 before any indexing). A mean with weights
//! or `ignore_index` divides by the sum of the weights applied, as the ONNX spec says.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

/// Versions 13 (and NegativeLogLikelihoodLoss 22) only add element types graphc has no dtype
/// for (bfloat16); their semantics are version 12's.
pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("SoftmaxCrossEntropyLoss", |imp, n| loss(imp, n, true)),
    OpEntry::new("NegativeLogLikelihoodLoss", |imp, n| loss(imp, n, false)),
    OpEntry::since("SoftmaxCrossEntropyLoss", 12, |imp, n| loss(imp, n, true)),
    OpEntry::since("NegativeLogLikelihoodLoss", 12, |imp, n| loss(imp, n, false)),
];

/// Both losses: with `softmax` the scores are logits (SoftmaxCrossEntropyLoss), without they
/// are log-probabilities already (NegativeLogLikelihoodLoss).
fn loss(imp: &mut Importer, n: &NodeProto, softmax: bool) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let labels = imp.input(n, 1)?;
    let weights = imp.opt_input(n, 2)?;
    let reduction = a.string("reduction", "mean");
    if !["none", "sum", "mean"].contains(&reduction.as_str()) {
        return Err(format!("reduction \"{reduction}\" is not one of \"none\", \"sum\", \"mean\""));
    }
    let ignore_index = a.get("ignore_index").and_then(|v| v.i);
    let want_log_prob = softmax && n.output.get(1).is_some_and(|o| !o.is_empty());

    let (xt, lt) = (imp.ty(x)?, imp.ty(labels)?);
    let dims = imp.shape(x)?;
    let rank = dims.len();
    if !xt.dtype.is_float() {
        return Err(format!("the scores must be floats (f32, f64), got {xt}"));
    }
    if rank < 2 {
        return Err(format!("the scores must be [N, C, d1, ..., dk], got {xt}"));
    }
    if !lt.dtype.is_int() {
        return Err(format!("the labels must be integers (i32, i64), got {lt}"));
    }
    let c = dims[1];
    let batch: Vec<i64> = dims.iter().enumerate().filter(|&(i, _)| i != 1).map(|(_, &d)| d).collect();
    if imp.shape(labels)? != batch {
        return Err(format!("the labels are {lt}, but scores {xt} need labels of shape {batch:?}"));
    }
    if let Some(w) = weights {
        let wt = imp.ty(w)?;
        if wt.dtype != xt.dtype || imp.shape(w)? != [c] {
            return Err(format!("the weights are {wt}, but scores {xt} need weights {}[{c}]", xt.dtype.name()));
        }
    }
    // A label can equal the ignored index only if the index fits the labels' dtype.
    let ignore_index = ignore_index.filter(|&ii| lt.dtype == DType::I64 || i32::try_from(ii).is_ok());

    // The class axis last: [N, d1, ..., dk, C].
    let last_perm: Vec<i64> = std::iter::once(0).chain(2..rank as i64).chain(std::iter::once(1)).collect();
    let x_last = if rank > 2 {
        imp.emit1(NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(last_perm)))?
    } else {
        x
    };

    if softmax && weights.is_none() && ignore_index.is_none() && !want_log_prob {
        let l = imp.emit1(
            NodeSpec::new(Op::SoftmaxCrossEntropy, vec![x_last, labels]).attr("reduction", Attr::Str(reduction)),
        )?;
        return Ok(vec![l]);
    }

    let log_p = if softmax { log_softmax_last(imp, x_last)? } else { x_last };
    let log_prob = if want_log_prob {
        // Back to the scores' layout: [N, C, d1, ..., dk].
        Some(if rank > 2 {
            let back: Vec<i64> =
                std::iter::once(0).chain(std::iter::once(rank as i64 - 1)).chain(1..rank as i64 - 1).collect();
            imp.emit1(NodeSpec::new(Op::Transpose, vec![log_p]).attr("perm", Attr::Ints(back)))?
        } else {
            log_p
        })
    } else {
        None
    };

    // Ignored labels become class 0 before they index anything.
    let ignored = match ignore_index {
        Some(ii) => {
            let iiv = imp.constant(int_tensor(lt.dtype, vec![ii], &[]))?;
            Some(imp.binary(Op::Equal, labels, iiv)?)
        }
        None => None,
    };
    let safe = match ignored {
        Some(m) => {
            let zero = imp.constant(int_tensor(lt.dtype, vec![0], &[]))?;
            imp.emit1(NodeSpec::new(Op::Select, vec![m, zero, labels]))?
        }
        None => labels,
    };

    // -log_p[..., label]: a one-hot mask over the class axis picks it (select, so a -inf
    // log-probability of another class does not make 0 * -inf = NaN).
    let mut col = batch.clone();
    col.push(1);
    let safe_col = imp.reshape(safe, col)?;
    let classes = imp.constant(int_tensor(lt.dtype, (0..c).collect(), &[c as usize]))?;
    let hit = imp.binary(Op::Equal, safe_col, classes)?;
    let zero = imp.scalar(xt.dtype, 0.0)?;
    let picked = imp.emit1(NodeSpec::new(Op::Select, vec![hit, log_p, zero]))?;
    let picked = imp.reduce(Op::ReduceSum, picked, vec![-1], false)?;
    let mut per_example = imp.unary(Op::Neg, picked)?;

    // Each example's weight: weights[label], and 0 where the label is ignored (or 1 where it
    // is not, without weights); None when every example counts 1.
    let gathered = match weights {
        Some(w) => {
            let g = imp.emit1(NodeSpec::new(Op::Gather, vec![w, safe]).attr("axis", Attr::Int(0)))?;
            per_example = imp.binary(Op::Mul, per_example, g)?;
            Some(g)
        }
        None => None,
    };
    if let Some(m) = ignored {
        per_example = imp.emit1(NodeSpec::new(Op::Select, vec![m, zero, per_example]))?;
    }
    // What a mean divides by, where it is not the number of examples.
    let applied = match (reduction.as_str(), ignored, gathered) {
        ("mean", Some(m), g) => {
            let kept = match g {
                Some(g) => g,
                None => imp.scalar(xt.dtype, 1.0)?,
            };
            Some(imp.emit1(NodeSpec::new(Op::Select, vec![m, zero, kept]))?)
        }
        (_, _, g) => g,
    };

    let all: Vec<i64> = (0..batch.len() as i64).collect();
    let l = match (reduction.as_str(), applied) {
        ("none", _) => per_example,
        ("sum", _) => imp.reduce(Op::ReduceSum, per_example, all, false)?,
        (_, None) => imp.reduce(Op::ReduceMean, per_example, all, false)?,
        (_, Some(w)) => {
            let total = imp.reduce(Op::ReduceSum, per_example, all.clone(), false)?;
            let weight = imp.reduce(Op::ReduceSum, w, all, false)?;
            imp.binary(Op::Div, total, weight)?
        }
    };
    Ok(std::iter::once(l).chain(log_prob).collect())
}

/// `x - max - log(sum(exp(x - max)))` over the last axis.
fn log_softmax_last(imp: &mut Importer, x: Value) -> Result<Value> {
    let m = imp.reduce(Op::ReduceMax, x, vec![-1], true)?;
    let d = imp.binary(Op::Sub, x, m)?;
    let e = imp.unary(Op::Exp, d)?;
    let s = imp.reduce(Op::ReduceSum, e, vec![-1], true)?;
    let l = imp.unary(Op::Log, s)?;
    imp.binary(Op::Sub, d, l)
}

/// An integer tensor of the labels' dtype.
fn int_tensor(dtype: DType, values: Vec<i64>, shape: &[usize]) -> Tensor {
    let shape = ndarray::IxDyn(shape);
    match dtype {
        DType::I32 => Tensor::I32(
            ndarray::ArrayD::from_shape_vec(shape, values.into_iter().map(|v| v as i32).collect())
                .expect("the shape holds the values"),
        ),
        _ => Tensor::I64(ndarray::ArrayD::from_shape_vec(shape, values).expect("the shape holds the values")),
    }
}
