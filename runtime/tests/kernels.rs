//! Every op's reference kernel against hand-computed values, run through the interpreter on
//! small graphs (so the type rules and the kernels are checked together).

mod common;
use common::*;
use graphc_runtime::ErrorKind;

#[test]
fn constant_and_identity() {
    let out = run(
        "() -> (a: f32[2,2], b: i64[3])",
        "  %0 = constant {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : f32[2,2]} : f32[2,2]\n  %1 = constant {value = dense<7> : i64[3]} : i64[3]\n  %2 = identity %1 : i64[3]\n  return %0, %2",
        &[],
    );
    assert_eq!(out[0], f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]));
    assert_eq!(out[1], i64t(&[3], &[7, 7, 7]));
}

#[test]
fn cast_follows_the_spec() {
    let x = f32t(&[5], &[1.7, -1.7, f32::NAN, 3e10, -0.0]);
    assert_eq!(op1(x.clone(), "cast {to = i32}", "i32[5]"), i32t(&[5], &[1, -1, 0, i32::MAX, 0]));
    assert_eq!(op1(x, "cast {to = bool}", "bool[5]"), boolt(&[5], &[true, true, true, true, false]));
    assert_eq!(op1(boolt(&[2], &[true, false]), "cast {to = f32}", "f32[2]"), f32t(&[2], &[1.0, 0.0]));
    // i64 -> f32 rounds to nearest: 2^24 + 1 is not representable.
    assert_eq!(op1(i64t(&[1], &[16_777_217]), "cast {to = f32}", "f32[1]"), f32t(&[1], &[16_777_216.0]));
    assert_eq!(op1(i64t(&[1], &[1 << 40]), "cast {to = i32}", "i32[1]"), i32t(&[1], &[0]));
}

#[test]
fn reshape_broadcast_transpose() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(op1(x.clone(), "reshape {shape = [-1, 2]}", "f32[3,2]"), f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!(op1(x.clone(), "transpose {perm = [1, 0]}", "f32[3,2]"), f32t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]));
    assert_eq!(
        op1(f32t(&[3], &[1.0, 2.0, 3.0]), "broadcast {shape = [2, 3]}", "f32[2,3]"),
        f32t(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    );
    assert_eq!(
        op1(f32t(&[2, 1], &[1.0, 2.0]), "broadcast {shape = [2, 2]}", "f32[2,2]"),
        f32t(&[2, 2], &[1.0, 1.0, 2.0, 2.0])
    );
    // A transpose of a transpose is the identity, also in 3-D.
    let y = f32t(&[2, 3, 4], &(0..24).map(|i| i as f32).collect::<Vec<_>>());
    let t = op1(y.clone(), "transpose {perm = [2, 0, 1]}", "f32[4,2,3]");
    assert_eq!(t.to_f64_vec()[..4], [0.0, 4.0, 8.0, 12.0]);
    assert_eq!(op1(t, "transpose {perm = [1, 2, 0]}", "f32[2,3,4]"), y);
}

#[test]
fn concat_and_split_are_inverse() {
    let a = f32t(&[2, 1], &[1.0, 2.0]);
    let b = f32t(&[2, 2], &[3.0, 4.0, 5.0, 6.0]);
    let c = op2(a.clone(), b.clone(), "concat {axis = -1}", "f32[2,3]");
    assert_eq!(c, f32t(&[2, 3], &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]));
    let parts = run(
        "(%c: f32[2,3]) -> (a: f32[2,1], b: f32[2,2])",
        "  %0, %1 = split %c {axis = 1, sizes = [1, 2]} : f32[2,1], f32[2,2]\n  return %0, %1",
        &[("c", c)],
    );
    assert_eq!(parts, vec![a, b]);
}

#[test]
fn slice_like_python() {
    let x = f32t(&[4, 6], &(0..24).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(
        op1(x.clone(), "slice {starts = [1, 0], ends = [3, 6], steps = [1, 2]}", "f32[2,3]"),
        f32t(&[2, 3], &[6.0, 8.0, 10.0, 12.0, 14.0, 16.0])
    );
    // Negative bounds count from the end; out-of-range ends clamp.
    assert_eq!(op1(x.clone(), "slice {starts = [-1, -2], ends = [100, 6]}", "f32[1,2]"), f32t(&[1, 2], &[22.0, 23.0]));
    // An empty range gives a zero-length dim.
    assert_eq!(op1(x, "slice {starts = [3, 0], ends = [1, 6]}", "f32[0,6]"), f32t(&[0, 6], &[]));
}

#[test]
fn gather_like_numpy_take() {
    let data = f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let idx = i64t(&[2, 2], &[2, 0, -1, 1]);
    assert_eq!(
        op2(data.clone(), idx, "gather", "f32[2,2,2]"),
        f32t(&[2, 2, 2], &[5.0, 6.0, 1.0, 2.0, 5.0, 6.0, 3.0, 4.0])
    );
    assert_eq!(op2(data.clone(), i32t(&[1], &[1]), "gather {axis = 1}", "f32[3,1]"), f32t(&[3, 1], &[2.0, 4.0, 6.0]));
    let err = try_op2(data, i64t(&[1], &[3]), "gather", "f32[1,2]").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Kernel);
    assert!(err.message.contains("index 3") && err.message.contains("size 3"), "{err}");
}

#[test]
fn shape_and_rank() {
    let x = f32t(&[2, 0, 5], &[]);
    assert_eq!(op1(x.clone(), "shape", "i64[3]"), i64t(&[3], &[2, 0, 5]));
    assert_eq!(op1(x, "rank", "i64[]"), i64t(&[], &[3]));
}

#[test]
fn matmul_by_hand() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    assert_eq!(op2(a, b.clone(), "matmul", "f32[2,2]"), f32t(&[2, 2], &[58.0, 64.0, 139.0, 154.0]));
    // Batched, with the rhs broadcast over the batch.
    let batch = f32t(&[2, 1, 3], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(op2(batch, b, "matmul", "f32[2,1,2]"), f32t(&[2, 1, 2], &[7.0, 8.0, 11.0, 12.0]));
    // Integers wrap.
    let big = i32t(&[1, 1], &[i32::MAX]);
    assert_eq!(op2(big.clone(), i32t(&[1, 1], &[2]), "matmul", "i32[1,1]"), i32t(&[1, 1], &[-2]));
}

#[test]
fn unary_float_ops() {
    let x = f32t(&[4], &[-1.0, 0.0, 0.5, f32::NAN]);
    let close = |op: &str, want: &[f32]| assert_close(&op1(x.clone(), op, "f32[4]"), &f32t(&[4], want), 1e-6);
    close("neg", &[1.0, -0.0, -0.5, f32::NAN]);
    close("abs", &[1.0, 0.0, 0.5, f32::NAN]);
    close("exp", &[0.36787944, 1.0, 1.6487213, f32::NAN]);
    close("log", &[f32::NAN, f32::NEG_INFINITY, -std::f32::consts::LN_2, f32::NAN]);
    close("sqrt", &[f32::NAN, 0.0, 0.70710677, f32::NAN]);
    close("tanh", &[-0.7615942, 0.0, 0.46211716, f32::NAN]);
    close("sigmoid", &[0.26894143, 0.5, 0.62245935, f32::NAN]);
    close("relu", &[0.0, 0.0, 0.5, f32::NAN]);
    close("erf", &[-0.8427008, 0.0, 0.5204999, f32::NAN]);
    // Sigmoid saturates without NaN at the extremes.
    assert_eq!(op1(f32t(&[2], &[-1000.0, 1000.0]), "sigmoid", "f32[2]"), f32t(&[2], &[0.0, 1.0]));
}

/// Elements as f64 with the sign of zero kept, for comparing signed zeros exactly.
fn signed(t: &graphc_runtime::Tensor) -> Vec<(f64, bool)> {
    t.to_f64_vec().into_iter().map(|v| (v, v.is_sign_negative())).collect()
}

#[test]
fn trigonometric_and_hyperbolic_ops() {
    use std::f64::consts::{FRAC_PI_2, FRAC_PI_3, FRAC_PI_4, FRAC_PI_6, PI};
    let x = f64t(&[6], &[-0.0, 0.5, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN]);
    let close = |op: &str, want: &[f64]| {
        let got = op1(x.clone(), op, "f64[6]");
        assert_close(&got, &f64t(&[6], want), 1e-15);
        // Odd functions keep -0; the others give their value at 0.
        assert_eq!(signed(&got)[0].1, want[0].is_sign_negative(), "{op}(-0)");
    };
    let nan = f64::NAN;
    close("sin", &[-0.0, 0.479425538604203, -0.8414709848078965, nan, nan, nan]);
    close("cos", &[1.0, 0.8775825618903728, 0.5403023058681398, nan, nan, nan]);
    close("tan", &[-0.0, 0.5463024898437905, -1.5574077246549023, nan, nan, nan]);
    close("asin", &[-0.0, FRAC_PI_6, -FRAC_PI_2, nan, nan, nan]);
    close("acos", &[FRAC_PI_2, FRAC_PI_3, PI, nan, nan, nan]);
    close("atan", &[-0.0, 0.4636476090008061, -FRAC_PI_4, FRAC_PI_2, -FRAC_PI_2, nan]);
    close("sinh", &[-0.0, 0.5210953054937474, -1.1752011936438014, f64::INFINITY, f64::NEG_INFINITY, nan]);
    close("cosh", &[1.0, 1.1276259652063807, 1.5430806348152437, f64::INFINITY, f64::INFINITY, nan]);
    close("asinh", &[-0.0, 0.48121182505960347, -0.881373587019543, f64::INFINITY, f64::NEG_INFINITY, nan]);
    close("atanh", &[-0.0, 0.5493061443340549, f64::NEG_INFINITY, nan, nan, nan]);
    let y = f32t(&[5], &[1.0, 2.0, 0.5, f32::INFINITY, f32::NAN]);
    assert_close(&op1(y, "acosh", "f32[5]"), &f32t(&[5], &[0.0, 1.316_958, f32::NAN, f32::INFINITY, f32::NAN]), 1e-6);
    // Outside the domain: NaN.
    let out = f32t(&[2], &[1.5, -2.0]);
    for op in ["asin", "acos", "atanh"] {
        assert_close(&op1(out.clone(), op, "f32[2]"), &f32t(&[2], &[f32::NAN, f32::NAN]), 0.0);
    }
}

#[test]
fn rounding_ops_keep_signed_zeros_and_round_halves_to_even() {
    let x =
        f32t(&[12], &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.7, -2.7, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let check = |op: &str, want: &[f32]| {
        let got = op1(x.clone(), op, "f32[12]");
        assert_close(&got, &f32t(&[12], want), 0.0);
        let want_signs: Vec<bool> = want.iter().map(|v| v.is_sign_negative()).collect();
        let got_signs: Vec<bool> = signed(&got).iter().map(|s| s.1).collect();
        assert_eq!(got_signs[..11], want_signs[..11], "{op}: signs");
    };
    let (inf, ninf, nan) = (f32::INFINITY, f32::NEG_INFINITY, f32::NAN);
    check("round", &[0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 3.0, -3.0, -0.0, inf, ninf, nan]);
    check("floor", &[0.0, 1.0, 2.0, -1.0, -2.0, -3.0, 2.0, -3.0, -0.0, inf, ninf, nan]);
    check("ceil", &[1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 3.0, -2.0, -0.0, inf, ninf, nan]);
    check("sign", &[1.0, 1.0, 1.0, -1.0, -1.0, -1.0, 1.0, -1.0, 0.0, 1.0, -1.0, nan]);
    // Exactly representable integers beyond 2^23 are kept.
    let big = f64t(&[2], &[4503599627370497.0, -4503599627370497.0]);
    assert_eq!(op1(big.clone(), "round", "f64[2]"), big);
    assert_eq!(op1(i64t(&[4], &[-7, 0, 3, i64::MIN]), "sign", "i64[4]"), i64t(&[4], &[-1, 0, 1, -1]));
    assert_eq!(op1(i32t(&[2], &[5, -5]), "sign", "i32[2]"), i32t(&[2], &[1, -1]));
}

#[test]
fn mod_floored_and_truncated() {
    // Integers: floored takes the divisor's sign, truncated the dividend's.
    let a = i32t(&[6], &[7, -7, 7, -7, i32::MIN, 0]);
    let b = i32t(&[6], &[3, 3, -3, -3, -1, 5]);
    assert_eq!(op2(a.clone(), b.clone(), "mod", "i32[6]"), i32t(&[6], &[1, 2, -2, -1, 0, 0]));
    assert_eq!(op2(a.clone(), b.clone(), "mod {fmod = true}", "i32[6]"), i32t(&[6], &[1, -1, 1, -1, 0, 0]));
    let e = try_op2(a, i32t(&[], &[0]), "mod", "i32[6]").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("division by zero"), "{e}");
    let e = try_op2(i64t(&[1], &[4]), i64t(&[1], &[0]), "mod {fmod = true}", "i64[1]").unwrap_err();
    assert!(e.message.contains("division by zero"), "{e}");
    // Floats, numpy's mod and fmod, with broadcasting.
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let x = f64t(&[9], &[5.5, -5.5, 5.5, -5.5, 6.0, -6.0, 1.0, -1.0, inf]);
    let y = f64t(&[9], &[2.0, 2.0, -2.0, -2.0, 3.0, -3.0, inf, inf, 2.0]);
    let floored = op2(x.clone(), y.clone(), "mod", "f64[9]");
    assert_close(&floored, &f64t(&[9], &[1.5, 0.5, -0.5, -1.5, 0.0, -0.0, 1.0, inf, nan]), 0.0);
    // A zero floored remainder has the divisor's sign.
    assert_eq!((signed(&floored)[4].1, signed(&floored)[5].1), (false, true));
    let trunc = op2(x, y, "mod {fmod = true}", "f64[9]");
    assert_close(&trunc, &f64t(&[9], &[1.5, -1.5, 1.5, -1.5, 0.0, -0.0, 1.0, -1.0, nan]), 0.0);
    assert_eq!((signed(&trunc)[4].1, signed(&trunc)[5].1), (false, true));
    let z = op2(f32t(&[2, 2], &[1.0, -1.0, 2.0, 3.0]), f32t(&[2], &[0.0, 1.5]), "mod", "f32[2,2]");
    assert_close(&z, &f32t(&[2, 2], &[f32::NAN, 0.5, f32::NAN, 0.0]), 0.0);
}

#[test]
fn unary_int_and_bool_ops() {
    let x = i32t(&[3], &[i32::MIN, -3, 4]);
    assert_eq!(op1(x.clone(), "neg", "i32[3]"), i32t(&[3], &[i32::MIN, 3, -4]));
    assert_eq!(op1(x.clone(), "abs", "i32[3]"), i32t(&[3], &[i32::MIN, 3, 4]));
    assert_eq!(op1(x, "relu", "i32[3]"), i32t(&[3], &[0, 0, 4]));
    assert_eq!(op1(boolt(&[2], &[true, false]), "not", "bool[2]"), boolt(&[2], &[false, true]));
}

#[test]
fn binary_arithmetic_broadcasts() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3], &[10.0, 20.0, 30.0]);
    assert_eq!(op2(a.clone(), b.clone(), "add", "f32[2,3]"), f32t(&[2, 3], &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]));
    assert_eq!(op2(a.clone(), b.clone(), "sub", "f32[2,3]"), f32t(&[2, 3], &[-9.0, -18.0, -27.0, -6.0, -15.0, -24.0]));
    assert_eq!(op2(a.clone(), b.clone(), "mul", "f32[2,3]"), f32t(&[2, 3], &[10.0, 40.0, 90.0, 40.0, 100.0, 180.0]));
    assert_eq!(op2(b.clone(), a.clone(), "div", "f32[2,3]"), f32t(&[2, 3], &[10.0, 10.0, 10.0, 2.5, 4.0, 5.0]));
    // Both sides broadcast: [2,1] with [1,3].
    let col = f32t(&[2, 1], &[1.0, 2.0]);
    let row = f32t(&[1, 3], &[1.0, 2.0, 3.0]);
    assert_eq!(op2(col, row, "pow", "f32[2,3]"), f32t(&[2, 3], &[1.0, 1.0, 1.0, 2.0, 4.0, 8.0]));
    // pow(x, 0) = 1 for every x, NaN included; floats divide by zero per IEEE.
    let z = f32t(&[2], &[f32::NAN, 0.0]);
    assert_eq!(op2(z.clone(), f32t(&[], &[0.0]), "pow", "f32[2]"), f32t(&[2], &[1.0, 1.0]));
    assert_eq!(op2(f32t(&[1], &[1.0]), f32t(&[1], &[0.0]), "div", "f32[1]"), f32t(&[1], &[f32::INFINITY]));
}

#[test]
fn integer_arithmetic_wraps_and_checks() {
    let a = i32t(&[4], &[-7, 7, i32::MAX, i32::MIN]);
    let b = i32t(&[4], &[2, -2, 1, -1]);
    assert_eq!(op2(a.clone(), b.clone(), "div", "i32[4]"), i32t(&[4], &[-3, -3, i32::MAX, i32::MIN]));
    assert_eq!(op2(a.clone(), b.clone(), "add", "i32[4]"), i32t(&[4], &[-5, 5, i32::MIN, i32::MAX]));
    assert_eq!(op2(a.clone(), b.clone(), "mul", "i32[4]"), i32t(&[4], &[-14, -14, i32::MAX, i32::MIN]));
    let e = try_op2(a, i32t(&[], &[0]), "div", "i32[4]").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("division by zero"), "{e}");
    assert_eq!(op2(i64t(&[2], &[3, -2]), i64t(&[2], &[4, 63]), "pow", "i64[2]"), i64t(&[2], &[81, i64::MIN]));
    let e = try_op2(i64t(&[1], &[2]), i64t(&[1], &[-1]), "pow", "i64[1]").unwrap_err();
    assert!(e.message.contains("negative exponent"), "{e}");
}

#[test]
fn max_min_propagate_nan() {
    let a = f32t(&[3], &[1.0, f32::NAN, 5.0]);
    let b = f32t(&[3], &[2.0, 0.0, f32::NAN]);
    assert_close(&op2(a.clone(), b.clone(), "max", "f32[3]"), &f32t(&[3], &[2.0, f32::NAN, f32::NAN]), 0.0);
    assert_close(&op2(a, b, "min", "f32[3]"), &f32t(&[3], &[1.0, f32::NAN, f32::NAN]), 0.0);
    assert_eq!(op2(i64t(&[2], &[1, 9]), i64t(&[2], &[5, 5]), "max", "i64[2]"), i64t(&[2], &[5, 9]));
}

#[test]
fn logic_and_comparisons() {
    let p = boolt(&[4], &[true, true, false, false]);
    let q = boolt(&[4], &[true, false, true, false]);
    assert_eq!(op2(p.clone(), q.clone(), "and", "bool[4]"), boolt(&[4], &[true, false, false, false]));
    assert_eq!(op2(p.clone(), q.clone(), "or", "bool[4]"), boolt(&[4], &[true, true, true, false]));
    assert_eq!(op2(p, q, "equal", "bool[4]"), boolt(&[4], &[true, false, false, true]));
    let a = f32t(&[3], &[1.0, 2.0, f32::NAN]);
    let b = f32t(&[3], &[2.0, 2.0, f32::NAN]);
    let cmp = |op: &str, want: &[bool]| assert_eq!(op2(a.clone(), b.clone(), op, "bool[3]"), boolt(&[3], want), "{op}");
    cmp("equal", &[false, true, false]);
    cmp("not_equal", &[true, false, true]);
    cmp("less", &[true, false, false]);
    cmp("less_equal", &[true, true, false]);
    cmp("greater", &[false, false, false]);
    cmp("greater_equal", &[false, true, false]);
}

#[test]
fn select_broadcasts_three_ways() {
    let out = run(
        "(%c: bool[2,1], %a: f32[3], %b: f32[]) -> (y: f32[2,3])",
        "  %0 = select %c, %a, %b : f32[2,3]\n  return %0",
        &[("c", boolt(&[2, 1], &[true, false])), ("a", f32t(&[3], &[1.0, 2.0, 3.0])), ("b", f32t(&[], &[-1.0]))],
    );
    assert_eq!(out[0], f32t(&[2, 3], &[1.0, 2.0, 3.0, -1.0, -1.0, -1.0]));
}

#[test]
fn reductions_by_hand() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(op1(x.clone(), "reduce_sum {axes = [1]}", "f32[2]"), f32t(&[2], &[6.0, 15.0]));
    assert_eq!(
        op1(x.clone(), "reduce_sum {axes = [0], keep_dims = true}", "f32[1,3]"),
        f32t(&[1, 3], &[5.0, 7.0, 9.0])
    );
    assert_eq!(op1(x.clone(), "reduce_mean {axes = [0, 1]}", "f32[]"), f32t(&[], &[3.5]));
    assert_eq!(op1(x.clone(), "reduce_max {axes = [-1]}", "f32[2]"), f32t(&[2], &[3.0, 6.0]));
    assert_eq!(op1(x.clone(), "reduce_min {axes = [0]}", "f32[3]"), f32t(&[3], &[1.0, 2.0, 3.0]));
    assert_eq!(op1(x.clone(), "reduce_sum {axes = []}", "f32[2,3]"), x);
    // Middle axis of a 3-D tensor.
    let y = i32t(&[2, 2, 2], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(op1(y.clone(), "reduce_sum {axes = [1]}", "i32[2,2]"), i32t(&[2, 2], &[4, 6, 12, 14]));
    assert_eq!(op1(y, "reduce_max {axes = [0, 2]}", "i32[2]"), i32t(&[2], &[6, 8]));
    // NaN propagates through max.
    let n = f32t(&[2], &[f32::NAN, 1.0]);
    assert_close(&op1(n, "reduce_max {axes = [0]}", "f32[]"), &f32t(&[], &[f32::NAN]), 0.0);
}

#[test]
fn reductions_of_empty_extents() {
    let e = f32t(&[2, 0], &[]);
    assert_eq!(op1(e.clone(), "reduce_sum {axes = [1]}", "f32[2]"), f32t(&[2], &[0.0, 0.0]));
    assert_close(&op1(e.clone(), "reduce_mean {axes = [1]}", "f32[2]"), &f32t(&[2], &[f32::NAN, f32::NAN]), 0.0);
    assert_eq!(op1(e.clone(), "reduce_max {axes = [1]}", "f32[2]"), f32t(&[2], &[f32::NEG_INFINITY; 2]));
    assert_eq!(op1(e, "reduce_min {axes = [1]}", "f32[2]"), f32t(&[2], &[f32::INFINITY; 2]));
    assert_eq!(op1(i64t(&[0], &[]), "reduce_max {axes = [0]}", "i64[]"), i64t(&[], &[i64::MIN]));
}

#[test]
fn reduce_prod_by_hand() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(op1(x.clone(), "reduce_prod {axes = [1]}", "f32[2]"), f32t(&[2], &[6.0, 120.0]));
    assert_eq!(
        op1(x.clone(), "reduce_prod {axes = [0], keep_dims = true}", "f32[1,3]"),
        f32t(&[1, 3], &[4.0, 10.0, 18.0])
    );
    assert_eq!(op1(x.clone(), "reduce_prod {axes = [0, 1]}", "f32[]"), f32t(&[], &[720.0]));
    assert_eq!(op1(x.clone(), "reduce_prod {axes = []}", "f32[2,3]"), x);
    // Empty extents give 1; integers wrap; NaN and infinities propagate; inf * 0 is NaN.
    assert_eq!(op1(f32t(&[2, 0], &[]), "reduce_prod {axes = [1]}", "f32[2]"), f32t(&[2], &[1.0, 1.0]));
    assert_eq!(op1(i32t(&[2], &[1 << 16, 1 << 16]), "reduce_prod {axes = [0]}", "i32[]"), i32t(&[], &[0]));
    assert_eq!(op1(i64t(&[3], &[-2, 3, 4]), "reduce_prod {axes = [0]}", "i64[]"), i64t(&[], &[-24]));
    let s = f32t(&[4, 2], &[f32::NAN, 1.0, f32::INFINITY, -2.0, f32::INFINITY, 0.0, -0.0, 3.0]);
    assert_close(
        &op1(s, "reduce_prod {axes = [1]}", "f32[4]"),
        &f32t(&[4], &[f32::NAN, f32::NEG_INFINITY, f32::NAN, -0.0]),
        0.0,
    );
    // Accumulated in f64: the intermediate product 1e30 * 1e30 overflows f32, not the result.
    let big = f32t(&[3], &[1e30, 1e30, 1e-30]);
    assert_close(&op1(big, "reduce_prod {axes = [0]}", "f32[]"), &f32t(&[], &[1e30]), 1e-6);
}

#[test]
fn softmax_by_hand() {
    let x = f64t(&[2, 2], &[0.0, std::f64::consts::LN_2, 1000.0, 1000.0]);
    assert_close(&op1(x, "softmax", "f64[2,2]"), &f64t(&[2, 2], &[1.0 / 3.0, 2.0 / 3.0, 0.5, 0.5]), 1e-12);
    // Along axis 0.
    let y = f32t(&[2, 1], &[0.0, 0.0]);
    assert_eq!(op1(y, "softmax {axis = 0}", "f32[2,1]"), f32t(&[2, 1], &[0.5, 0.5]));
}

#[test]
fn conv_by_hand() {
    // 1x1x3x3 input, 1x1x2x2 filter of ones: each output sums a 2x2 block.
    let x = f32t(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let w = f32t(&[1, 1, 2, 2], &[1.0; 4]);
    assert_eq!(op2(x.clone(), w.clone(), "conv", "f32[1,1,2,2]"), f32t(&[1, 1, 2, 2], &[12.0, 16.0, 24.0, 28.0]));
    // Padding 1 on every side, stride 2: corners see one 2x2 block each, padded with zeros.
    assert_eq!(
        op2(x.clone(), w.clone(), "conv {strides = [2, 2], pads = [1, 1, 1, 1]}", "f32[1,1,2,2]"),
        f32t(&[1, 1, 2, 2], &[1.0, 5.0, 11.0, 28.0])
    );
    // Dilation 2 on a 2x2 filter taps the four corners.
    assert_eq!(op2(x, w, "conv {dilations = [2, 2]}", "f32[1,1,1,1]"), f32t(&[1, 1, 1, 1], &[20.0]));
    // Two groups: each output channel sees only its own input channel.
    let x2 = f32t(&[1, 2, 1, 1], &[3.0, 5.0]);
    let w2 = f32t(&[2, 1, 1, 1], &[10.0, 100.0]);
    assert_eq!(op2(x2, w2, "conv {group = 2}", "f32[1,2,1,1]"), f32t(&[1, 2, 1, 1], &[30.0, 500.0]));
}

#[test]
fn pooling_by_hand() {
    let x = f32t(&[1, 1, 4, 4], &(1..=16).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(
        op1(x.clone(), "max_pool {kernel = [2, 2], strides = [2, 2]}", "f32[1,1,2,2]"),
        f32t(&[1, 1, 2, 2], &[6.0, 8.0, 14.0, 16.0])
    );
    assert_eq!(
        op1(x.clone(), "avg_pool {kernel = [2, 2], strides = [2, 2]}", "f32[1,1,2,2]"),
        f32t(&[1, 1, 2, 2], &[3.5, 5.5, 11.5, 13.5])
    );
    // Padding: the corner window holds 1, 2, 5, 6 and five padding positions.
    let corner = |attrs: &str| op1(x.clone(), &format!("avg_pool {attrs}"), "f32[1,1,4,4]").to_f64_vec()[0];
    assert_eq!(corner("{kernel = [3, 3], pads = [1, 1, 1, 1]}"), (14.0f32 / 4.0) as f64);
    assert_eq!(corner("{kernel = [3, 3], pads = [1, 1, 1, 1], count_include_pad = true}"), (14.0f32 / 9.0) as f64);
    // ceil_mode keeps the last, partial window: 5 wide, kernel 2, stride 2 -> 3 outputs.
    let y = f32t(&[1, 1, 1, 5], &[1.0, 9.0, 2.0, 8.0, 7.0]);
    assert_eq!(
        op1(y.clone(), "max_pool {kernel = [1, 2], strides = [1, 2], ceil_mode = true}", "f32[1,1,1,3]"),
        f32t(&[1, 1, 1, 3], &[9.0, 8.0, 7.0])
    );
    assert_eq!(
        op1(y, "max_pool {kernel = [1, 2], strides = [1, 2]}", "f32[1,1,1,2]"),
        f32t(&[1, 1, 1, 2], &[9.0, 8.0])
    );
}

#[test]
fn max_pool_indices_point_into_the_input() {
    let x = f32t(&[1, 2, 2, 2], &[1.0, 4.0, 3.0, 2.0, 5.0, 5.0, 0.0, 9.0]);
    let out = run(
        "(%x: f32[1,2,2,2]) -> (v: f32[1,2,1,1], i: i64[1,2,1,1])",
        "  %v, %i = max_pool %x {kernel = [2, 2], indices = true} : f32[1,2,1,1], i64[1,2,1,1]\n  return %v, %i",
        &[("x", x)],
    );
    assert_eq!(out[0], f32t(&[1, 2, 1, 1], &[4.0, 9.0]));
    assert_eq!(out[1], i64t(&[1, 2, 1, 1], &[1, 7]), "flat offsets into the whole input");
}

/// A stride near 2^62 with padding near i64::MAX: the geometry fits 64 bits, but a window's
/// start times its stride does not fit an i64 (this overflowed).
#[test]
fn windows_far_into_the_padding_are_computed_without_overflow() {
    let text = "graph @g(%x: f32[1,1,5]) -> (y: f32[1,1,4], a: f32[1,1,4]) {
  %y = max_pool %x {kernel = [1], pads = [9223372036854775807, 9223372036854775797], strides = [4611686018427387905], ceil_mode = true} : f32[1,1,4]
  %a = avg_pool %x {kernel = [1], pads = [9223372036854775807, 9223372036854775797], strides = [4611686018427387905], ceil_mode = true} : f32[1,1,4]
  return %y, %a
}";
    let m = graphc_ir::parse_module(text).unwrap_or_else(|d| panic!("{d:?}"));
    let s = graphc_runtime::Session::new(m, graphc_runtime::SessionOptions::default()).unwrap();
    let x = graphc_runtime::Tensor::F32(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[1, 1, 5]), 1.0));
    let out = s.run(graphc_runtime::RunRequest::new("g").feed("x", x)).unwrap();
    assert_eq!(out.tensor(0).unwrap().shape(), &[1, 1, 4]);
    assert_eq!(out.tensor(1).unwrap().shape(), &[1, 1, 4]);
}

/// `top_k` on every vector of four elements drawn from {-1, 0, 1, NaN}, every k, both
/// directions, against the definition: element i comes before j when it ranks higher (lower
/// without `largest`; NaN above every number) or ties with it at a lower index.
#[test]
fn top_k_on_every_small_vector() {
    let values = [-1.0f32, 0.0, 1.0, f32::NAN];
    let rank = |v: f32| if v.is_nan() { 2.0 } else { v };
    for code in 0..256 {
        let x: Vec<f32> = (0..4).map(|i| values[(code >> (2 * i)) & 3]).collect();
        for largest in [true, false] {
            let before = |i: usize, j: usize| {
                let (a, b) = (rank(x[i]), rank(x[j]));
                (if largest { a > b } else { a < b }) || (a == b && i < j)
            };
            let mut order: Vec<usize> = (0..4).collect();
            order.sort_by_key(|&i| (0..4).filter(|&j| before(j, i)).count());
            for k in 0..=4 {
                let out = run(
                    &format!("(%x: f32[4]) -> (v: f32[{k}], i: i64[{k}])"),
                    &format!(
                        "  %v, %i = top_k %x {{k = {k}, axis = 0, largest = {largest}}} : f32[{k}], i64[{k}]\n  return %v, %i"
                    ),
                    &[("x", f32t(&[4], &x))],
                );
                let want_v: Vec<f32> = order[..k].iter().map(|&i| x[i]).collect();
                let want_i: Vec<i64> = order[..k].iter().map(|&i| i as i64).collect();
                assert!(out[0].bit_identical(&f32t(&[k], &want_v)), "{x:?} k={k} largest={largest}: {:?}", out[0]);
                assert_eq!(out[1], i64t(&[k], &want_i), "{x:?} k={k} largest={largest}");
            }
        }
    }
}
