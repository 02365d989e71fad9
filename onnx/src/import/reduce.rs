//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin and ReduceProd (axes from input 1
//! or the attribute; over bool, max and min are any and all), and the composites ReduceL1,
//! ReduceL2, ReduceLogSum, ReduceLogSumExp and ReduceSumSquare (elementwise ops around a sum);
//! CumProd as one product per position of prefixes (or suffixes) of the axis.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("ReduceSum", |imp, n| reduction(imp, n, Op::ReduceSum)),
    OpEntry::new("ReduceMean", |imp, n| reduction(imp, n, Op::ReduceMean)),
    OpEntry::new("ReduceMax", |imp, n| reduction(imp, n, Op::ReduceMax)),
    OpEntry::new("ReduceMin", |imp, n| reduction(imp, n, Op::ReduceMin)),
    OpEntry::new("ReduceProd", |imp, n| reduction(imp, n, Op::ReduceProd)),
    // Before 13 (ReduceSum) or 18 (the others) the axes are the `axes` attribute, which the
    // converter reads when there is no axes input (11 allows negative axes).
    OpEntry::since("ReduceSum", 1, |imp, n| reduction(imp, n, Op::ReduceSum)),
    OpEntry::since("ReduceMean", 1, |imp, n| reduction(imp, n, Op::ReduceMean)),
    OpEntry::since("ReduceMax", 1, |imp, n| reduction(imp, n, Op::ReduceMax)),
    OpEntry::since("ReduceMin", 1, |imp, n| reduction(imp, n, Op::ReduceMin)),
    OpEntry::since("ReduceProd", 1, |imp, n| reduction(imp, n, Op::ReduceProd)),
    // The composites: from 18 the axes are input 1 and `noop_with_empty_axes` exists; versions
    // 1, 11 (negative axes) and 13 (bfloat16) take the `axes` attribute.
    OpEntry::since("ReduceL1", 18, |imp, n| composite(imp, n, Composite::L1, 18)),
    OpEntry::since("ReduceL2", 18, |imp, n| composite(imp, n, Composite::L2, 18)),
    OpEntry::since("ReduceLogSum", 18, |imp, n| composite(imp, n, Composite::LogSum, 18)),
    OpEntry::since("ReduceLogSumExp", 18, |imp, n| composite(imp, n, Composite::LogSumExp, 18)),
    OpEntry::since("ReduceSumSquare", 18, |imp, n| composite(imp, n, Composite::SumSquare, 18)),
    OpEntry::since("ReduceL1", 1, |imp, n| composite(imp, n, Composite::L1, 1)),
    OpEntry::since("ReduceL2", 1, |imp, n| composite(imp, n, Composite::L2, 1)),
    OpEntry::since("ReduceLogSum", 1, |imp, n| composite(imp, n, Composite::LogSum, 1)),
    OpEntry::since("ReduceLogSumExp", 1, |imp, n| composite(imp, n, Composite::LogSumExp, 1)),
    OpEntry::since("ReduceSumSquare", 1, |imp, n| composite(imp, n, Composite::SumSquare, 1)),
    OpEntry::since("CumProd", 26, cumprod),
];

/// The longest axis CumProd is composed along: one slice and product per position.
const CUMPROD_MAX: i64 = 1024;

/// CumProd: output position k along `axis` is the product of the inputs at [0, k] (with
/// `exclusive`, [0, k); with `reverse`, [k, len) or (k, len)), each a slice and a `reduce_prod`
/// (an empty slice gives 1), joined by a concat. The axis (input 1) is known at import time.
fn cumprod(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let shape = imp.shape(x)?;
    let rank = shape.len() as i64;
    let axis = match imp.const_ints(n, 1, "axis")?.as_deref() {
        Some(&[axis]) => axis,
        Some(other) => return Err(format!("CumProd: axis must be a scalar, got {} values", other.len())),
        None => return Err("CumProd: the axis (input 1) must be known at import time".into()),
    };
    if axis < -rank || axis >= rank {
        return Err(format!("CumProd: axis {axis} is out of range for rank {rank}"));
    }
    let axis = if axis < 0 { axis + rank } else { axis };
    let (exclusive, reverse) = (a.int("exclusive", 0) != 0, a.int("reverse", 0) != 0);
    let len = shape[axis as usize];
    if len == 0 {
        return Ok(vec![imp.unary(Op::Identity, x)?]);
    }
    if len > CUMPROD_MAX {
        return Err(format!("CumProd along an axis of {len} elements (graphc composes it for at most {CUMPROD_MAX})"));
    }
    let mut parts = Vec::with_capacity(len as usize);
    for k in 0..len {
        let (start, end) = match (reverse, exclusive) {
            (false, false) => (0, k + 1),
            (false, true) => (0, k),
            (true, false) => (k, len),
            (true, true) => (k + 1, len),
        };
        let mut starts = vec![0; shape.len()];
        let mut ends = shape.clone();
        starts[axis as usize] = start;
        ends[axis as usize] = end;
        let spec = NodeSpec::new(Op::Slice, vec![x]).attr("starts", Attr::Ints(starts)).attr("ends", Attr::Ints(ends));
        let piece = imp.emit1(spec)?;
        parts.push(imp.reduce(Op::ReduceProd, piece, vec![axis], true)?);
    }
    Ok(vec![imp.emit1(NodeSpec::new(Op::Concat, parts).attr("axis", Attr::Int(axis)))?])
}

/// No axes reduce over all of them, unless `noop_with_empty_axes` makes the node a copy.
fn reduction(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let rank = imp.shape(x)?.len() as i64;
    let axes = match imp.const_ints(n, 1, "axes")? {
        Some(v) => v,
        None => a.ints("axes").unwrap_or_default(),
    };
    let axes = if axes.is_empty() {
        if a.int("noop_with_empty_axes", 0) != 0 {
            return Ok(vec![imp.unary(Op::Identity, x)?]);
        }
        (0..rank).collect()
    } else {
        axes
    };
    let keep = a.int("keepdims", 1) != 0;
    if imp.ty(x)?.dtype == DType::Bool && matches!(op, Op::ReduceMax | Op::ReduceMin) {
        // Any / all: reduce as 0/1 integers.
        let i = imp.emit1(NodeSpec::new(Op::Cast, vec![x]).attr("to", Attr::DType(DType::I32)))?;
        let r = imp.reduce(op, i, axes, keep)?;
        return Ok(vec![imp.emit1(NodeSpec::new(Op::Cast, vec![r]).attr("to", Attr::DType(DType::Bool)))?]);
    }
    Ok(vec![imp.reduce(op, x, axes, keep)?])
}

/// The reductions composed of a sum and elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Composite {
    /// `sum(|x|)`
    L1,
    /// `sqrt(sum(x * x))`
    L2,
    /// `log(sum(x))`
    LogSum,
    /// `log(sum(exp(x)))`, computed as `m + log(sum(exp(x - m)))` with `m` the slice's maximum.
    LogSumExp,
    /// `sum(x * x)`
    SumSquare,
}

impl Composite {
    fn name(self) -> &'static str {
        match self {
            Composite::L1 => "ReduceL1",
            Composite::L2 => "ReduceL2",
            Composite::LogSum => "ReduceLogSum",
            Composite::LogSumExp => "ReduceLogSumExp",
            Composite::SumSquare => "ReduceSumSquare",
        }
    }
}

/// The axes a composite reduction of this version reduces: from 18 input 1, before it the
/// `axes` attribute (each version errs on the other's form). No axes reduce over all of them,
/// except that from 18 `noop_with_empty_axes` makes them reduce over none: the elementwise ops
/// still apply (`ReduceSumSquare` squares), as the operators' function bodies and ONNX's
/// reference do.
fn composite_axes(imp: &Importer, n: &NodeProto, what: &str, version: i64, rank: i64) -> Result<Vec<i64>> {
    let a = Attrs(n);
    let axes = if version >= 18 {
        if a.get("axes").is_some() {
            return Err(format!(
                "{what}-{version} takes its axes as input 1; the axes attribute belongs to versions before 18"
            ));
        }
        imp.const_ints(n, 1, "axes").map_err(|e| format!("{what}-{version}: {e}"))?.unwrap_or_default()
    } else {
        if imp.opt_input(n, 1)?.is_some() {
            return Err(format!(
                "{what} before version 18 takes its axes as the axes attribute; an axes input (input 1) is from version 18"
            ));
        }
        a.ints("axes").unwrap_or_default()
    };
    if !axes.is_empty() {
        return Ok(axes);
    }
    if version >= 18 && a.int("noop_with_empty_axes", 0) != 0 {
        return Ok(vec![]);
    }
    Ok((0..rank).collect())
}

/// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp and ReduceSumSquare as a sum with
/// elementwise ops around it. L1 and SumSquare keep integer inputs' type; L2, LogSum and
/// LogSumExp over integers are computed in f64 and cast back (truncating), as ONNX's reference
/// does. Over an empty slice L1, L2 and SumSquare give 0, LogSum and LogSumExp -inf.
fn composite(imp: &mut Importer, n: &NodeProto, op: Composite, version: i64) -> Result<Vec<Value>> {
    let what = op.name();
    let x = imp.input(n, 0)?;
    let xt = imp.ty(x)?;
    if xt.dtype == DType::Bool {
        let which = if version >= 18 { format!("{what}-{version}") } else { format!("{what} before version 18") };
        return Err(format!("{which} takes numbers, not bool"));
    }
    let rank = xt.shape.len() as i64;
    let axes = composite_axes(imp, n, what, version, rank)?;
    let keep = Attrs(n).int("keepdims", 1) != 0;
    let float_only = matches!(op, Composite::L2 | Composite::LogSum | Composite::LogSumExp);
    let v = if float_only && !xt.dtype.is_float() { imp.cast(x, DType::F64)? } else { x };
    let r = match op {
        Composite::L1 => {
            let abs = imp.unary(Op::Abs, v)?;
            imp.reduce(Op::ReduceSum, abs, axes, keep)?
        }
        Composite::SumSquare | Composite::L2 => {
            let sq = imp.binary(Op::Mul, v, v)?;
            let s = imp.reduce(Op::ReduceSum, sq, axes, keep)?;
            if op == Composite::L2 {
                imp.unary(Op::Sqrt, s)?
            } else {
                s
            }
        }
        Composite::LogSum => {
            let s = imp.reduce(Op::ReduceSum, v, axes, keep)?;
            imp.unary(Op::Log, s)?
        }
        Composite::LogSumExp => log_sum_exp(imp, v, axes, keep)?,
    };
    let r = imp.cast(r, xt.dtype)?;
    Ok(vec![r])
}

/// `m + log(sum(exp(x - m)))` with `m` each slice's maximum where it is finite and 0 where it
/// is not: a slice of -inf (or an empty one) gives -inf rather than NaN from `-inf - -inf`, one
/// holding +inf gives +inf, one holding NaN gives NaN.
fn log_sum_exp(imp: &mut Importer, x: Value, axes: Vec<i64>, keep: bool) -> Result<Value> {
    let dt = imp.ty(x)?.dtype;
    let m = imp.reduce(Op::ReduceMax, x, axes.clone(), true)?;
    let abs = imp.unary(Op::Abs, m)?;
    let inf = imp.scalar(dt, f64::INFINITY)?;
    let finite = imp.binary(Op::Less, abs, inf)?;
    let zero = imp.scalar(dt, 0.0)?;
    let m = imp.emit1(NodeSpec::new(Op::Select, vec![finite, m, zero]))?;
    let d = imp.binary(Op::Sub, x, m)?;
    let e = imp.unary(Op::Exp, d)?;
    let s = imp.reduce(Op::ReduceSum, e, axes, keep)?;
    let l = imp.unary(Op::Log, s)?;
    let m = if keep {
        m
    } else {
        let shape = imp.shape(l)?;
        imp.reshape(m, shape)?
    };
    imp.binary(Op::Add, l, m)
}
