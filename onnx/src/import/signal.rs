//! Signal-processing operators whose results are constants once their sizes are known at
//! import time: HannWindow, HammingWindow and BlackmanWindow (opset 17), generalized cosine
//! windows of a size given as an input.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::Value;
use graphc_runtime::{kernels, Tensor};
use std::f64::consts::PI;

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::since("HannWindow", 17, |imp, n| window(imp, n, &[0.5, -0.5])),
    OpEntry::since("HammingWindow", 17, |imp, n| window(imp, n, &[25.0 / 46.0, -21.0 / 46.0])),
    OpEntry::since("BlackmanWindow", 17, |imp, n| window(imp, n, &[0.42, -0.5, 0.08])),
];

/// The longest window built at import (a constant of this many elements).
const MAX_WINDOW: usize = 1 << 24;

/// `sum_j a[j] * cos(2 pi j k / N)` for k in 0..size, where N is the size when `periodic`
/// (the default) and one less when symmetric; typed by `output_datatype` (float by default).
fn window(imp: &mut Importer, n: &NodeProto, coeffs: &[f64]) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let size = imp.const_ints(n, 0, "size")?.ok_or("input 0 (size) is required")?;
    let [size] = size[..] else {
        return Err(format!("input 0 (size) must be a scalar, got {} values", size.len()));
    };
    let len = usize::try_from(size).map_err(|_| format!("input 0 (size) must not be negative, got {size}"))?;
    if len > MAX_WINDOW {
        return Err(format!("input 0 (size) is {size}; graphc builds windows of at most {MAX_WINDOW} points"));
    }
    let dtype = a.dtype("output_datatype")?.unwrap_or(graphc_ir::DType::F32);
    let period = if a.int("periodic", 1) != 0 { size } else { size - 1 } as f64;
    let w: Vec<f64> = (0..len)
        .map(|k| coeffs.iter().enumerate().map(|(j, c)| c * (2.0 * PI * (j * k) as f64 / period).cos()).sum())
        .collect();
    let t = kernels::cast(&Tensor::F64(ndarray::Array1::from(w).into_dyn()), dtype);
    Ok(vec![imp.constant(t)?])
}
