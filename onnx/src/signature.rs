//! A model's inputs and outputs as its file declares them, symbolic dims included: what a
//! caller shows, and checks fed arrays against, before an import gives the dims their sizes
//! (`graphc.load` of a model with a symbolic batch imports it once per fed shape).

use crate::proto::{GraphProto, ValueInfoProto};
use crate::tensor::dtype_of;
use graphc_ir::DType;

/// One dim of a declared shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(u64),
    /// A named size (`dim_param`), the same wherever the name appears.
    Symbolic(String),
    /// Neither a size nor a name.
    Unknown,
}

/// A graph input or output: its name, dtype, and dims (`None`: the file gives no shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    pub dtype: DType,
    pub dims: Option<Vec<Dim>>,
}

/// The main graph's inputs (initializers listed as inputs left out: they are weights) and
/// outputs. An error names the value whose type graphc cannot import.
pub fn signature(path: &std::path::Path) -> Result<(Vec<Declared>, Vec<Declared>), String> {
    let model = crate::proto::read_model(path)?;
    let g: &GraphProto = model.graph.as_ref().ok_or_else(|| format!("{}: the model has no graph", path.display()))?;
    let weights: Vec<&str> = g.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
    let declared = |what: &str, vi: &ValueInfoProto| {
        let name = vi.name.clone().unwrap_or_default();
        let bad = |e: &str| format!("{}: graph {what} '{name}': {e}", path.display());
        let t = vi.r#type.as_ref().and_then(|t| t.tensor_type.as_ref()).ok_or_else(|| {
            bad("only tensors are supported (not sequences, maps or optionals), and it has no tensor type")
        })?;
        let dtype = dtype_of(t.elem_type.unwrap_or(0)).map_err(|e| bad(&e))?;
        let dims = t.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match (d.dim_value, &d.dim_param) {
                    (Some(v), _) if v >= 0 => Dim::Fixed(v as u64),
                    (_, Some(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                    _ => Dim::Unknown,
                })
                .collect()
        });
        Ok(Declared { name, dtype, dims })
    };
    let inputs = g
        .input
        .iter()
        .filter(|vi| !weights.contains(&vi.name.as_deref().unwrap_or_default()))
        .map(|vi| declared("input", vi))
        .collect::<Result<Vec<_>, String>>()?;
    let outputs = g.output.iter().map(|vi| declared("output", vi)).collect::<Result<Vec<_>, String>>()?;
    Ok((inputs, outputs))
}
