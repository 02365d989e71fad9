//! A node's attributes, read with ONNX's defaults.

use crate::proto::{attribute_type, AttributeProto, NodeProto};
use graphc_ir::DType;

/// Reads a node's attributes with ONNX's defaults.
pub(super) struct Attrs<'n>(pub(super) &'n NodeProto);

impl Attrs<'_> {
    pub(super) fn get(&self, name: &str) -> Option<&AttributeProto> {
        self.0.attribute.iter().find(|a| a.name.as_deref() == Some(name))
    }
    pub(super) fn int(&self, name: &str, default: i64) -> i64 {
        self.get(name).and_then(|a| a.i).unwrap_or(default)
    }
    pub(super) fn float(&self, name: &str, default: f32) -> f32 {
        self.get(name).and_then(|a| a.f).unwrap_or(default)
    }
    pub(super) fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name).filter(|a| a.r#type == Some(attribute_type::INTS) || !a.ints.is_empty()).map(|a| a.ints.clone())
    }
    /// A data-type attribute (an ONNX `TensorProto.DataType` code): None when absent or 0
    /// (UNDEFINED), an error naming the type graphc lacks.
    pub(super) fn dtype(&self, name: &str) -> Result<Option<DType>, String> {
        match self.int(name, 0) {
            0 => Ok(None),
            code => i32::try_from(code)
                .map_err(|_| format!("{name}: unknown data type {code}"))
                .and_then(crate::tensor::dtype_of)
                .map(Some),
        }
    }
    pub(super) fn string(&self, name: &str, default: &str) -> String {
        self.get(name)
            .and_then(|a| a.s.clone())
            .map(|s| String::from_utf8_lossy(&s).into_owned())
            .unwrap_or(default.into())
    }
}
