//! The dispatch table: each ONNX operator type, per range of opset versions, to the function
//! that converts its nodes. Every operator family module lists its operators in an `OPS`
//! slice; the table is their union, indexed by operator type on first use.

use super::entry::OpEntry;
use super::{
    activation, attention, constant, control, conv, einsum, elementwise, gather, index, loss, nn, normalize, quantize,
    recurrent, reduce, resize, shape, signal,
};
use std::collections::HashMap;
use std::sync::LazyLock;

/// Every family's operators.
const FAMILIES: &[&[OpEntry]] = &[
    elementwise::OPS,
    activation::OPS,
    constant::OPS,
    shape::OPS,
    reduce::OPS,
    nn::OPS,
    conv::OPS,
    loss::OPS,
    normalize::OPS,
    index::OPS,
    resize::OPS,
    attention::OPS,
    gather::OPS,
    signal::OPS,
    quantize::OPS,
    control::OPS,
    recurrent::OPS,
    einsum::OPS,
];

/// Operator type to its entries, latest `since` first.
static TABLE: LazyLock<HashMap<&'static str, Vec<&'static OpEntry>>> = LazyLock::new(|| {
    let mut table: HashMap<&'static str, Vec<&'static OpEntry>> = HashMap::new();
    for entry in FAMILIES.iter().flat_map(|family| family.iter()) {
        table.entry(entry.op_type).or_default().push(entry);
    }
    for entries in table.values_mut() {
        entries.sort_by_key(|e| std::cmp::Reverse(e.since));
    }
    table
});

/// The entry converting `op_type` in a model of this opset version: the one with the latest
/// `since` not after it. None when the operator is unknown, or only known in later versions.
pub(super) fn lookup(op_type: &str, opset: i64) -> Option<&'static OpEntry> {
    pick(TABLE.get(op_type)?, opset)
}

/// The oldest opset version any entry of `op_type` serves (for error messages).
pub(super) fn first_since(op_type: &str) -> Option<i64> {
    TABLE.get(op_type)?.last().map(|e| e.since)
}

fn pick(latest_first: &[&'static OpEntry], opset: i64) -> Option<&'static OpEntry> {
    latest_first.iter().copied().find(|e| e.since <= opset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::graph::Importer;
    use crate::import::{Result, FIRST_OPSET};
    use crate::proto::NodeProto;
    use graphc_ir::Value;
    use std::collections::{BTreeSet, HashSet};

    fn all() -> impl Iterator<Item = &'static OpEntry> {
        FAMILIES.iter().flat_map(|family| family.iter())
    }

    #[test]
    fn each_operator_version_has_one_entry() {
        let mut seen = HashSet::new();
        for e in all() {
            assert!(seen.insert((e.op_type, e.since)), "{} since opset {} is listed twice", e.op_type, e.since);
            assert!(e.since >= 1, "{} since opset {}: versions count from 1", e.op_type, e.since);
        }
    }

    #[test]
    fn the_table_holds_the_supported_operators() {
        let ops: BTreeSet<&str> = all().map(|e| e.op_type).collect();
        let expected: BTreeSet<&str> = [
            "Abs",
            "Acos",
            "Acosh",
            "Add",
            "AffineGrid",
            "And",
            "ArgMax",
            "ArgMin",
            "Asin",
            "Asinh",
            "Atan",
            "Atanh",
            "Attention",
            "AveragePool",
            "BatchNormalization",
            "BitCast",
            "BitShift",
            "BitwiseAnd",
            "BitwiseNot",
            "BitwiseOr",
            "BitwiseXor",
            "BlackmanWindow",
            "Cast",
            "CastLike",
            "Ceil",
            "Celu",
            "CenterCropPad",
            "Clip",
            "Compress",
            "Concat",
            "Constant",
            "ConstantOfShape",
            "Conv",
            "ConvInteger",
            "ConvTranspose",
            "Cos",
            "Cosh",
            "CumProd",
            "CumSum",
            "DepthToSpace",
            "DequantizeLinear",
            "Div",
            "Dropout",
            "DynamicQuantizeLinear",
            "Einsum",
            "Elu",
            "Equal",
            "Erf",
            "Exp",
            "Expand",
            "EyeLike",
            "Flatten",
            "Floor",
            "GRU",
            "Gather",
            "GatherElements",
            "GatherND",
            "Gelu",
            "Gemm",
            "GlobalAveragePool",
            "GlobalMaxPool",
            "Greater",
            "GreaterOrEqual",
            "GroupNormalization",
            "HammingWindow",
            "HannWindow",
            "HardSigmoid",
            "HardSwish",
            "Hardmax",
            "Identity",
            "If",
            "InstanceNormalization",
            "IsInf",
            "IsNaN",
            "LRN",
            "LSTM",
            "LayerNormalization",
            "LeakyRelu",
            "Less",
            "LessOrEqual",
            "Log",
            "LogSoftmax",
            "Loop",
            "LpNormalization",
            "LpPool",
            "MatMul",
            "MatMulInteger",
            "Max",
            "MaxPool",
            "Mean",
            "MeanVarianceNormalization",
            "Min",
            "Mish",
            "Mod",
            "Mul",
            "Neg",
            "NegativeLogLikelihoodLoss",
            "Not",
            "OneHot",
            "Or",
            "PRelu",
            "Pad",
            "Pow",
            "QLinearConv",
            "QLinearMatMul",
            "QuantizeLinear",
            "RMSNormalization",
            "RNN",
            "Range",
            "Reciprocal",
            "ReduceL1",
            "ReduceL2",
            "ReduceLogSum",
            "ReduceLogSumExp",
            "ReduceMax",
            "ReduceMean",
            "ReduceMin",
            "ReduceProd",
            "ReduceSum",
            "ReduceSumSquare",
            "Relu",
            "Reshape",
            "Resize",
            "ReverseSequence",
            "RotaryEmbedding",
            "Round",
            "Scan",
            "Scatter",
            "ScatterElements",
            "ScatterND",
            "Selu",
            "Shape",
            "Shrink",
            "Sigmoid",
            "Sign",
            "Sin",
            "Sinh",
            "Size",
            "Slice",
            "Softmax",
            "SoftmaxCrossEntropyLoss",
            "Softplus",
            "Softsign",
            "SpaceToDepth",
            "Split",
            "Sqrt",
            "Squeeze",
            "Sub",
            "Sum",
            "Swish",
            "Tan",
            "Tanh",
            "TensorScatter",
            "ThresholdedRelu",
            "Tile",
            "TopK",
            "Transpose",
            "Trilu",
            "Unsqueeze",
            "Upsample",
            "Where",
            "Xor",
        ]
        .into_iter()
        .collect();
        assert_eq!(ops, expected);
        assert!(lookup("Add", FIRST_OPSET).is_some());
        assert!(lookup("Add", 22).is_some());
        assert!(lookup("GridSample", 22).is_none());
        assert!(lookup("", FIRST_OPSET).is_none());
    }

    fn nothing(_: &mut Importer<'_>, _: &NodeProto) -> Result<Vec<Value>> {
        Ok(vec![])
    }

    #[test]
    fn a_model_gets_the_latest_entry_not_after_its_opset() {
        static OLD: OpEntry = OpEntry { op_type: "X", since: 6, convert: nothing };
        static NEW: OpEntry = OpEntry { op_type: "X", since: 13, convert: nothing };
        let entries = [&NEW, &OLD];
        assert_eq!(pick(&entries, 5).map(|e| e.since), None);
        assert_eq!(pick(&entries, 6).map(|e| e.since), Some(6));
        assert_eq!(pick(&entries, 12).map(|e| e.since), Some(6));
        assert_eq!(pick(&entries, 13).map(|e| e.since), Some(13));
        assert_eq!(pick(&entries, 22).map(|e| e.since), Some(13));
    }
}
