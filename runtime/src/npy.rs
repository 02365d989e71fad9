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
    check_declared_size(&bytes).map_err(|e| format!("{} is not a valid .npy file: {e}", path.display()))?;
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

/// Checks that the data the header declares is in the file, before ndarray-npy allocates room
/// for it: a few bytes claiming a huge shape must be an error, not an allocation failure.
fn check_declared_size(bytes: &[u8]) -> Result<(), String> {
    let bad = || "the header is malformed".to_string();
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("it does not start with the .npy magic string".into());
    }
    let (len, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return Err(format!("format version {v} is not supported")),
    };
    let header = bytes.get(start..start.saturating_add(len)).ok_or_else(bad)?;
    let header = String::from_utf8_lossy(header);
    // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
    let field = |key: &str| header.split_once(key).map(|(_, rest)| rest.trim_start_matches(['\'', '"', ':', ' ']));
    let descr = field("descr").ok_or_else(bad)?;
    let item: u64 = descr
        .trim_start_matches(['<', '>', '|', '='])
        .get(1..)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(1);
    let shape = field("shape").ok_or_else(bad)?;
    let dims = shape.trim_start_matches('(').split(')').next().ok_or_else(bad)?;
    let mut count: u64 = 1;
    for d in dims.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let d: u64 = d.parse().map_err(|_| bad())?;
        count = count.checked_mul(d).ok_or_else(|| "the declared shape is too large".to_string())?;
    }
    let need = count.checked_mul(item).ok_or_else(|| "the declared shape is too large".to_string())?;
    let have = (bytes.len() - (start + len).min(bytes.len())) as u64;
    if need > have {
        return Err(format!(
            "the header declares {count} elements ({need} bytes) but the file holds {have} bytes of data"
        ));
    }
    Ok(())
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
