//! Gradient of `matmul`: two more products, with the operands' transposes given as the
//! product's flags so that none is materialized; batch dims that broadcast are summed back.

use crate::autodiff::emit::{Emit, Result, Site};
use graphc_ir::{Attr, Op, Value};

type Grads = Result<Vec<Option<Value>>>;

fn product(e: &mut Emit<'_>, a: Value, b: Value, ta: bool, tb: bool) -> Result<Value> {
    let mut attrs = Vec::new();
    if ta {
        attrs.push(("transpose_a", Attr::Bool(true)));
    }
    if tb {
        attrs.push(("transpose_b", Attr::Bool(true)));
    }
    e.op(Op::MatMul, &[a, b], &attrs)
}

/// With `C = op(A) op(B)` for the flags: `dA` and `dB` as stored (not transposed).
pub fn matmul(e: &mut Emit<'_>, s: &Site) -> Grads {
    let (a, b, dc) = (s.x[0], s.x[1], s.dy());
    let ta = s.attrs.bool("transpose_a").unwrap_or(false);
    let tb = s.attrs.bool("transpose_b").unwrap_or(false);
    let (da, db) = match (ta, tb) {
        // C = A B: dA = dC B^T, dB = A^T dC
        (false, false) => (product(e, dc, b, false, true)?, product(e, a, dc, true, false)?),
        // C = A^T B: dA = B dC^T, dB = A dC
        (true, false) => (product(e, b, dc, false, true)?, product(e, a, dc, false, false)?),
        // C = A B^T: dA = dC B, dB = dC^T A
        (false, true) => (product(e, dc, b, false, false)?, product(e, dc, a, true, false)?),
        // C = A^T B^T: dA = B^T dC^T, dB = dC^T A^T
        (true, true) => (product(e, b, dc, true, true)?, product(e, dc, a, true, true)?),
    };
    let (sa, sb) = (e.shape(a), e.shape(b));
    Ok(vec![Some(e.unbroadcast(da, &sa)?), Some(e.unbroadcast(db, &sb)?)])
}
