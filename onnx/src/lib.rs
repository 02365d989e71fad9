//! graphc-onnx: the ONNX front end. Reads `.onnx` models (protobuf, with external data) into
//! graphc IR; the result is ordinary IR that checks, round-trips and runs like any `.gir`.
//!
//! Supported: the default operator set from opset 6 on (each operator where graphc knows its
//! version at the model's opset), float32/float64/int32/int64/bool
//! tensors with static shapes, and the operators MLPs and transformers need. What cannot be
//! imported is one error naming the node, the operator and the reason.

mod import;
pub mod proto;
pub mod tensor;

pub use import::{import_model, ImportOptions};

use graphc_ir::{verify_module, Module};
use prost::Message;
use std::path::Path;

/// Reads and imports a model file.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Module, String> {
    let bytes = graphc_runtime::fsutil::read_regular(path, "an ONNX model")?;
    let model = proto::ModelProto::decode(bytes.as_slice())
        .map_err(|e| format!("{} is not an ONNX model (protobuf decoding failed: {e})", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let module = import_model(&model, base, options).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(d) = verify_module(&module).first() {
        return Err(format!("{}: the imported graph does not verify (a graphc bug): {}", path.display(), d.message));
    }
    Ok(module)
}
