//! ONNX graphs to graphc graphs. Each ONNX node becomes one or a few IR nodes; inputs that
//! ONNX passes as tensors but graphc needs as attributes (a Reshape's shape, a Slice's
//! bounds, reduction axes) must be constants at import time: initializers, Constant nodes, or
//! anything computed from them, which the importer evaluates with the reference kernels as it
//! goes (so `Shape -> Gather -> Concat -> Reshape` chains work, shapes being static).
//!
//! This module walks the nodes; `graph` holds the graph being built (inputs, initializers,
//! outputs, import-time evaluation); `dispatch` maps each operator type to its converter, and
//! the converters live in one module per operator family.

mod activation;
mod attention;
mod attrs;
mod constant;
mod control;
mod conv;
mod dispatch;
mod einsum;
mod elementwise;
mod entry;
mod gather;
mod graph;
mod index;
mod loss;
mod nn;
mod normalize;
mod quantize;
mod recurrent;
mod reduce;
mod resize;
mod shape;
mod signal;

use crate::proto::{ModelProto, NodeProto};
use graph::Importer;
use graphc_ir::Module;
use graphc_runtime::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// How to import.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Make initializers variables (named as in the model, initialized to their values)
    /// instead of constants, so they can be trained, checkpointed and restored.
    pub weights_as_variables: bool,
    /// Values of graph inputs known when importing (`graphc run` knows what it will feed).
    /// Where an operator needs an input as a constant (a Reshape's shape, Slice bounds,
    /// reduction axes), a known value specializes the graph to it; the input stays in the
    /// signature.
    pub known_inputs: HashMap<String, Tensor>,
    /// Shapes of the arrays that will be fed, by input name (`graphc run` reads them): a
    /// symbolic or unknown dim of a graph input takes the fed array's size, so the model is
    /// specialized to what it is run on.
    pub input_shapes: HashMap<String, Vec<u64>>,
    /// Sizes of symbolic dims of the graph's inputs, by name (`--shape N=1`).
    pub dims: HashMap<String, u64>,
}

pub(crate) type Result<T> = std::result::Result<T, String>;

/// The opset version from which the converters of [`entry::OpEntry::new`] rows are checked:
/// such a row serves this version and later ones. Operators whose earlier versions graphc
/// also imports have rows of their own for them, with each version's semantics.
pub(crate) const FIRST_OPSET: i64 = 13;

/// The oldest version of the default operator set a model may import. A model between this and
/// [`FIRST_OPSET`] imports when each of its operators has an entry for that version (the rows
/// of opsets 1 to 5 are the few operators whose first version is still their meaning, such as
/// Not and And; the others' first rows are from 6 on, where `consumed_inputs` went).
pub(crate) const OLDEST_OPSET: i64 = 1;

/// Imports a decoded model. `base` is the model's directory (for external data).
pub fn import_model(model: &ModelProto, base: &Path, options: &ImportOptions) -> Result<Module> {
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .ok_or("the model imports no version of the default ONNX operator set")?;
    if opset < OLDEST_OPSET {
        return Err(format!("the model uses ONNX opset {opset}; graphc imports opset {OLDEST_OPSET} and later"));
    }
    let graph = model.graph.as_ref().ok_or("the model has no graph")?;
    let mut imp = Importer::new(graph, base, opset, options)?;
    for node in &graph.node {
        convert_node(&mut imp, node).map_err(|e| format!("{}: {e}", describe(node)))?;
    }
    imp.finish(graph)
}

fn describe(n: &NodeProto) -> String {
    match n.name.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => format!("node '{name}' ({})", n.op_type.as_deref().unwrap_or("?")),
        None => format!("node {} -> {:?}", n.op_type.as_deref().unwrap_or("?"), n.output),
    }
}

/// One node: its converter from the dispatch table emits its IR, and its outputs get the
/// node's output names.
fn convert_node(imp: &mut Importer, n: &NodeProto) -> Result<()> {
    if !matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
        return Err(format!("operator domain '{}' is not supported", n.domain.as_deref().unwrap_or("")));
    }
    let op_type = n.op_type.as_deref().unwrap_or_default();
    let entry = dispatch::lookup(op_type, imp.opset).ok_or_else(|| match dispatch::first_since(op_type) {
        Some(since) => format!(
            "operator '{op_type}' is supported from opset {since} on; the version in opset {} is not",
            imp.opset
        ),
        None => format!("operator '{op_type}' is not supported (opset {})", imp.opset),
    })?;
    let outs = (entry.convert)(imp, n)?;
    imp.bind(n, outs)
}
