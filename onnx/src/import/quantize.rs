//! Linear quantization, composed from casts and arithmetic as ONNX's reference computes it:
//! QuantizeLinear and DequantizeLinear (per tensor, per axis and blocked), DynamicQuantizeLinear,
//! MatMulInteger and ConvInteger (exact integer products: int32 matmul, a float64 convolution),
//! QLinearMatMul and QLinearConv (the integer product rescaled by `a_scale * b_scale / y_scale`
//! in float64, rounded half to even, saturated). Quantized types are the 8- and 16-bit
//! integers; float8 and 4- and 2-bit types are out of graphc's types and fail at the input.

use super::attrs::Attrs;
use super::conv::conv_of;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    // Later versions add attributes whose defaults are the earlier behaviour (13 `axis`, 19
    // `saturate` for float8, 21 `block_size` and `output_dtype`, 23 `precision`) and types.
    OpEntry::since("QuantizeLinear", 10, quantize_linear),
    OpEntry::since("DequantizeLinear", 10, dequantize_linear),
    OpEntry::since("DynamicQuantizeLinear", 11, dynamic_quantize_linear),
    OpEntry::since("MatMulInteger", 10, matmul_integer),
    OpEntry::since("ConvInteger", 10, conv_integer),
    // QLinearMatMul 21 adds float16/bfloat16 scales only.
    OpEntry::since("QLinearMatMul", 10, qlinear_matmul),
    OpEntry::since("QLinearConv", 10, qlinear_conv),
];

/// The saturation range of a quantized type.
fn range_of(dtype: DType) -> Result<(f64, f64)> {
    Ok(match dtype {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        other => return Err(format!("{other} is not a quantized type (u8, i8, u16, i16)")),
    })
}

/// A scale or zero point made broadcastable against `x` of shape `dims`: a scalar or one
/// element as a scalar; a vector along `axis` (per axis); with `block`, each element repeated
/// over `block` positions along `axis` (blocked quantization, the last block possibly short).
fn along(imp: &mut Importer, v: Value, dims: &[i64], axis: i64, block: i64) -> Result<Value> {
    let shape = imp.shape(v)?;
    if shape.iter().product::<i64>() == 1 {
        return if shape.is_empty() { Ok(v) } else { imp.reshape(v, vec![]) };
    }
    let axis = norm_axis(axis, dims.len())?;
    if block <= 0 {
        if shape.len() != 1 || shape[0] != dims[axis] {
            return Err(format!(
                "a per-axis scale or zero point must be a vector of the {} elements of axis {axis}, got shape {shape:?}",
                dims[axis]
            ));
        }
        let mut to = vec![1; dims.len()];
        to[axis] = dims[axis];
        return imp.reshape(v, to);
    }
    let blocks = (dims[axis] + block - 1) / block;
    let mut expected = dims.to_vec();
    expected[axis] = blocks;
    if shape != expected {
        return Err(format!("a blocked scale or zero point must have shape {expected:?}, got {shape:?}"));
    }
    let idx: Vec<i64> = (0..dims[axis]).map(|i| i / block).collect();
    let idx = imp.constant(Tensor::I64(ndarray::Array1::from(idx).into_dyn()))?;
    imp.emit1(NodeSpec::new(Op::Gather, vec![v, idx]).attr("axis", Attr::Int(axis as i64)))
}

/// `saturate(round(y) + zero_point)` as `dtype`, in float64 (every integer of the quantized
/// types is exact there): `y` is the scaled float value, `zero_point` broadcast against it.
fn requantize(imp: &mut Importer, y: Value, zero_point: Option<Value>, dtype: DType) -> Result<Value> {
    let (lo, hi) = range_of(dtype)?;
    let y = imp.unary(Op::Round, y)?;
    let mut q = imp.cast(y, DType::F64)?;
    if let Some(zp) = zero_point {
        let zp = imp.cast(zp, DType::F64)?;
        q = imp.binary(Op::Add, q, zp)?;
    }
    let lo = imp.scalar(DType::F64, lo)?;
    let hi = imp.scalar(DType::F64, hi)?;
    let q = imp.binary(Op::Max, q, lo)?;
    let q = imp.binary(Op::Min, q, hi)?;
    imp.cast(q, dtype)
}

fn quantize_linear(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let (axis, block) = (a.int("axis", 1), a.int("block_size", 0));
    let scale = imp.input(n, 1)?;
    let scale = along(imp, scale, &dims, axis, block)?;
    let zp = imp.opt_input(n, 2)?;
    let dtype = match (zp, a.dtype("output_dtype")?) {
        (Some(zp), Some(out)) if imp.ty(zp)?.dtype != out => {
            return Err(format!("output_dtype {out} differs from the zero point's type {}", imp.ty(zp)?.dtype))
        }
        (Some(zp), _) => imp.ty(zp)?.dtype,
        (None, out) => out.unwrap_or(DType::U8),
    };
    let zp = zp.map(|zp| along(imp, zp, &dims, axis, block)).transpose()?;
    // The division is in x's type (float64 for int32), or in `precision`'s where given (23).
    let x_type = imp.ty(x)?.dtype;
    let ct = a.dtype("precision")?.unwrap_or(if x_type.is_float() { x_type } else { DType::F64 });
    let x = imp.cast(x, ct)?;
    let scale = imp.cast(scale, ct)?;
    let y = imp.binary(Op::Div, x, scale)?;
    Ok(vec![requantize(imp, y, zp, dtype)?])
}

fn dequantize_linear(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let (axis, block) = (a.int("axis", 1), a.int("block_size", 0));
    let scale = imp.input(n, 1)?;
    let scale_type = imp.ty(scale)?.dtype;
    let scale = along(imp, scale, &dims, axis, block)?;
    let zp = imp.opt_input(n, 2)?.map(|zp| along(imp, zp, &dims, axis, block)).transpose()?;
    // As numpy promotes: x as float32, less an int32 zero point in float64, times the scale.
    let wide = |d: DType| matches!(d, DType::I32 | DType::U32 | DType::I64 | DType::U64 | DType::F64);
    let zp_type = zp.map(|zp| imp.ty(zp).map(|t| t.dtype)).transpose()?;
    let ct = if wide(scale_type) || zp_type.is_some_and(wide) { DType::F64 } else { DType::F32 };
    let x = imp.cast(x, DType::F32)?;
    let mut dx = imp.cast(x, ct)?;
    if let Some(zp) = zp {
        let zp = imp.cast(zp, ct)?;
        dx = imp.binary(Op::Sub, dx, zp)?;
    }
    let scale = imp.cast(scale, ct)?;
    let y = imp.binary(Op::Mul, dx, scale)?;
    let out = a.dtype("output_dtype")?.unwrap_or(scale_type);
    Ok(vec![imp.cast(y, out)?])
}

/// uint8 with a scale and zero point from the range of x and 0: `(max - min) / 255`.
fn dynamic_quantize_linear(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let t = imp.ty(x)?;
    if t.dtype != DType::F32 {
        return Err(format!("DynamicQuantizeLinear takes float32, got {}", t.dtype));
    }
    let axes: Vec<i64> = (0..t.rank() as i64).collect();
    let zero = imp.scalar(DType::F32, 0.0)?;
    let max = imp.reduce(Op::ReduceMax, x, axes.clone(), false)?;
    let max = imp.binary(Op::Max, max, zero)?;
    let min = imp.reduce(Op::ReduceMin, x, axes, false)?;
    let min = imp.binary(Op::Min, min, zero)?;
    let same = imp.binary(Op::Equal, max, min)?;
    let one = imp.scalar(DType::F32, 1.0)?;
    let width = imp.binary(Op::Sub, max, min)?;
    let width = imp.emit1(NodeSpec::new(Op::Select, vec![same, one, width]))?;
    let levels = imp.scalar(DType::F32, 255.0)?;
    let scale = imp.binary(Op::Div, width, levels)?;
    let from_min = imp.binary(Op::Div, min, scale)?;
    let zp = imp.binary(Op::Sub, zero, from_min)?;
    let zp = imp.binary(Op::Max, zp, zero)?;
    let zp = imp.binary(Op::Min, zp, levels)?;
    let zp = imp.unary(Op::Round, zp)?;
    let y = imp.binary(Op::Div, x, scale)?;
    let y = requantize(imp, y, Some(zp), DType::U8)?;
    let zp = imp.cast(zp, DType::U8)?;
    Ok(vec![y, scale, zp])
}

/// `x - zero_point` as `to`, the zero point reshaped to `zp_shape` when it is a vector.
fn offset(imp: &mut Importer, x: Value, zero_point: Option<Value>, to: DType, zp_shape: &[i64]) -> Result<Value> {
    let x = imp.cast(x, to)?;
    let Some(zp) = zero_point else { return Ok(x) };
    let zp = match imp.shape(zp)?.len() {
        0 => zp,
        _ if imp.shape(zp)?.iter().product::<i64>() == 1 => imp.reshape(zp, vec![])?,
        _ => imp.reshape(zp, zp_shape.to_vec())?,
    };
    let zp = imp.cast(zp, to)?;
    imp.binary(Op::Sub, x, zp)
}

/// `(a - a_zero_point) @ (b - b_zero_point)` in int32; `a`'s zero point per row (of its last
/// two dims), `b`'s per column.
fn integer_product(imp: &mut Importer, a: Value, azp: Option<Value>, b: Value, bzp: Option<Value>) -> Result<Value> {
    let rows = *imp.shape(a)?.iter().rev().nth(1).ok_or("MatMul's A must have two dims or more")?;
    let cols = *imp.shape(b)?.last().ok_or("MatMul's B must have one dim or more")?;
    let a = offset(imp, a, azp, DType::I32, &[rows, 1])?;
    let b = offset(imp, b, bzp, DType::I32, &[cols])?;
    imp.binary(Op::MatMul, a, b)
}

fn matmul_integer(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (a, b) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let (azp, bzp) = (imp.opt_input(n, 2)?, imp.opt_input(n, 3)?);
    Ok(vec![integer_product(imp, a, azp, b, bzp)?])
}

/// The convolution of `x - x_zero_point` by `w - w_zero_point` (per output channel) in
/// float64, where every product and sum of 8-bit values is exact.
fn integer_conv(
    imp: &mut Importer,
    n: &NodeProto,
    x: Value,
    xzp: Option<Value>,
    w: Value,
    wzp: Option<Value>,
) -> Result<Value> {
    let wdims = imp.shape(w)?;
    let mut per_channel = vec![1; wdims.len()];
    per_channel[0] = wdims[0];
    let x = offset(imp, x, xzp, DType::F64, &[])?;
    let w = offset(imp, w, wzp, DType::F64, &per_channel)?;
    conv_of(imp, n, x, w)
}

fn conv_integer(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, w) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let (xzp, wzp) = (imp.opt_input(n, 2)?, imp.opt_input(n, 3)?);
    let y = integer_conv(imp, n, x, xzp, w, wzp)?;
    Ok(vec![imp.cast(y, DType::I32)?])
}

/// `product * (a_scale * b_scale / y_scale)` requantized with `y_zero_point`: the factor in the
/// scales' type, the product and the rest in float64. `b_scale` is per output channel along
/// `b_axis` of the product when it is a vector, `a_scale` per row.
fn rescale(
    imp: &mut Importer,
    n: &NodeProto,
    product: Value,
    idx: [usize; 4],
    b_axis: usize,
    like: DType,
) -> Result<Value> {
    let [a_scale, b_scale, y_scale, y_zp] = idx;
    let dims = imp.shape(product)?;
    let a_scale = imp.input(n, a_scale)?;
    let a_scale = along(imp, a_scale, &dims, dims.len() as i64 - 2, 0)?;
    let b_scale = imp.input(n, b_scale)?;
    let b_scale = along(imp, b_scale, &dims, b_axis as i64, 0)?;
    let y_scale = imp.input(n, y_scale)?;
    let factor = imp.binary(Op::Mul, a_scale, b_scale)?;
    let factor = imp.binary(Op::Div, factor, y_scale)?;
    let factor = imp.cast(factor, DType::F64)?;
    let product = imp.cast(product, DType::F64)?;
    let y = imp.binary(Op::Mul, product, factor)?;
    let zp = imp.opt_input(n, y_zp)?;
    let dtype = match zp {
        Some(zp) => imp.ty(zp)?.dtype,
        None => like,
    };
    requantize(imp, y, zp, dtype)
}

fn qlinear_matmul(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (a, b) = (imp.input(n, 0)?, imp.input(n, 3)?);
    let (azp, bzp) = (imp.opt_input(n, 2)?, imp.opt_input(n, 5)?);
    let like = imp.ty(a)?.dtype;
    let product = integer_product(imp, a, azp, b, bzp)?;
    let last = imp.shape(product)?.len() - 1;
    Ok(vec![rescale(imp, n, product, [1, 4, 6, 7], last, like)?])
}

fn qlinear_conv(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, w) = (imp.input(n, 0)?, imp.input(n, 3)?);
    let (xzp, wzp) = (imp.opt_input(n, 2)?, imp.opt_input(n, 5)?);
    let like = imp.ty(x)?.dtype;
    let mut y = integer_conv(imp, n, x, xzp, w, wzp)?;
    if let Some(bias) = imp.opt_input(n, 8)? {
        let dims = imp.shape(y)?;
        let bias = along(imp, bias, &dims, 1, 0)?;
        let bias = imp.cast(bias, DType::F64)?;
        y = imp.binary(Op::Add, y, bias)?;
    }
    Ok(vec![rescale(imp, n, y, [1, 4, 6, 7], 1, like)?])
}
