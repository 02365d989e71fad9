//! The comparison of a compiled result with the interpreter's, as SPEC.md §12 bounds it: the
//! one place that says how close is close enough, for the JIT tests and the differential
//! fuzzer alike.
//!
//! - Shapes and dtypes are equal; integers and bools are equal exactly.
//! - NaN where the reference has NaN and nowhere else (any payload); an infinity exactly
//!   where the reference has the same infinity.
//! - Every other float is within the bound of its op or context ([`bound`]): a distance in
//!   ulps (counted through the denormals, so a denormal result is bounded too), or a relative
//!   error, each with an absolute floor below which a difference always passes. Where the
//!   bound is exact, the sign of a zero counts too.

use graphc_runtime::Tensor;

/// How far a float result may be from the reference's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// At most this many ulps apart, or at most `floor` apart absolutely. `Ulps(0, 0.0)` is
    /// bit-exact (up to the NaN payload), zero signs included.
    Ulps(u32, f64),
    /// `|got - want| <= rel * |want|`, or at most `floor` apart absolutely.
    Rel(f64, f64),
}

/// SPEC §12's bound for one op run by compiled code, or for a context: `"graph"` (a chain of
/// nodes end to end, where each node's differences pass through the rest).
pub fn bound(op_or_context: &str) -> Bound {
    let op = op_or_context.split([' ', ':', '(']).next().unwrap_or(op_or_context);
    match op {
        // Correctly rounded in both, or the very same function (log calls libm; pow the
        // runtime's powf, whose squares and cubes the CPU code computes inline the same way).
        "add" | "sub" | "mul" | "neg" | "abs" | "relu" | "max" | "min" | "sqrt" | "log" | "pow" | "select"
        | "broadcast" | "identity" | "less" | "less_equal" | "greater" | "greater_equal" | "equal" | "not_equal"
        | "and" | "or" | "not" | "reduce_max" | "reduce_min" => Bound::Ulps(0, 0.0),
        // By a row's reciprocal: two roundings.
        "div" => Bound::Ulps(2, 0.0),
        // Inline polynomials (codegen.rs), measured over sweeps of their whole range.
        "exp" => Bound::Ulps(EXP_ULPS, 0.0),
        "sigmoid" => Bound::Ulps(SIGMOID_ULPS, 0.0),
        "tanh" => Bound::Ulps(TANH_ULPS, 0.0),
        "erf" => Bound::Ulps(ERF_ULPS, 0.0),
        // Both sum in f64, in another order: the f32 results may round apart by one ulp.
        "reduce_sum" | "reduce_mean" => Bound::Ulps(1, 0.0),
        // Softmax: an exponential, a sum and a reciprocal multiply.
        "softmax" => Bound::Ulps(EXP_ULPS + 3, 0.0),
        // A chain: 1e-5 relative, and an absolute floor of 1e-6 where cancellation in a
        // difference (x - mean) leaves a small result of large operands.
        _ => Bound::Rel(1e-5, 1e-6),
    }
}

/// The ulp bounds of the inline exp, sigmoid and tanh (SPEC §12): the most measured over
/// `f32_sweep` (jit.rs: 1, 3 and 3, with and without AVX and FMA) and one more.
pub const EXP_ULPS: u32 = 2;
pub const SIGMOID_ULPS: u32 = 4;
pub const TANH_ULPS: u32 = 4;
/// 1 with fused multiply-adds (lower/erf.rs's test), 2 without.
pub const ERF_ULPS: u32 = 2;

/// Asserts that `got` (compiled) agrees with `want` (the interpreter) within `bound(op_or_context)`.
pub fn assert_close_spec(op_or_context: &str, got: &Tensor, want: &Tensor) {
    assert_close_within(op_or_context, got, want, bound(op_or_context))
}

/// Asserts that `got` agrees with `want` within `b`; the message names the context, the
/// element and both values.
pub fn assert_close_within(context: &str, got: &Tensor, want: &Tensor, b: Bound) {
    if let Err(e) = check_close(got, want, b) {
        panic!("{context}: {e}");
    }
}

/// The first disagreement beyond `b`, if any.
pub fn check_close(got: &Tensor, want: &Tensor, b: Bound) -> Result<(), String> {
    if got.ty() != want.ty() {
        return Err(format!("got {}, want {}", got.ty(), want.ty()));
    }
    let ulps: fn(f64, f64) -> u64 = match got {
        Tensor::F32(_) => |a, b| ulp_distance_f32(a as f32, b as f32),
        Tensor::F64(_) => ulp_distance_f64,
        _ => {
            let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
            return match g.iter().zip(&w).position(|(x, y)| x != y) {
                Some(i) => Err(format!("element {i}: got {}, want {}", g[i], w[i])),
                None => Ok(()),
            };
        }
    };
    for (i, (g, w)) in got.to_f64_vec().into_iter().zip(want.to_f64_vec()).enumerate() {
        if let Some(why) = float_mismatch(g, w, b, ulps) {
            return Err(format!("element {i}: got {g:e}, want {w:e} ({why}; bound {b:?})"));
        }
    }
    Ok(())
}

/// Why `got` is not within `b` of `want`, or `None` when it is.
fn float_mismatch(got: f64, want: f64, b: Bound, ulps: fn(f64, f64) -> u64) -> Option<String> {
    if want.is_nan() || got.is_nan() {
        return (want.is_nan() != got.is_nan()).then(|| "NaN on one side only".into());
    }
    if want.is_infinite() || got.is_infinite() {
        return (want != got).then(|| "an infinity on one side or of another sign".into());
    }
    let diff = (got - want).abs();
    match b {
        Bound::Ulps(0, _) if got == want && got.is_sign_negative() != want.is_sign_negative() => {
            Some("zeros of different signs".into())
        }
        Bound::Ulps(n, floor) => {
            let d = ulps(got, want);
            (d > u64::from(n) && diff > floor).then(|| format!("{d} ulps apart"))
        }
        Bound::Rel(rel, floor) => {
            (diff > rel * want.abs() && diff > floor).then(|| format!("relative error {:e}", diff / want.abs()))
        }
    }
}

/// Ulps between two finite f32s, counted through zero and the denormals (so +0 and -0 are 0
/// apart, and the smallest denormal is one ulp from zero).
pub fn ulp_distance_f32(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    key(a).abs_diff(key(b))
}

/// Ulps between two finite f64s, as [`ulp_distance_f32`] counts them.
pub fn ulp_distance_f64(a: f64, b: f64) -> u64 {
    let key = |x: f64| {
        let i = x.to_bits() as i64;
        if i < 0 {
            i128::from(i64::MIN) - i128::from(i)
        } else {
            i128::from(i)
        }
    };
    key(a).abs_diff(key(b)).min(u128::from(u64::MAX)) as u64
}
