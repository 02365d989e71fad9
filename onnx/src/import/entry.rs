//! A row of the dispatch table: an operator type, the first opset version it serves, and its
//! converter. The family modules list their rows; `dispatch.rs` indexes them.

use super::graph::Importer;
use super::{Result, FIRST_OPSET};
use crate::proto::NodeProto;
use graphc_ir::Value;

/// Converts one node: reads its inputs and attributes, emits IR, and returns the values of the
/// node's outputs in order (the caller names them; an output the node leaves unnamed may be
/// missing at the end).
pub(super) type Convert = fn(&mut Importer<'_>, &NodeProto) -> Result<Vec<Value>>;

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub(super) struct OpEntry {
    /// The operator type, as in `NodeProto::op_type` (default domain).
    pub(super) op_type: &'static str,
    /// The first opset version whose semantics `convert` implements. It serves models from
    /// this version up to (not including) the `since` of the next entry for the same operator:
    /// where an operator's inputs or attributes changed between versions, each version range
    /// is its own entry with its own converter.
    pub(super) since: i64,
    pub(super) convert: Convert,
}

impl OpEntry {
    /// An entry whose semantics are checked from [`FIRST_OPSET`] on (it serves that opset and
    /// later ones); older versions need entries of their own ([`OpEntry::since`]).
    pub(super) const fn new(op_type: &'static str, convert: Convert) -> Self {
        OpEntry { op_type, since: FIRST_OPSET, convert }
    }

    /// An entry for the operator's version `since` (as the ONNX changelog numbers it), serving
    /// models from that opset until the next entry's.
    pub(super) const fn since(op_type: &'static str, since: i64, convert: Convert) -> Self {
        OpEntry { op_type, since, convert }
    }
}
