//! Activations that graphc has no single op for, expanded to short compositions of IR ops with
//! ONNX's default parameters: Reciprocal, Softplus, Mish, Softsign, LeakyRelu, PRelu,
//! ThresholdedRelu, Elu, Selu, Celu, HardSigmoid, HardSwish, Gelu, Shrink and Swish. (Relu, Sigmoid and Tanh
//! are IR ops: see `elementwise`.)

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("Reciprocal", |imp, n| activation(imp, n, Act::Reciprocal)),
    OpEntry::new("Softplus", |imp, n| activation(imp, n, Act::Softplus)),
    OpEntry::new("Mish", |imp, n| activation(imp, n, Act::Mish)),
    OpEntry::new("Softsign", |imp, n| activation(imp, n, Act::Softsign)),
    OpEntry::new("LeakyRelu", |imp, n| activation(imp, n, Act::LeakyRelu)),
    OpEntry::new("ThresholdedRelu", |imp, n| activation(imp, n, Act::ThresholdedRelu)),
    OpEntry::new("Elu", |imp, n| activation(imp, n, Act::Elu)),
    OpEntry::new("Selu", |imp, n| activation(imp, n, Act::Selu)),
    OpEntry::new("Celu", |imp, n| activation(imp, n, Act::Celu)),
    OpEntry::new("HardSigmoid", |imp, n| activation(imp, n, Act::HardSigmoid)),
    OpEntry::new("HardSwish", |imp, n| activation(imp, n, Act::HardSwish)),
    OpEntry::new("PRelu", prelu),
    OpEntry::new("Gelu", gelu),
    OpEntry::since("Shrink", 9, shrink),
    OpEntry::since("Swish", 24, swish),
    // Older versions, where they differ from the later ones only in element types (version 6
    // dropped `consumed_inputs`; PRelu 7 broadcasts the slope as later versions do).
    OpEntry::since("Reciprocal", 6, |imp, n| activation(imp, n, Act::Reciprocal)),
    OpEntry::since("Softplus", 1, |imp, n| activation(imp, n, Act::Softplus)),
    OpEntry::since("Softsign", 1, |imp, n| activation(imp, n, Act::Softsign)),
    OpEntry::since("LeakyRelu", 6, |imp, n| activation(imp, n, Act::LeakyRelu)),
    OpEntry::since("ThresholdedRelu", 10, |imp, n| activation(imp, n, Act::ThresholdedRelu)),
    OpEntry::since("Elu", 6, |imp, n| activation(imp, n, Act::Elu)),
    OpEntry::since("Selu", 6, |imp, n| activation(imp, n, Act::Selu)),
    OpEntry::since("HardSigmoid", 6, |imp, n| activation(imp, n, Act::HardSigmoid)),
    OpEntry::since("PRelu", 7, prelu),
    OpEntry::since("PRelu", 6, prelu_v6),
    OpEntry::since("Celu", 12, |imp, n| activation(imp, n, Act::Celu)),
];

/// The activations of one input that [`activation`] composes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    Reciprocal,
    Softplus,
    Mish,
    Softsign,
    LeakyRelu,
    ThresholdedRelu,
    Elu,
    Selu,
    Celu,
    HardSigmoid,
    HardSwish,
}

/// Activations that are short compositions of IR ops, with ONNX's default parameters.
fn activation(imp: &mut Importer, n: &NodeProto, act: Act) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let a = Attrs(n);
    let dt = imp.ty(x)?.dtype;
    let k = |imp: &mut Importer, v: f64| imp.scalar(dt, v);
    let zero = k(imp, 0.0)?;
    let one = k(imp, 1.0)?;
    let y = match act {
        Act::Reciprocal => imp.binary(Op::Div, one, x)?,
        Act::Softplus | Act::Mish => {
            // log(1 + exp(x)), written as max(x, 0) + log(1 + exp(-|x|)) so large x stays finite.
            let ax = imp.unary(Op::Abs, x)?;
            let nax = imp.unary(Op::Neg, ax)?;
            let e = imp.unary(Op::Exp, nax)?;
            let p = imp.binary(Op::Add, one, e)?;
            let l = imp.unary(Op::Log, p)?;
            let r = imp.unary(Op::Relu, x)?;
            let sp = imp.binary(Op::Add, r, l)?;
            if act == Act::Mish {
                let t = imp.unary(Op::Tanh, sp)?;
                imp.binary(Op::Mul, x, t)?
            } else {
                sp
            }
        }
        Act::Softsign => {
            let ax = imp.unary(Op::Abs, x)?;
            let d = imp.binary(Op::Add, one, ax)?;
            imp.binary(Op::Div, x, d)?
        }
        Act::LeakyRelu => {
            let alpha = k(imp, a.float("alpha", 0.01) as f64)?;
            let neg = imp.binary(Op::Less, x, zero)?;
            let scaled = imp.binary(Op::Mul, x, alpha)?;
            imp.emit1(NodeSpec::new(Op::Select, vec![neg, scaled, x]))?
        }
        Act::ThresholdedRelu => {
            let alpha = k(imp, a.float("alpha", 1.0) as f64)?;
            let above = imp.binary(Op::Greater, x, alpha)?;
            imp.emit1(NodeSpec::new(Op::Select, vec![above, x, zero]))?
        }
        Act::Elu | Act::Selu | Act::Celu => {
            // alpha * (exp(x / c) - 1) below zero, x above; Selu scales both by gamma.
            let (alpha, c, gamma) = match act {
                Act::Elu => (a.float("alpha", 1.0) as f64, 1.0, 1.0),
                Act::Celu => (a.float("alpha", 1.0) as f64, a.float("alpha", 1.0) as f64, 1.0),
                _ => (a.float("alpha", 1.673_263_2) as f64, 1.0, a.float("gamma", 1.050_701) as f64),
            };
            let cv = k(imp, c)?;
            let xc = imp.binary(Op::Div, x, cv)?;
            let e = imp.unary(Op::Exp, xc)?;
            let em1 = imp.binary(Op::Sub, e, one)?;
            let av = k(imp, alpha)?;
            let neg_part = imp.binary(Op::Mul, av, em1)?;
            let neg = imp.binary(Op::Less, x, zero)?;
            let y = imp.emit1(NodeSpec::new(Op::Select, vec![neg, neg_part, x]))?;
            if gamma == 1.0 {
                y
            } else {
                let g = k(imp, gamma)?;
                imp.binary(Op::Mul, g, y)?
            }
        }
        Act::HardSigmoid | Act::HardSwish => {
            let (alpha, beta) = if act == Act::HardSwish {
                (1.0 / 6.0, 0.5)
            } else {
                (a.float("alpha", 0.2) as f64, a.float("beta", 0.5) as f64)
            };
            let av = k(imp, alpha)?;
            let bv = k(imp, beta)?;
            let ax = imp.binary(Op::Mul, x, av)?;
            let s = imp.binary(Op::Add, ax, bv)?;
            let lo = imp.binary(Op::Max, s, zero)?;
            let hs = imp.binary(Op::Min, lo, one)?;
            if act == Act::HardSwish {
                imp.binary(Op::Mul, x, hs)?
            } else {
                hs
            }
        }
    };
    Ok(vec![y])
}

/// x where x >= 0, x * slope below (the slope broadcasting).
fn prelu(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, slope) = (imp.input(n, 0)?, imp.input(n, 1)?);
    prelu_with(imp, x, slope)
}

/// `x < 0 ? x * slope : x`, the slope broadcast.
fn prelu_with(imp: &mut Importer, x: Value, slope: Value) -> Result<Vec<Value>> {
    let dt = imp.ty(x)?.dtype;
    let zero = imp.scalar(dt, 0.0)?;
    let neg = imp.binary(Op::Less, x, zero)?;
    let scaled = imp.binary(Op::Mul, x, slope)?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Select, vec![neg, scaled, x]))?])
}

/// PRelu 6: the slope is one value, or one per channel (axis 1), not numpy-broadcast.
fn prelu_v6(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let (x, slope) = (imp.input(n, 0)?, imp.input(n, 1)?);
    let (dims, sdims) = (imp.shape(x)?, imp.shape(slope)?);
    let slope = match sdims[..] {
        [c] if c != 1 && dims.len() > 2 && dims[1] == c => {
            let mut shape = vec![1; dims.len() - 1];
            shape[0] = c;
            imp.reshape(slope, shape)?
        }
        _ if sdims.iter().product::<i64>() == 1 => imp.reshape(slope, vec![])?,
        _ if dims.len() == 2 && sdims == [dims[1]] => slope,
        _ => return Err(format!("the slope {sdims:?} must be one value or one per channel of {dims:?}")),
    };
    prelu_with(imp, x, slope)
}

/// 0.5 x (1 + erf(x / sqrt 2)), or with `approximate = "tanh"` the tanh form.
fn gelu(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dt = imp.ty(x)?.dtype;
    let half = imp.scalar(dt, 0.5)?;
    let one = imp.scalar(dt, 1.0)?;
    let inner = if a.string("approximate", "none") == "tanh" {
        // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
        let c = imp.scalar(dt, (2.0 / std::f64::consts::PI).sqrt())?;
        let k = imp.scalar(dt, 0.044715)?;
        let x2 = imp.binary(Op::Mul, x, x)?;
        let x3 = imp.binary(Op::Mul, x2, x)?;
        let kx3 = imp.binary(Op::Mul, k, x3)?;
        let s = imp.binary(Op::Add, x, kx3)?;
        let cs = imp.binary(Op::Mul, c, s)?;
        imp.unary(Op::Tanh, cs)?
    } else {
        let r = imp.scalar(dt, std::f64::consts::FRAC_1_SQRT_2)?;
        let xr = imp.binary(Op::Mul, x, r)?;
        imp.unary(Op::Erf, xr)?
    };
    let p = imp.binary(Op::Add, one, inner)?;
    let hx = imp.binary(Op::Mul, half, x)?;
    Ok(vec![imp.binary(Op::Mul, hx, p)?])
}

/// Shrink 9: `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between.
fn shrink(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dt = imp.ty(x)?.dtype;
    let (lambd, bias) = (a.float("lambd", 0.5) as f64, a.float("bias", 0.0) as f64);
    let (lo, hi) = (imp.scalar(dt, -lambd)?, imp.scalar(dt, lambd)?);
    let b = imp.scalar(dt, bias)?;
    let zero = imp.scalar(dt, 0.0)?;
    let below = imp.binary(Op::Less, x, lo)?;
    let above = imp.binary(Op::Greater, x, hi)?;
    let up = imp.binary(Op::Add, x, b)?;
    let down = imp.binary(Op::Sub, x, b)?;
    let outer = imp.emit1(NodeSpec::new(Op::Select, vec![above, down, zero]))?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Select, vec![below, up, outer]))?])
}

/// Swish 24: `x * sigmoid(alpha * x)`.
fn swish(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let alpha = imp.scalar(imp.ty(x)?.dtype, Attrs(n).float("alpha", 1.0) as f64)?;
    let ax = imp.binary(Op::Mul, x, alpha)?;
    let s = imp.unary(Op::Sigmoid, ax)?;
    Ok(vec![imp.binary(Op::Mul, x, s)?])
}
