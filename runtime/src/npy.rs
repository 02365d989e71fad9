//! Tensors to and from `.npy` files (numpy's format), through ndarray-npy.

use crate::fsutil::write_atomically;
use crate::Tensor;
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyError, ReadNpyExt, WriteNpyExt};
use std::path::Path;

/// Reads a `.npy` file of any dtype graphc has (f32, f64, i32, i64, bool). The error says
/// what is wrong with the file, without naming it (the caller knows which input it was for).
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    fn attempt<T: ndarray_npy::ReadableElement>(bytes: &[u8]) -> Result<ArrayD<T>, ReadNpyError> {
        ArrayD::<T>::read_npy(bytes)
    }
    type Reader = fn(&[u8]) -> Result<Tensor, ReadNpyError>;
    let tries: [Reader; 5] = [
        |b| attempt::<f32>(b).map(Tensor::F32),
        |b| attempt::<f64>(b).map(Tensor::F64),
        |b| attempt::<i32>(b).map(Tensor::I32),
        |b| attempt::<i64>(b).map(Tensor::I64),
        |b| attempt::<bool>(b).map(Tensor::Bool),
    ];
    let mut descriptor = String::new();
    for t in tries {
        match t(&bytes) {
            Ok(t) => return Ok(t),
            Err(ReadNpyError::WrongDescriptor(d)) => descriptor = d.to_string(),
            Err(e) => return Err(format!("{} is not a valid .npy file: {e}", path.display())),
        }
    }
    Err(format!(
        "{} holds elements of numpy type {descriptor}, which graphc has no dtype for (it reads float32, float64, int32, int64 and bool)",
        path.display()
    ))
}

/// Writes a tensor as a `.npy` file, atomically.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    write_atomically(path, |f| {
        let w = std::io::BufWriter::new(f);
        let r = crate::each_dtype!(t, a => a.write_npy(w));
        r.map_err(std::io::Error::other)
    })
    .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
