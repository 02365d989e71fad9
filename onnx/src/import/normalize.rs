//! Normalizations composed of reductions and elementwise ops: RMSNormalization.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use crate::tensor::dtype_of;
use graphc_ir::shape::{broadcasts_to, fmt_shape};
use graphc_ir::{Attr, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[OpEntry::since("RMSNormalization", 23, rms_norm)];

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
    let stash_code = a.int("stash_type", 1);
    let stash = i32::try_from(stash_code)
        .map_err(|_| format!("unknown data type {stash_code}"))
        .and_then(dtype_of)
        .map_err(|e| format!("RMSNormalization-23: stash_type {stash_code}: {e}"))?;
    if !stash.is_float() {
        return Err(format!("RMSNormalization-23: stash_type {stash_code} ({stash}) is not a floating-point type"));
    }
    let cast = |imp: &mut Importer, v: Value, to| -> Result<Value> {
        if imp.ty(v)?.dtype == to {
            return Ok(v);
        }
        imp.emit1(NodeSpec::new(Op::Cast, vec![v]).attr("to", Attr::DType(to)))
    };
    let xu = cast(imp, x, stash)?;
    let sq = imp.binary(Op::Mul, xu, xu)?;
    let axes: Vec<i64> = (axis as i64..rank as i64).collect();
    let mean = imp.reduce(Op::ReduceMean, sq, axes, true)?;
    let eps = imp.scalar(stash, a.float("epsilon", 1e-5) as f64)?;
    let me = imp.binary(Op::Add, mean, eps)?;
    let rms = imp.unary(Op::Sqrt, me)?;
    let normalized = imp.binary(Op::Div, xu, rms)?;
    let normalized = cast(imp, normalized, xt.dtype)?;
    let normalized = cast(imp, normalized, st.dtype)?;
    Ok(vec![imp.binary(Op::Mul, normalized, scale)?])
}
