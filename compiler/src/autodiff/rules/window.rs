//! Gradients of convolution and pooling, and of the gradient ops they use. Convolution is
//! bilinear and its two gradients are its adjoints (`conv_input_grad`, `conv_filter_grad`), so
//! each of the three ops' gradients is one of the others; max pooling's adjoint goes to the
//! maximum's position through the pool's indices and a scatter-add.

use crate::autodiff::emit::{ints, Emit, Result, Site};
use graphc_ir::{Attr, NodeSpec, Op, Value};

type Grads = Result<Vec<Option<Value>>>;

/// The node's window attributes (not `shape` or `indices`), plus `shape` when given.
fn attrs(s: &Site, shape: Option<&[u64]>) -> Vec<(&'static str, Attr)> {
    let mut out: Vec<(&'static str, Attr)> = Vec::new();
    for name in ["kernel", "strides", "pads", "dilations", "group", "ceil_mode", "count_include_pad"] {
        if let Some(a) = s.attrs.get(name) {
            out.push((name, a.clone()));
        }
    }
    if let Some(shape) = shape {
        out.push(("shape", Attr::Ints(ints(shape))));
    }
    out
}

pub fn conv(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, w, dy) = (s.x[0], s.x[1], s.dy());
    let (xs, ws) = (e.shape(x), e.shape(w));
    let dx = e.op(Op::ConvInputGrad, &[dy, w], &attrs(s, Some(&xs)))?;
    let dw = e.op(Op::ConvFilterGrad, &[x, dy], &attrs(s, Some(&ws)))?;
    Ok(vec![Some(dx), Some(dw)])
}

/// `conv_input_grad %g, %w`: `<conv_input_grad(g, w), z> = <g, conv(z, w)> = <w, conv_filter_grad(z, g)>`.
pub fn conv_input_grad(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (g, w, z) = (s.x[0], s.x[1], s.dy());
    let ws = e.shape(w);
    let dg = e.op(Op::Conv, &[z, w], &attrs(s, None))?;
    let dw = e.op(Op::ConvFilterGrad, &[z, g], &attrs(s, Some(&ws)))?;
    Ok(vec![Some(dg), Some(dw)])
}

/// `conv_filter_grad %x, %g`: `<conv_filter_grad(x, g), z> = <g, conv(x, z)> = <x, conv_input_grad(g, z)>`.
pub fn conv_filter_grad(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (x, g, z) = (s.x[0], s.x[1], s.dy());
    let xs = e.shape(x);
    let dx = e.op(Op::ConvInputGrad, &[g, z], &attrs(s, Some(&xs)))?;
    let dg = e.op(Op::Conv, &[x, z], &attrs(s, None))?;
    Ok(vec![Some(dx), Some(dg)])
}

pub fn avg_pool(e: &mut Emit<'_>, s: &Site) -> Grads {
    let xs = e.shape(s.x[0]);
    Ok(vec![Some(e.op(Op::AvgPoolGrad, &[s.dy()], &attrs(s, Some(&xs)))?)])
}

/// `avg_pool_grad` is `avg_pool`'s adjoint, so its own adjoint is `avg_pool`.
pub fn avg_pool_grad(e: &mut Emit<'_>, s: &Site) -> Grads {
    Ok(vec![Some(e.op(Op::AvgPool, &[s.dy()], &attrs(s, None))?)])
}

/// The adjoint of each output goes to the input position its maximum came from (the first,
/// on ties), found by a pool with indices over the same input. A window that lies wholly in
/// the padding has no maximum (its index is -1, its value the lowest number): its output is a
/// constant, so its adjoint reaches no input.
pub fn max_pool(e: &mut Emit<'_>, s: &Site) -> Grads {
    let x = s.x[0];
    let Some(dy) = s.dy[0] else { return Ok(vec![None]) };
    let xs = e.shape(x);
    let n: u64 = xs.iter().product();
    if n == 0 {
        // Every window is padding.
        return Ok(vec![Some(e.zeros_like(x)?)]);
    }
    let idx = match s.y.get(1) {
        Some(&i) => i,
        None => {
            let mut spec = NodeSpec::new(Op::MaxPool, vec![x]);
            for (k, v) in attrs(s, None) {
                spec = spec.attr(k, v);
            }
            e.node(spec.attr("indices", Attr::Bool(true)))?[1]
        }
    };
    let m: u64 = e.shape(dy).iter().product();
    let flat_dy = e.reshape(dy, &[m])?;
    let flat_idx = e.reshape(idx, &[m])?;
    // Empty windows (index -1, which a scatter would read as the last element) send 0 to
    // element 0 instead.
    let first = e.scalar(e.dtype(flat_idx), 0.0)?;
    let found = e.op(Op::GreaterEqual, &[flat_idx, first], &[])?;
    let flat_idx = e.op(Op::Select, &[found, flat_idx, first], &[])?;
    let flat_dy = e.mask(found, flat_dy, true)?;
    let ty = e.ty(x).with_shape(vec![n]);
    let zeros = e.splat(&ty, 0.0)?;
    let flat = e.op(Op::ScatterAdd, &[zeros, flat_idx, flat_dy], &[("axis", Attr::Int(0))])?;
    Ok(vec![Some(e.reshape(flat, &xs)?)])
}
