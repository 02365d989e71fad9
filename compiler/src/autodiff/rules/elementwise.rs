//! Gradients of the elementwise ops: each adjoint is the result's adjoint times the local
//! derivative, summed back to the operand's shape where the op broadcast it.

use crate::autodiff::emit::{Emit, Result, Site};
use graphc_ir::{Op, Value};

type Grads = Result<Vec<Option<Value>>>;

/// Gradient of a unary op of `x`, as a function of `x`, the result `y` and its adjoint.
pub fn unary(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, y, dy) = (s.x[0], s.y[0], s.dy());
    let dx = match s.op {
        Op::Identity => dy,
        Op::Neg => e.neg(dy)?,
        // sign(x) * dy, with sign(0) = 0 as TensorFlow's.
        Op::Abs => {
            let zero = e.scalar(e.dtype(x), 0.0)?;
            let pos = e.op(Op::Greater, &[x, zero], &[])?;
            let neg = e.op(Op::Less, &[x, zero], &[])?;
            let ndy = e.neg(dy)?;
            let on_neg = e.mask(neg, ndy, true)?;
            e.op(Op::Select, &[pos, dy, on_neg], &[])?
        }
        Op::Exp => e.mul(dy, y)?,
        Op::Log => e.div(dy, x)?,
        // dy / (2 sqrt x)
        Op::Sqrt => {
            let half = e.scale(dy, 0.5)?;
            e.div(half, y)?
        }
        // dy (1 - y^2)
        Op::Tanh => {
            let one = e.scalar(e.dtype(y), 1.0)?;
            let yy = e.mul(y, y)?;
            let d = e.sub(one, yy)?;
            e.mul(dy, d)?
        }
        // dy y (1 - y)
        Op::Sigmoid => {
            let one = e.scalar(e.dtype(y), 1.0)?;
            let d = e.sub(one, y)?;
            let yd = e.mul(y, d)?;
            e.mul(dy, yd)?
        }
        // dy where y > 0, which is where x > 0 (TensorFlow's ReluGrad). Reading the result
        // rather than the operand lets the forward kernel keep its one float result and the
        // backward kernel compute the mask itself.
        Op::Relu => {
            let zero = e.scalar(e.dtype(y), 0.0)?;
            let pos = e.op(Op::Greater, &[y, zero], &[])?;
            e.mask(pos, dy, true)?
        }
        // dy 2/sqrt(pi) exp(-x^2)
        Op::Erf => {
            let xx = e.mul(x, x)?;
            let nxx = e.neg(xx)?;
            let ex = e.op(Op::Exp, &[nxx], &[])?;
            let d = e.scale(ex, std::f64::consts::FRAC_2_SQRT_PI)?;
            e.mul(dy, d)?
        }
        Op::Sin => {
            let c = e.op(Op::Cos, &[x], &[])?;
            e.mul(dy, c)?
        }
        Op::Cos => {
            let sn = e.op(Op::Sin, &[x], &[])?;
            let d = e.mul(dy, sn)?;
            e.neg(d)?
        }
        // dy (1 + y^2)
        Op::Tan => {
            let one = e.scalar(e.dtype(y), 1.0)?;
            let yy = e.mul(y, y)?;
            let d = e.add(one, yy)?;
            e.mul(dy, d)?
        }
        // ±dy / sqrt(1 - x^2)
        Op::Asin | Op::Acos => {
            let one = e.scalar(e.dtype(x), 1.0)?;
            let xx = e.mul(x, x)?;
            let d = e.sub(one, xx)?;
            let r = e.op(Op::Sqrt, &[d], &[])?;
            let q = e.div(dy, r)?;
            if s.op == Op::Acos {
                e.neg(q)?
            } else {
                q
            }
        }
        // dy / (1 + x^2)
        Op::Atan => {
            let one = e.scalar(e.dtype(x), 1.0)?;
            let xx = e.mul(x, x)?;
            let d = e.add(one, xx)?;
            e.div(dy, d)?
        }
        Op::Sinh => {
            let c = e.op(Op::Cosh, &[x], &[])?;
            e.mul(dy, c)?
        }
        Op::Cosh => {
            let sn = e.op(Op::Sinh, &[x], &[])?;
            e.mul(dy, sn)?
        }
        // dy / sqrt(x^2 + 1), dy / sqrt(x^2 - 1)
        Op::Asinh | Op::Acosh => {
            let one = e.scalar(e.dtype(x), 1.0)?;
            let xx = e.mul(x, x)?;
            let d = if s.op == Op::Asinh { e.add(xx, one)? } else { e.sub(xx, one)? };
            let r = e.op(Op::Sqrt, &[d], &[])?;
            e.div(dy, r)?
        }
        // dy / (1 - x^2)
        Op::Atanh => {
            let one = e.scalar(e.dtype(x), 1.0)?;
            let xx = e.mul(x, x)?;
            let d = e.sub(one, xx)?;
            e.div(dy, d)?
        }
        // Piecewise constant: a zero gradient, as TensorFlow's (not "not differentiable").
        Op::Floor | Op::Ceil | Op::Round | Op::Sign => e.zeros_like(x)?,
        // Only float to float casts carry gradients (others have no float operand on the path).
        Op::Cast => e.cast(dy, e.dtype(x))?,
        other => return e.fail(format!("internal error: '{}' is not a unary elementwise op", other.name())),
    };
    Ok(vec![Some(dx)])
}

/// Gradient of a binary op with numpy broadcasting.
pub fn binary(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (a, b, y, dy) = (s.x[0], s.x[1], s.y[0], s.dy());
    let (da, db) = match s.op {
        Op::Add => (dy, dy),
        Op::Sub => (dy, e.neg(dy)?),
        Op::Mul => (e.mul(dy, b)?, e.mul(dy, a)?),
        // d/da = dy / b; d/db = -dy a / b^2 = -(dy / b) y
        Op::Div => {
            let q = e.div(dy, b)?;
            let qy = e.mul(q, y)?;
            (q, e.neg(qy)?)
        }
        // d/da = dy b a^(b-1); d/db = dy y ln a where a > 0, else 0 (TensorFlow's rule).
        Op::Pow => {
            let one = e.scalar(e.dtype(b), 1.0)?;
            let bm1 = e.sub(b, one)?;
            let p = e.op(Op::Pow, &[a, bm1], &[])?;
            let bp = e.mul(b, p)?;
            let da = e.mul(dy, bp)?;
            let zero = e.scalar(e.dtype(a), 0.0)?;
            let pos = e.op(Op::Greater, &[a, zero], &[])?;
            // ln of a non-positive base is replaced before it can make a NaN.
            let one_a = e.scalar(e.dtype(a), 1.0)?;
            let safe = e.op(Op::Select, &[pos, a, one_a], &[])?;
            let ln = e.op(Op::Log, &[safe], &[])?;
            let yl = e.mul(y, ln)?;
            let dyl = e.mul(dy, yl)?;
            (da, e.mask(pos, dyl, true)?)
        }
        // `a - b q` with `q = floor(a / b)`, or `trunc(a / b)` with `fmod`, piecewise constant:
        // d/da = 1, d/db = -q (TensorFlow's FloorMod and TruncateMod gradients).
        Op::Mod => {
            let ratio = e.div(a, b)?;
            let down = e.op(Op::Floor, &[ratio], &[])?;
            let q = if s.attrs.bool("fmod").unwrap_or(false) {
                let up = e.op(Op::Ceil, &[ratio], &[])?;
                let zero = e.scalar(e.dtype(ratio), 0.0)?;
                let neg = e.op(Op::Less, &[ratio, zero], &[])?;
                e.op(Op::Select, &[neg, up, down], &[])?
            } else {
                down
            };
            let dq = e.mul(dy, q)?;
            (dy, e.neg(dq)?)
        }
        // The adjoint goes to the operand that was chosen: lhs on ties of max and min.
        Op::Max | Op::Min => {
            let cmp = if s.op == Op::Max { Op::GreaterEqual } else { Op::LessEqual };
            let pick_a = e.op(cmp, &[a, b], &[])?;
            (e.mask(pick_a, dy, true)?, e.mask(pick_a, dy, false)?)
        }
        other => return e.fail(format!("internal error: '{}' is not a binary elementwise op", other.name())),
    };
    let (sa, sb) = (e.shape(a), e.shape(b));
    let da = e.unbroadcast(da, &sa)?;
    let db = e.unbroadcast(db, &sb)?;
    Ok(vec![Some(da), Some(db)])
}

/// `select %c, %a, %b`: the adjoint goes to the branch each element came from.
pub fn select(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (c, a, b, dy) = (s.x[0], s.x[1], s.x[2], s.dy());
    let da = e.mask(c, dy, true)?;
    let db = e.mask(c, dy, false)?;
    let (sa, sb) = (e.shape(a), e.shape(b));
    Ok(vec![None, Some(e.unbroadcast(da, &sa)?), Some(e.unbroadcast(db, &sb)?)])
}
