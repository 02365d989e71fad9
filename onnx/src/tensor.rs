//! ONNX tensors (initializers, Constant values, test data) to graphc tensors, including data
//! stored in external files.

use crate::proto::{data_type, TensorProto};
use graphc_ir::{bf16, f16, DType, TensorData};
use graphc_runtime::Tensor;
use std::path::Path;

/// ONNX's data types and graphc's dtypes for them.
const DTYPES: [(i32, DType); 13] = [
    (data_type::FLOAT, DType::F32),
    (data_type::DOUBLE, DType::F64),
    (data_type::FLOAT16, DType::F16),
    (data_type::BFLOAT16, DType::BF16),
    (data_type::INT8, DType::I8),
    (data_type::INT16, DType::I16),
    (data_type::INT32, DType::I32),
    (data_type::INT64, DType::I64),
    (data_type::UINT8, DType::U8),
    (data_type::UINT16, DType::U16),
    (data_type::UINT32, DType::U32),
    (data_type::UINT64, DType::U64),
    (data_type::BOOL, DType::Bool),
];

/// The graphc dtype of an ONNX data type, or a message naming the unsupported type.
pub fn dtype_of(t: i32) -> Result<DType, String> {
    DTYPES.iter().find(|(o, _)| *o == t).map(|(_, d)| *d).ok_or_else(|| {
        format!(
            "data type {} is not supported (graphc has the floats FLOAT16, BFLOAT16, FLOAT and DOUBLE, the integers INT8 to INT64 and UINT8 to UINT64, and BOOL)",
            data_type::name(t)
        )
    })
}

/// The ONNX data type of a graphc dtype.
pub fn onnx_type_of(d: DType) -> i32 {
    DTYPES.iter().find(|(_, g)| *g == d).map(|(o, _)| *o).expect("every dtype has an ONNX data type")
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
    if let Some(bytes) = raw {
        let need = count.checked_mul(dtype.size_bytes()).ok_or(format!("tensor '{name}' is too large"))?;
        if bytes.len() != need {
            return Err(format!(
                "tensor '{name}' of shape {shape:?} needs {need} bytes of {}, it holds {}",
                dtype,
                bytes.len()
            ));
        }
        return Tensor::from_le_bytes(dtype, &shape, bytes)
            .ok_or(format!("tensor '{name}' of shape {shape:?} does not fit its {need} bytes"));
    }
    // onnx.proto's packing: the types narrower than 32 bits (and the 16-bit floats' bit
    // patterns) in int32_data, the unsigned 32 and 64-bit ones in uint64_data; each value
    // keeps its low bits.
    let data = match dtype {
        DType::F32 => TensorData::F32(t.float_data.clone()),
        DType::F64 => TensorData::F64(t.double_data.clone()),
        DType::F16 => TensorData::F16(t.int32_data.iter().map(|&b| f16::from_bits(b as u16)).collect()),
        DType::BF16 => TensorData::BF16(t.int32_data.iter().map(|&b| bf16::from_bits(b as u16)).collect()),
        DType::I8 => TensorData::I8(t.int32_data.iter().map(|&v| v as i8).collect()),
        DType::I16 => TensorData::I16(t.int32_data.iter().map(|&v| v as i16).collect()),
        DType::I32 => TensorData::I32(t.int32_data.clone()),
        DType::I64 => TensorData::I64(t.int64_data.clone()),
        DType::U8 => TensorData::U8(t.int32_data.iter().map(|&v| v as u8).collect()),
        DType::U16 => TensorData::U16(t.int32_data.iter().map(|&v| v as u16).collect()),
        DType::U32 => TensorData::U32(t.uint64_data.iter().map(|&v| v as u32).collect()),
        DType::U64 => TensorData::U64(t.uint64_data.clone()),
        DType::Bool => TensorData::Bool(t.int32_data.iter().map(|&b| b != 0).collect()),
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
