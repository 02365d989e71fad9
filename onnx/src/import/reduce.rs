//! Reductions: ReduceSum, ReduceMean, ReduceMax and ReduceMin (axes from input 1 or the
//! attribute; over bool, max and min are any and all).

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
    // Before 13 (ReduceSum) or 18 (the others) the axes are the `axes` attribute, which the
    // converter reads when there is no axes input (11 allows negative axes).
    OpEntry::since("ReduceSum", 1, |imp, n| reduction(imp, n, Op::ReduceSum)),
    OpEntry::since("ReduceMean", 1, |imp, n| reduction(imp, n, Op::ReduceMean)),
    OpEntry::since("ReduceMax", 1, |imp, n| reduction(imp, n, Op::ReduceMax)),
    OpEntry::since("ReduceMin", 1, |imp, n| reduction(imp, n, Op::ReduceMin)),
];

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
