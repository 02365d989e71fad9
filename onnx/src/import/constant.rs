//! Operators that make constants from attributes: Constant and ConstantOfShape.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use crate::tensor::tensor_from_proto;
use graphc_ir::{Attr, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("Constant", constant),
    OpEntry::new("ConstantOfShape", constant_of_shape),
    // Constant before 11 has only `value` (11 adds `sparse_value`, 12 the `value_*` forms,
    // which the converter takes only when present); ConstantOfShape 9 differs in types only.
    OpEntry::since("Constant", 1, constant),
    OpEntry::since("ConstantOfShape", 9, constant_of_shape),
];

/// The value from whichever of `value`, `value_float`, `value_int`, `value_floats` or
/// `value_ints` is given.
fn constant(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let t = if let Some(t) = a.get("value").and_then(|x| x.t.as_ref()) {
        tensor_from_proto(t, imp.base)?
    } else if let Some(f) = a.get("value_float").and_then(|x| x.f) {
        Tensor::F32(ndarray::arr0(f).into_dyn())
    } else if let Some(i) = a.get("value_int").and_then(|x| x.i) {
        Tensor::I64(ndarray::arr0(i).into_dyn())
    } else if let Some(fs) = a.get("value_floats") {
        Tensor::F32(ndarray::Array1::from(fs.floats.clone()).into_dyn())
    } else if let Some(is) = a.get("value_ints") {
        Tensor::I64(ndarray::Array1::from(is.ints.clone()).into_dyn())
    } else {
        let which = n.attribute.first().and_then(|x| x.name.clone()).unwrap_or_default();
        return Err(format!("Constant with attribute '{which}' is not supported"));
    };
    Ok(vec![imp.constant(t)?])
}

/// The one-element `value` (default float 0) broadcast to the shape input.
fn constant_of_shape(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let shape = imp.const_ints(n, 0, "shape")?.ok_or("input 0 (shape) is required")?;
    let fill = match a.get("value").and_then(|x| x.t.as_ref()) {
        Some(t) => tensor_from_proto(t, imp.base)?,
        None => Tensor::F32(ndarray::arr1(&[0.0f32]).into_dyn()),
    };
    if fill.len() != 1 {
        return Err("the value attribute must hold one element".into());
    }
    let scalar = imp.reshape_const(fill)?;
    let dims: Vec<i64> = shape.iter().map(|&d| d.max(0)).collect();
    Ok(vec![imp.emit1(NodeSpec::new(Op::Broadcast, vec![scalar]).attr("shape", Attr::Ints(dims)))?])
}
