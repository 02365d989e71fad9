//! graphc-onnx: the ONNX front end. Reads `.onnx` models (protobuf, with external data) into
//! graphc IR; the result is ordinary IR that checks, round-trips and runs like any `.gir`.
//!
//! Supported: the default operator set from opset 6 on (each operator where graphc knows its
//! version at the model's opset), float32/float64/int32/int64/bool
//! tensors with static shapes, and the operators MLPs and transformers need. What cannot be
//! imported is one error naming the node, the operator and the reason.

mod import;
pub mod proto;
mod signature;
pub mod tensor;

pub use import::{import_model, ImportOptions};
pub use signature::{signature, Declared, Dim};

use graphc_ir::{verify_module, Module};
use std::path::Path;

/// Reads and imports a model file.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Module, String> {
    let model = proto::read_model(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let module = import_model(&model, base, options).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(d) = verify_module(&module).first() {
        return Err(format!("{}: the imported graph does not verify (a graphc bug): {}", path.display(), d.message));
    }
    Ok(module)
}

/// The external data files a model's tensors name (initializers and constant attributes,
/// subgraphs included), each once, as the import reads them: `location` beside the model.
/// For the check that no output replaces what a run reads.
pub fn external_data_files(path: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let model = proto::read_model(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    let mut graphs: Vec<&proto::GraphProto> = model.graph.iter().collect();
    while let Some(g) = graphs.pop() {
        let attributes = g.node.iter().flat_map(|n| &n.attribute);
        let tensors = g.initializer.iter().chain(attributes.clone().filter_map(|a| a.t.as_ref()));
        graphs.extend(attributes.filter_map(|a| a.g.as_ref()));
        for t in tensors {
            let location = t.external_data.iter().find(|e| e.key.as_deref() == Some("location"));
            if let Some(file) = location.and_then(|e| e.value.as_ref()).map(|l| base.join(l)) {
                if !files.contains(&file) {
                    files.push(file);
                }
            }
        }
    }
    Ok(files)
}
