//! Helpers shared by the runtime's tests: graphs from text, tensors from slices.
#![allow(dead_code)]

use graphc_ir::parse_module;
use graphc_runtime::{RunError, RunRequest, Session, SessionOptions, Tensor};
use ndarray::{ArrayD, IxDyn};

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

pub fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::I32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::I64(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::Bool(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).unwrap())
}

/// A session on module text; panics with the diagnostics if it does not parse.
pub fn session(src: &str) -> Session {
    session_with(src, SessionOptions::default())
}

pub fn session_with(src: &str, options: SessionOptions) -> Session {
    let m = parse_module(src).unwrap_or_else(|d| panic!("{src}\n{d:?}"));
    Session::new(m, options).unwrap()
}

/// Runs `graph @g SIG { BODY }` on the feeds and returns every output, or the error.
pub fn try_run(sig: &str, body: &str, feeds: &[(&str, Tensor)]) -> Result<Vec<Tensor>, RunError> {
    let src = format!("graph @g{sig} {{\n{body}\n}}\n");
    let s = session(&src);
    let mut req = RunRequest::new("g");
    for (n, t) in feeds {
        req = req.feed(*n, t.clone());
    }
    let out = s.run(req)?;
    Ok((0..out.values.len()).map(|i| out.tensor(i).expect("tensor outputs").clone()).collect())
}

pub fn run(sig: &str, body: &str, feeds: &[(&str, Tensor)]) -> Vec<Tensor> {
    try_run(sig, body, feeds).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a graph of one op on one fed operand `%x` and returns its single result.
pub fn op1(x: Tensor, op: &str, out: &str) -> Tensor {
    let sig = format!("(%x: {}) -> (y: {out})", x.ty());
    let (name, attrs) = op.split_once(' ').unwrap_or((op, ""));
    run(&sig, &format!("  %0 = {name} %x {attrs} : {out}\n  return %0"), &[("x", x)]).remove(0)
}

/// Runs a graph of one op on fed operands `%a`, `%b` and returns its single result.
pub fn op2(a: Tensor, b: Tensor, op: &str, out: &str) -> Tensor {
    try_op2(a, b, op, out).unwrap_or_else(|e| panic!("{e}"))
}

pub fn try_op2(a: Tensor, b: Tensor, op: &str, out: &str) -> Result<Tensor, RunError> {
    let sig = format!("(%a: {}, %b: {}) -> (y: {out})", a.ty(), b.ty());
    let (name, attrs) = op.split_once(' ').unwrap_or((op, ""));
    try_run(&sig, &format!("  %0 = {name} %a, %b {attrs} : {out}\n  return %0"), &[("a", a), ("b", b)])
        .map(|mut v| v.remove(0))
}

/// Floats equal within `tol` (relative to the larger magnitude, absolute below 1).
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.ty(), want.ty(), "types differ: got {got}, want {want}");
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "element {i}: got {g}, want {w}\n got {got}\nwant {want}");
    }
}
