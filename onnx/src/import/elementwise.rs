//! Elementwise operators that are one IR op each, or a short chain of them: arithmetic,
//! comparisons and logic (binary, broadcasting), unary math, Identity, the variadic Max, Min
//! and Sum, Pow, Where, Clip, Cast and CastLike.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use crate::tensor::dtype_of;
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
    OpEntry::new("Neg", |imp, n| unary(imp, n, Op::Neg)),
    OpEntry::new("Abs", |imp, n| unary(imp, n, Op::Abs)),
    OpEntry::new("Exp", |imp, n| unary(imp, n, Op::Exp)),
    OpEntry::new("Log", |imp, n| unary(imp, n, Op::Log)),
    OpEntry::new("Sqrt", |imp, n| unary(imp, n, Op::Sqrt)),
    OpEntry::new("Relu", |imp, n| unary(imp, n, Op::Relu)),
    OpEntry::new("Sigmoid", |imp, n| unary(imp, n, Op::Sigmoid)),
    OpEntry::new("Tanh", |imp, n| unary(imp, n, Op::Tanh)),
    OpEntry::new("Erf", |imp, n| unary(imp, n, Op::Erf)),
    OpEntry::new("Not", |imp, n| unary(imp, n, Op::Not)),
    OpEntry::new("Identity", |imp, n| unary(imp, n, Op::Identity)),
    OpEntry::new("Max", |imp, n| variadic(imp, n, Op::Max)),
    OpEntry::new("Min", |imp, n| variadic(imp, n, Op::Min)),
    OpEntry::new("Sum", |imp, n| variadic(imp, n, Op::Add)),
    OpEntry::new("Where", select),
    OpEntry::new("Clip", clip),
    OpEntry::new("Cast", cast),
    OpEntry::new("CastLike", cast_like),
];

fn binary(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    Ok(vec![imp.binary(op, imp.input(n, 0)?, imp.input(n, 1)?)?])
}

fn unary(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    Ok(vec![imp.unary(op, imp.input(n, 0)?)?])
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

fn cast(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let to = dtype_of(Attrs(n).int("to", 0) as i32)?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Cast, vec![imp.input(n, 0)?]).attr("to", Attr::DType(to)))?])
}

fn cast_like(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let to = imp.ty(imp.input(n, 1)?)?.dtype;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Cast, vec![imp.input(n, 0)?]).attr("to", Attr::DType(to)))?])
}
