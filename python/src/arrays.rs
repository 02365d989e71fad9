//! numpy arrays in and out. An input is read from its array's buffer, which must be
//! C-contiguous, in one copy (a tensor owns its buffer); an output tensor that nothing else
//! holds (the step made it) is handed to numpy as it is, with no copy.
//!
//! Every graphc dtype has a numpy one under its usual name; bfloat16, which numpy lacks, is
//! `ml_dtypes.bfloat16` (numpy's dtype named "bfloat16" once ml_dtypes is imported).

use crate::errors::error;
use graphc_ir::{bf16, f16, DType, TensorType};
use graphc_runtime::Tensor;
use ndarray::{ArrayD, IxDyn};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use std::sync::Arc;

/// numpy's name of a graphc dtype.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
    }
}

/// `(4, 1, 28, 28)`, as numpy prints a shape.
pub fn shape_text(dims: impl IntoIterator<Item = String>) -> String {
    let dims: Vec<String> = dims.into_iter().collect();
    match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    }
}

/// `text` after its indefinite article: `an int8 array`, `a float32 array`.
pub fn a(text: &str) -> String {
    let article = if text.starts_with(['a', 'e', 'i', 'o']) { "an" } else { "a" };
    format!("{article} {text}")
}

/// `float32 array of shape (4, 1, 28, 28)`.
pub fn describe(ty: &TensorType) -> String {
    format!("{} array of shape {}", dtype_name(ty.dtype), shape_text(ty.shape.iter().map(u64::to_string)))
}

/// What a fed object is, for checks and messages, before its data is read.
#[derive(Debug)]
pub struct Fed<'py> {
    pub array: Bound<'py, PyUntypedArray>,
    /// numpy's dtype name, or its `str` where that says more (`>f4`, a byte order not the
    /// machine's); `None` when no graphc dtype matches.
    pub dtype: Option<DType>,
    pub dtype_text: String,
    pub shape: Vec<usize>,
}

impl<'py> Fed<'py> {
    /// The array fed as input `name`: a numpy array of a dtype graphc has, C-contiguous.
    pub fn new(name: &str, obj: &Bound<'py, PyAny>) -> PyResult<Fed<'py>> {
        let array = obj.cast::<PyUntypedArray>().map_err(|_| {
            let kind = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
            error(format!("input '{name}': expected a numpy array, got a {kind} (numpy.asarray converts it)"))
        })?;
        let descr = array.dtype();
        let dtype_text = descr.str()?.to_string();
        let dtype = DType::ALL.into_iter().find(|&d| dtype_name(d) == dtype_text);
        let shape = array.shape().to_vec();
        Ok(Fed { array: array.clone(), dtype, dtype_text, shape })
    }

    /// `float64 array of shape (3,)`.
    pub fn describe(&self) -> String {
        format!("{} array of shape {}", self.dtype_text, shape_text(self.shape.iter().map(usize::to_string)))
    }

    /// The tensor of the array's elements (one copy of its buffer), which must be of type
    /// `want` (checked by the caller) and C-contiguous.
    pub fn tensor(&self, name: &str, want: &TensorType) -> PyResult<Tensor> {
        if !self.array.is_c_contiguous() {
            return Err(error(format!(
                "input '{name}': expected a C-contiguous {}, got {} that is not contiguous (a transposed or strided view): pass numpy.ascontiguousarray({name})",
                describe(want),
                a(&self.describe())
            )));
        }
        let shape = IxDyn(&self.shape);
        let py = self.array.py();
        Ok(match want.dtype {
            DType::F32 => Tensor::F32(self.read::<f32>(shape)?),
            DType::F64 => Tensor::F64(self.read::<f64>(shape)?),
            DType::F16 => Tensor::F16(self.read::<f16>(shape)?),
            DType::I8 => Tensor::I8(self.read::<i8>(shape)?),
            DType::I16 => Tensor::I16(self.read::<i16>(shape)?),
            DType::I32 => Tensor::I32(self.read::<i32>(shape)?),
            DType::I64 => Tensor::I64(self.read::<i64>(shape)?),
            DType::U8 => Tensor::U8(self.read::<u8>(shape)?),
            DType::U16 => Tensor::U16(self.read::<u16>(shape)?),
            DType::U32 => Tensor::U32(self.read::<u32>(shape)?),
            DType::U64 => Tensor::U64(self.read::<u64>(shape)?),
            // Read through a view of its bytes: a numpy bool may hold any byte (a view of
            // uint8s), which a Rust bool may not; graphc's bool is that byte's being non-zero.
            DType::Bool => {
                let bytes = self.view(py, "uint8")?.read::<u8>(shape)?;
                Tensor::Bool(bytes.mapv(|b| b != 0))
            }
            // ml_dtypes' bfloat16, as the bits it holds (numpy's Element for it needs the
            // dtype registered, which reading its bits does not).
            DType::BF16 => Tensor::BF16(self.view(py, "uint16")?.read::<u16>(shape)?.mapv(bf16::from_bits)),
        })
    }

    /// The same buffer seen as another dtype of the same size (no copy).
    fn view(&self, py: Python<'py>, dtype: &str) -> PyResult<Fed<'py>> {
        let numpy = py.import("numpy")?;
        let viewed = self.array.call_method1("view", (numpy.getattr(dtype)?,))?;
        Ok(Fed {
            array: viewed.cast_into::<PyUntypedArray>()?,
            dtype: None,
            dtype_text: dtype.into(),
            shape: self.shape.clone(),
        })
    }

    fn read<T: Element + Clone>(&self, shape: IxDyn) -> PyResult<ArrayD<T>> {
        let typed = self.array.cast::<PyArrayDyn<T>>()?;
        let readonly = typed.try_readonly().map_err(|e| error(format!("cannot read the array: {e}")))?;
        let data = readonly.as_slice().map_err(|e| error(format!("cannot read the array: {e}")))?.to_vec();
        ArrayD::from_shape_vec(shape, data).map_err(|e| error(format!("cannot read the array: {e}")))
    }
}

/// A numpy array of the tensor: its own buffer when nothing else holds the tensor (no copy),
/// else a copy. bfloat16 needs ml_dtypes; `what` names the value in that error.
pub fn to_numpy<'py>(py: Python<'py>, t: Arc<Tensor>, what: &str) -> PyResult<Bound<'py, PyAny>> {
    let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
    Ok(match t {
        Tensor::F32(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::F64(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::F16(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::I8(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::I16(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::I32(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::I64(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::U8(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::U16(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::U32(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::U64(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::Bool(a) => numpy::PyArray::from_owned_array(py, a).into_any(),
        Tensor::BF16(a) => {
            // Registers numpy's "bfloat16", which the array's dtype is looked up by.
            py.import("ml_dtypes").map_err(|_| {
                error(format!(
                    "{what} is bfloat16, which numpy has only through the ml_dtypes package: pip install ml_dtypes"
                ))
            })?;
            numpy::PyArray::from_owned_array(py, a).into_any()
        }
    })
}
