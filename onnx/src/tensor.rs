//! ONNX tensors (initializers, Constant values, test data) to graphc tensors, including data
//! stored in external files.

use crate::proto::{data_type, TensorProto};
use graphc_ir::{DType, TensorData};
use graphc_runtime::Tensor;
use std::path::Path;

/// The graphc dtype of an ONNX data type, or a message naming the unsupported type.
pub fn dtype_of(t: i32) -> Result<DType, String> {
    Ok(match t {
        data_type::FLOAT => DType::F32,
        data_type::DOUBLE => DType::F64,
        data_type::INT32 => DType::I32,
        data_type::INT64 => DType::I64,
        data_type::BOOL => DType::Bool,
        other => {
            return Err(format!(
                "data type {} is not supported (graphc has float, double, int32, int64 and bool)",
                data_type::name(other)
            ))
        }
    })
}

/// Decodes a tensor; `base` is the model's directory, where external data files live.
pub fn tensor_from_proto(t: &TensorProto, base: &Path) -> Result<Tensor, String> {
    let name = t.name.clone().unwrap_or_default();
    let dtype = dtype_of(t.data_type.unwrap_or(0)).map_err(|e| format!("tensor '{name}': {e}"))?;
    if t.dims.iter().any(|&d| d < 0) {
        return Err(format!("tensor '{name}' has a negative dim in {:?}", t.dims));
    }
    let shape: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    let count =
        shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or(format!("tensor '{name}' is too large"))?;
    let external;
    let raw: Option<&[u8]> = if t.data_location == Some(1) {
        external = read_external(t, base).map_err(|e| format!("tensor '{name}': {e}"))?;
        Some(&external)
    } else {
        t.raw_data.as_deref()
    };
    let data = match raw {
        Some(bytes) => {
            let need = count.checked_mul(dtype.size_bytes()).ok_or(format!("tensor '{name}' is too large"))?;
            if bytes.len() != need {
                return Err(format!(
                    "tensor '{name}' of shape {shape:?} needs {need} bytes of {}, it holds {}",
                    dtype,
                    bytes.len()
                ));
            }
            fn le<const N: usize, T>(b: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
                b.chunks_exact(N).map(|c| f(c.try_into().expect("exact chunks"))).collect()
            }
            match dtype {
                DType::F32 => TensorData::F32(le(bytes, f32::from_le_bytes)),
                DType::F64 => TensorData::F64(le(bytes, f64::from_le_bytes)),
                DType::I32 => TensorData::I32(le(bytes, i32::from_le_bytes)),
                DType::I64 => TensorData::I64(le(bytes, i64::from_le_bytes)),
                DType::Bool => TensorData::Bool(bytes.iter().map(|&b| b != 0).collect()),
            }
        }
        None => match dtype {
            DType::F32 => TensorData::F32(t.float_data.clone()),
            DType::F64 => TensorData::F64(t.double_data.clone()),
            DType::I32 => TensorData::I32(t.int32_data.clone()),
            DType::I64 => TensorData::I64(t.int64_data.clone()),
            DType::Bool => TensorData::Bool(t.int32_data.iter().map(|&b| b != 0).collect()),
        },
    };
    let got = data.len();
    Tensor::from_data(&shape, data)
        .ok_or(format!("tensor '{name}' of shape {shape:?} holds {got} elements, not {count}"))
}

/// The bytes of an externally stored tensor: `location` relative to the model's directory,
/// with optional `offset` and `length`.
fn read_external(t: &TensorProto, base: &Path) -> Result<Vec<u8>, String> {
    let get = |k: &str| t.external_data.iter().find(|e| e.key.as_deref() == Some(k)).and_then(|e| e.value.clone());
    let location = get("location").ok_or("external data without a location")?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location '{location}' must stay inside the model's directory"));
    }
    let path = base.join(rel);
    let bytes = graphc_runtime::fsutil::read_regular(&path, "an ONNX external data file")
        .map_err(|e| e.replacen("cannot read ", "cannot read external data ", 1))?;
    let offset: usize =
        get("offset").map(|o| o.parse().map_err(|_| format!("bad offset '{o}'"))).transpose()?.unwrap_or(0);
    let length: Option<usize> =
        get("length").map(|l| l.parse().map_err(|_| format!("bad length '{l}'"))).transpose()?;
    let end = match length {
        Some(l) => offset.checked_add(l).ok_or("offset plus length overflows")?,
        None => bytes.len(),
    };
    bytes.get(offset..end).map(<[u8]>::to_vec).ok_or(format!(
        "external data {} holds {} bytes, fewer than offset {offset} + length",
        path.display(),
        bytes.len()
    ))
}
