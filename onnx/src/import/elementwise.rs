//! Elementwise operators that are one IR op each, or a short chain of them: arithmetic,
//! comparisons and logic (binary, broadcasting), the bitwise operators and BitShift, Mod, unary math (trigonometric and
//! hyperbolic functions and their inverses, Floor, Ceil, Round, Sign), Identity, the variadic
//! Max, Min, Sum and Mean, IsNaN and IsInf, Pow, Where, Clip, Cast, CastLike and BitCast.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("Add", |imp, n| binary(imp, n, Op::Add)),
    OpEntry::new("Sub", |imp, n| binary(imp, n, Op::Sub)),
    OpEntry::new("Mul", |imp, n| binary(imp, n, Op::Mul)),
    OpEntry::new("Div", |imp, n| binary(imp, n, Op::Div)),
    OpEntry::new("Equal", |imp, n| binary(imp, n, Op::Equal)),
    OpEntry::new("Greater", |imp, n| binary(imp, n, Op::Greater)),
    OpEntry::new("Less", |imp, n| binary(imp, n, Op::Less)),
    OpEntry::new("GreaterOrEqual", |imp, n| binary(imp, n, Op::GreaterEqual)),
    OpEntry::new("LessOrEqual", |imp, n| binary(imp, n, Op::LessEqual)),
    OpEntry::new("And", |imp, n| binary(imp, n, Op::And)),
    OpEntry::new("Or", |imp, n| binary(imp, n, Op::Or)),
    OpEntry::new("Xor", |imp, n| binary(imp, n, Op::NotEqual)),
    OpEntry::new("Pow", pow),
    OpEntry::since("BitwiseAnd", 18, |imp, n| binary(imp, n, Op::And)),
    OpEntry::since("BitwiseOr", 18, |imp, n| binary(imp, n, Op::Or)),
    OpEntry::since("BitwiseXor", 18, |imp, n| binary(imp, n, Op::Xor)),
    OpEntry::since("BitwiseNot", 18, |imp, n| unary(imp, n, Op::Not)),
    OpEntry::since("BitShift", 11, bit_shift),
    OpEntry::since("BitCast", 26, bit_cast),
    OpEntry::new("Neg", |imp, n| unary(imp, n, Op::Neg)),
    OpEntry::new("Abs", |imp, n| unary(imp, n, Op::Abs)),
    OpEntry::new("Exp", |imp, n| unary(imp, n, Op::Exp)),
    OpEntry::new("Log", |imp, n| unary(imp, n, Op::Log)),
    OpEntry::new("Sqrt", |imp, n| unary(imp, n, Op::Sqrt)),
    OpEntry::new("Relu", |imp, n| unary(imp, n, Op::Relu)),
    OpEntry::new("Sigmoid", |imp, n| unary(imp, n, Op::Sigmoid)),
    OpEntry::new("Tanh", |imp, n| unary(imp, n, Op::Tanh)),
    OpEntry::new("Erf", |imp, n| unary(imp, n, Op::Erf)),
    OpEntry::new("Sin", |imp, n| unary(imp, n, Op::Sin)),
    OpEntry::new("Cos", |imp, n| unary(imp, n, Op::Cos)),
    OpEntry::new("Tan", |imp, n| unary(imp, n, Op::Tan)),
    OpEntry::new("Asin", |imp, n| unary(imp, n, Op::Asin)),
    OpEntry::new("Acos", |imp, n| unary(imp, n, Op::Acos)),
    OpEntry::new("Atan", |imp, n| unary(imp, n, Op::Atan)),
    OpEntry::new("Sinh", |imp, n| unary(imp, n, Op::Sinh)),
    OpEntry::new("Cosh", |imp, n| unary(imp, n, Op::Cosh)),
    OpEntry::new("Asinh", |imp, n| unary(imp, n, Op::Asinh)),
    OpEntry::new("Acosh", |imp, n| unary(imp, n, Op::Acosh)),
    OpEntry::new("Atanh", |imp, n| unary(imp, n, Op::Atanh)),
    OpEntry::new("Floor", |imp, n| unary(imp, n, Op::Floor)),
    OpEntry::new("Ceil", |imp, n| unary(imp, n, Op::Ceil)),
    OpEntry::new("Round", |imp, n| unary(imp, n, Op::Round)),
    OpEntry::new("Sign", |imp, n| unary(imp, n, Op::Sign)),
    OpEntry::new("Mod", modulo),
    OpEntry::new("Not", |imp, n| unary(imp, n, Op::Not)),
    OpEntry::new("Identity", |imp, n| unary(imp, n, Op::Identity)),
    OpEntry::new("Max", |imp, n| variadic(imp, n, Op::Max)),
    OpEntry::new("Min", |imp, n| variadic(imp, n, Op::Min)),
    OpEntry::new("Sum", |imp, n| variadic(imp, n, Op::Add)),
    OpEntry::new("Mean", mean),
    OpEntry::since("IsNaN", 9, is_nan),
    OpEntry::since("IsInf", 10, is_inf),
    OpEntry::new("Where", select),
    OpEntry::new("Clip", clip),
    OpEntry::new("Cast", cast),
    OpEntry::new("CastLike", cast_like),
    // Older versions. Arithmetic and comparisons broadcast as numpy does from version 7;
    // before, they broadcast only with `broadcast = 1`, B aligned with A at `axis`.
    OpEntry::since("Add", 7, |imp, n| binary(imp, n, Op::Add)),
    OpEntry::since("Sub", 7, |imp, n| binary(imp, n, Op::Sub)),
    OpEntry::since("Mul", 7, |imp, n| binary(imp, n, Op::Mul)),
    OpEntry::since("Div", 7, |imp, n| binary(imp, n, Op::Div)),
    OpEntry::since("Add", 6, |imp, n| legacy_binary(imp, n, Op::Add)),
    OpEntry::since("Sub", 6, |imp, n| legacy_binary(imp, n, Op::Sub)),
    OpEntry::since("Mul", 6, |imp, n| legacy_binary(imp, n, Op::Mul)),
    OpEntry::since("Div", 6, |imp, n| legacy_binary(imp, n, Op::Div)),
    OpEntry::since("Equal", 7, |imp, n| binary(imp, n, Op::Equal)),
    OpEntry::since("Greater", 7, |imp, n| binary(imp, n, Op::Greater)),
    OpEntry::since("Less", 7, |imp, n| binary(imp, n, Op::Less)),
    OpEntry::since("And", 7, |imp, n| binary(imp, n, Op::And)),
    OpEntry::since("Or", 7, |imp, n| binary(imp, n, Op::Or)),
    OpEntry::since("Xor", 7, |imp, n| binary(imp, n, Op::NotEqual)),
    OpEntry::since("Equal", 1, |imp, n| legacy_binary(imp, n, Op::Equal)),
    OpEntry::since("Greater", 1, |imp, n| legacy_binary(imp, n, Op::Greater)),
    OpEntry::since("Less", 1, |imp, n| legacy_binary(imp, n, Op::Less)),
    OpEntry::since("And", 1, |imp, n| legacy_binary(imp, n, Op::And)),
    OpEntry::since("Or", 1, |imp, n| legacy_binary(imp, n, Op::Or)),
    OpEntry::since("Xor", 1, |imp, n| legacy_binary(imp, n, Op::NotEqual)),
    // Introduced in 12 (16 adds types).
    OpEntry::since("GreaterOrEqual", 12, |imp, n| binary(imp, n, Op::GreaterEqual)),
    OpEntry::since("LessOrEqual", 12, |imp, n| binary(imp, n, Op::LessEqual)),
    // Pow 7 broadcasts; its exponent has the base's type (12 lets them differ: a superset).
    OpEntry::since("Pow", 7, pow),
    // Pow 1 broadcasts as Add 6 does (`broadcast`, `axis`).
    OpEntry::since("Pow", 1, |imp, n| legacy_binary(imp, n, Op::Pow)),
    // Version 6 dropped `consumed_inputs`; later versions only add element types.
    OpEntry::since("Neg", 6, |imp, n| unary(imp, n, Op::Neg)),
    OpEntry::since("Abs", 6, |imp, n| unary(imp, n, Op::Abs)),
    OpEntry::since("Exp", 6, |imp, n| unary(imp, n, Op::Exp)),
    OpEntry::since("Log", 6, |imp, n| unary(imp, n, Op::Log)),
    OpEntry::since("Sqrt", 6, |imp, n| unary(imp, n, Op::Sqrt)),
    OpEntry::since("Relu", 6, |imp, n| unary(imp, n, Op::Relu)),
    OpEntry::since("Sigmoid", 6, |imp, n| unary(imp, n, Op::Sigmoid)),
    OpEntry::since("Tanh", 6, |imp, n| unary(imp, n, Op::Tanh)),
    OpEntry::since("Erf", 9, |imp, n| unary(imp, n, Op::Erf)),
    // Introduced in 7 (trigonometric) and 9 (hyperbolic); later versions only add types.
    OpEntry::since("Sin", 7, |imp, n| unary(imp, n, Op::Sin)),
    OpEntry::since("Cos", 7, |imp, n| unary(imp, n, Op::Cos)),
    OpEntry::since("Tan", 7, |imp, n| unary(imp, n, Op::Tan)),
    OpEntry::since("Asin", 7, |imp, n| unary(imp, n, Op::Asin)),
    OpEntry::since("Acos", 7, |imp, n| unary(imp, n, Op::Acos)),
    OpEntry::since("Atan", 7, |imp, n| unary(imp, n, Op::Atan)),
    OpEntry::since("Sinh", 9, |imp, n| unary(imp, n, Op::Sinh)),
    OpEntry::since("Cosh", 9, |imp, n| unary(imp, n, Op::Cosh)),
    OpEntry::since("Asinh", 9, |imp, n| unary(imp, n, Op::Asinh)),
    OpEntry::since("Acosh", 9, |imp, n| unary(imp, n, Op::Acosh)),
    OpEntry::since("Atanh", 9, |imp, n| unary(imp, n, Op::Atanh)),
    OpEntry::since("Floor", 6, |imp, n| unary(imp, n, Op::Floor)),
    OpEntry::since("Ceil", 6, |imp, n| unary(imp, n, Op::Ceil)),
    // Round (ties to even) from 11, Sign from 9, Mod (with `fmod`) from 10.
    OpEntry::since("Round", 11, |imp, n| unary(imp, n, Op::Round)),
    OpEntry::since("Sign", 9, |imp, n| unary(imp, n, Op::Sign)),
    OpEntry::since("Mod", 10, modulo),
    OpEntry::since("Not", 1, |imp, n| unary(imp, n, Op::Not)),
    OpEntry::since("Identity", 1, |imp, n| unary(imp, n, Op::Identity)),
    // Max, Min and Sum 6 take equal shapes, 8 broadcasts: the broadcasting converter serves both.
    OpEntry::since("Max", 6, |imp, n| variadic(imp, n, Op::Max)),
    OpEntry::since("Min", 6, |imp, n| variadic(imp, n, Op::Min)),
    OpEntry::since("Sum", 6, |imp, n| variadic(imp, n, Op::Add)),
    OpEntry::since("Mean", 6, mean),
    OpEntry::since("Where", 9, select),
    // Clip 6 has its bounds as attributes; 11 made them inputs (12 adds integer types).
    OpEntry::since("Clip", 11, clip),
    OpEntry::since("Clip", 6, clip_v6),
    // Cast 6 names the target type by number as later versions do (9 adds strings).
    OpEntry::since("Cast", 6, cast),
];

fn binary(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    Ok(vec![imp.binary(op, imp.input(n, 0)?, imp.input(n, 1)?)?])
}

fn unary(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    Ok(vec![imp.unary(op, imp.input(n, 0)?)?])
}

/// `fmod = 1` is the truncated remainder (C's `fmod`), `fmod = 0` the floored one (the
/// divisor's sign, Python's `%`): the IR's `mod` with its `fmod` flag.
fn modulo(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let fmod = match Attrs(n).int("fmod", 0) {
        0 => false,
        1 => true,
        other => return Err(format!("Mod: fmod must be 0 or 1, got {other}")),
    };
    let spec = NodeSpec::new(Op::Mod, vec![imp.input(n, 0)?, imp.input(n, 1)?]).attr("fmod", Attr::Bool(fmod));
    Ok(vec![imp.emit1(spec)?])
}

/// Versions before 7:/// Versions before 7: without `broadcast` the operands have one shape; with `broadcast = 1`
/// B's dims line up with A's from `axis` on (by default, with A's last dims).
fn legacy_binary(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let (x, y) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let (xs, ys) = (imp.shape(x)?, imp.shape(y)?);
    if a.int("broadcast", 0) == 0 {
        if xs != ys {
            return Err(format!(
                "without broadcast = 1 this version needs operands of one shape, got {xs:?} and {ys:?}"
            ));
        }
        return Ok(vec![imp.binary(op, x, y)?]);
    }
    let axis = match a.get("axis").and_then(|v| v.i) {
        Some(ax) if ax < 0 => ax + xs.len() as i64,
        Some(ax) => ax,
        None => xs.len() as i64 - ys.len() as i64,
    };
    if axis < 0 || axis as usize + ys.len() > xs.len() {
        return Err(format!("B of shape {ys:?} does not fit A of shape {xs:?} at axis {axis}"));
    }
    let axis = axis as usize;
    for (i, &d) in ys.iter().enumerate() {
        if d != 1 && d != xs[axis + i] {
            return Err(format!("B of shape {ys:?} does not broadcast to A of shape {xs:?} at axis {axis}"));
        }
    }
    let mut shape = vec![1; axis];
    shape.extend(&ys);
    shape.resize(xs.len(), 1);
    let y = if shape == ys { y } else { imp.reshape(y, shape)? };
    Ok(vec![imp.binary(op, x, y)?])
}

/// The exponent is cast to the base's element type (ONNX allows them to differ).
fn pow(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, y) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let dt = imp.ty(x)?.dtype;
    let y = if imp.ty(y)?.dtype != dt {
        imp.emit1(NodeSpec::new(Op::Cast, vec![y]).attr("to", Attr::DType(dt)))?
    } else {
        y
    };
    Ok(vec![imp.binary(Op::Pow, x, y)?])
}

/// A left fold of the binary op over the inputs; one input is copied.
fn variadic(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    let mut acc = imp.input(n, 0)?;
    for i in 1..n.input.len() {
        let x = imp.input(n, i)?;
        acc = imp.binary(op, acc, x)?;
    }
    if n.input.len() == 1 {
        acc = imp.unary(Op::Identity, acc)?;
    }
    Ok(vec![acc])
}

/// The sum of the inputs (broadcast) divided by their count.
fn mean(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let sum = variadic(imp, n, Op::Add)?[0];
    let dtype = imp.ty(sum)?.dtype;
    let count = imp.scalar(dtype, n.input.len() as f64)?;
    Ok(vec![imp.binary(Op::Div, sum, count)?])
}

/// `x != x`: true exactly for NaN.
fn is_nan(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    Ok(vec![imp.binary(Op::NotEqual, x, x)?])
}

/// Equality with +inf and/or -inf, as `detect_positive` and `detect_negative` ask (both by
/// default: `|x| == inf`; neither: false everywhere, `x < x`).
fn is_inf(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dtype = imp.ty(x)?.dtype;
    let (pos, neg) = (a.int("detect_positive", 1) != 0, a.int("detect_negative", 1) != 0);
    let y = match (pos, neg) {
        (true, true) => {
            let ax = imp.unary(Op::Abs, x)?;
            let inf = imp.scalar(dtype, f64::INFINITY)?;
            imp.binary(Op::Equal, ax, inf)?
        }
        (true, false) | (false, true) => {
            let inf = imp.scalar(dtype, if pos { f64::INFINITY } else { f64::NEG_INFINITY })?;
            imp.binary(Op::Equal, x, inf)?
        }
        (false, false) => imp.binary(Op::Less, x, x)?,
    };
    Ok(vec![y])
}

fn select(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    Ok(vec![imp.emit1(NodeSpec::new(Op::Select, vec![imp.input(n, 0)?, imp.input(n, 1)?, imp.input(n, 2)?]))?])
}

/// max with the lower bound, then min with the upper, each where given.
fn clip(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let mut x = imp.input(n, 0)?;
    if let Some(lo) = imp.opt_input(n, 1)? {
        x = imp.binary(Op::Max, x, lo)?;
    }
    if let Some(hi) = imp.opt_input(n, 2)? {
        x = imp.binary(Op::Min, x, hi)?;
    }
    Ok(vec![imp.unary(Op::Identity, x)?])
}

/// Clip 6: the bounds are the `min` and `max` attributes (by default the float range).
fn clip_v6(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let mut x = imp.input(n, 0)?;
    let dt = imp.ty(x)?.dtype;
    if let Some(lo) = a.get("min").and_then(|v| v.f) {
        let lo = imp.scalar(dt, lo as f64)?;
        x = imp.binary(Op::Max, x, lo)?;
    }
    if let Some(hi) = a.get("max").and_then(|v| v.f) {
        let hi = imp.scalar(dt, hi as f64)?;
        x = imp.binary(Op::Min, x, hi)?;
    }
    Ok(vec![imp.unary(Op::Identity, x)?])
}

fn cast(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let to = Attrs(n).dtype("to")?.ok_or("the 'to' attribute is required")?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Cast, vec![imp.input(n, 0)?]).attr("to", Attr::DType(to)))?])
}

fn bit_shift(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let op = match Attrs(n).string("direction", "").as_str() {
        "LEFT" => Op::ShiftLeft,
        "RIGHT" => Op::ShiftRight,
        other => return Err(format!("direction '{other}' is not LEFT or RIGHT")),
    };
    binary(imp, n, op)
}

fn bit_cast(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let to = Attrs(n).dtype("to")?.ok_or("the 'to' attribute is required")?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Bitcast, vec![imp.input(n, 0)?]).attr("to", Attr::DType(to)))?])
}

fn cast_like(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let to = imp.ty(imp.input(n, 1)?)?.dtype;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Cast, vec![imp.input(n, 0)?]).attr("to", Attr::DType(to)))?])
}
