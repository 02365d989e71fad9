//! The training ops (SPEC.md's op reference: matmul's transpose flags, scatter_add, pad, the
//! conv and pooling gradients, the losses, the optimizer updates, grad): hand-computed cases,
//! each gradient kernel checked as the adjoint of its forward op on random geometries, and the
//! optimizers against their formulas over several steps.

mod common;
use common::*;
use graphc_ir::window::Window;
use graphc_ir::{Attr, Attrs, DType, Op, TensorType};
use graphc_runtime::kernels::{self, KernelError};
use graphc_runtime::random::SplitMix64;
use graphc_runtime::{ErrorKind, RunRequest, Tensor};
use std::sync::Arc;

fn attrs(list: &[(&str, Attr)]) -> Attrs {
    let mut a = Attrs::new();
    for (n, v) in list {
        a.set(*n, v.clone());
    }
    a
}

fn ints(v: &[usize]) -> Attr {
    Attr::Ints(v.iter().map(|&x| x as i64).collect())
}

fn ty(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape.iter().map(|&d| d as u64).collect::<Vec<_>>())
}

fn eval(op: Op, a: &Attrs, inputs: &[&Tensor], result: &TensorType) -> Result<Tensor, KernelError> {
    kernels::eval(op, a, inputs, std::slice::from_ref(result)).map(|mut v| v.remove(0))
}

/// Seeded f64 tensors with elements in [-1, 1).
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }
    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn f64s(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        f64t(shape, &(0..n).map(|_| self.0.next_f64() * 2.0 - 1.0).collect::<Vec<_>>())
    }
}

/// `<a, b>`, the sum of elementwise products.
fn dot(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.to_f64_vec().iter().zip(b.to_f64_vec()).map(|(x, y)| x * y).sum()
}

fn assert_close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() <= 1e-10 * (1.0 + a.abs().max(b.abs())), "{what}: {a} != {b}");
}

fn assert_all_close(got: &Tensor, want: &[f64], tol: f64) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{got:?}");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "element {i}: {a} != {b} in {got:?}");
    }
}

// ---- matmul's transpose flags -------------------------------------------------------------

/// `x` with its last two axes swapped, materialized.
fn swapped(x: &Tensor) -> Tensor {
    let r = x.shape().len();
    let mut perm: Vec<i64> = (0..r as i64).collect();
    perm.swap(r - 2, r - 1);
    kernels::eval(Op::Transpose, &attrs(&[("perm", Attr::Ints(perm))]), &[x], &[]).unwrap().remove(0)
}

#[test]
fn matmul_flags_read_the_operands_transposed() {
    // By hand: a^T b with a = [[1, 2], [3, 4], [5, 6]] (3x2) and b = [[1], [0], [2]] (3x1).
    let a = f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3, 1], &[1.0, 0.0, 2.0]);
    let out = run(
        "(%a: f32[3,2], %b: f32[3,1]) -> (y: f32[2,1])",
        "  %0 = matmul %a, %b {transpose_a = true} : f32[2,1]\n  return %0",
        &[("a", a.clone()), ("b", b.clone())],
    );
    assert_eq!(out[0], f32t(&[2, 1], &[11.0, 14.0]));
    // a b'^T with b' = b^T, both flags.
    let out = run(
        "(%a: f32[3,2], %b: f32[1,3]) -> (y: f32[2,1])",
        "  %0 = matmul %a, %b {transpose_a = true, transpose_b = true} : f32[2,1]\n  return %0",
        &[("a", a), ("b", f32t(&[1, 3], &[1.0, 0.0, 2.0]))],
    );
    assert_eq!(out[0], f32t(&[2, 1], &[11.0, 14.0]));

    // Every flag combination against explicit transposes, with batch broadcasting, per dtype.
    let mut rng = Rng::new(1);
    for case in 0..40 {
        let (m, k, n) = (rng.range(1, 4), rng.range(1, 4), rng.range(1, 4));
        let batch_a: Vec<usize> = if case % 3 == 0 { vec![] } else { vec![rng.range(1, 2), 3] };
        let batch_b: Vec<usize> = if case % 2 == 0 { vec![3] } else { vec![] };
        let (ta, tb) = (case % 4 == 1 || case % 4 == 3, case % 4 >= 2);
        let a_shape: Vec<usize> = batch_a.iter().copied().chain(if ta { [k, m] } else { [m, k] }).collect();
        let b_shape: Vec<usize> = batch_b.iter().copied().chain(if tb { [n, k] } else { [k, n] }).collect();
        let batch = if batch_a.len() >= batch_b.len() { batch_a.clone() } else { batch_b.clone() };
        let out: Vec<usize> = batch.iter().copied().chain([m, n]).collect();
        for dtype in [DType::F32, DType::F64, DType::I32, DType::I64] {
            let (a, b) = (rng.f64s(&a_shape), rng.f64s(&b_shape));
            let scale = |t: &Tensor| {
                let t = Tensor::F64(
                    ndarray::ArrayD::from_shape_vec(
                        t.shape(),
                        t.to_f64_vec().iter().map(|x| (x * 8.0).round()).collect(),
                    )
                    .unwrap(),
                );
                kernels::cast(&t, dtype)
            };
            let (a, b) = (scale(&a), scale(&b));
            let flags = attrs(&[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))]);
            let got = eval(Op::MatMul, &flags, &[&a, &b], &ty(dtype, &out)).unwrap();
            let (ea, eb) = (if ta { swapped(&a) } else { a.clone() }, if tb { swapped(&b) } else { b.clone() });
            let want = eval(Op::MatMul, &Attrs::new(), &[&ea, &eb], &ty(dtype, &out)).unwrap();
            assert!(got.bit_identical(&want), "case {case} {dtype}: {got:?} != {want:?}");
        }
    }
}

#[test]
fn matmul_flags_change_the_type_rule() {
    let m = graphc_ir::parse_module(
        "graph @g(%a: f32[4,2], %b: f32[3,4]) -> (y: f32[2,3]) {\n  %0 = matmul %a, %b {transpose_a = true, transpose_b = true} : f32[2,3]\n  return %0\n}\n",
    )
    .unwrap();
    assert!(graphc_ir::verify_module(&m).is_empty());
    let e = graphc_ir::parse_module(
        "graph @g(%a: f32[4,2], %b: f32[4,3]) -> (y: f32[2,3]) {\n  %0 = matmul %a, %b {transpose_b = true} : f32[2,3]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("inner dims differ"), "{e:?}");
    // The default is left out of canonical text.
    let m = graphc_ir::parse_module(
        "graph @g(%a: f32[2,4], %b: f32[4,3]) -> (y: f32[2,3]) {\n  %0 = matmul %a, %b {transpose_a = false} : f32[2,3]\n  return %0\n}\n",
    )
    .unwrap();
    assert!(!graphc_ir::print_module(&m).contains("transpose_a"));
}

// ---- scatter_add and pad ------------------------------------------------------------------

#[test]
fn scatter_add_by_hand() {
    let base = f32t(&[4, 2], &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    let idx = i64t(&[3], &[1, 3, 1]);
    let upd = f32t(&[3, 2], &[1.0, 2.0, 10.0, 20.0, 100.0, 200.0]);
    let out = run(
        "(%b: f32[4,2], %i: i64[3], %u: f32[3,2]) -> (y: f32[4,2])",
        "  %0 = scatter_add %b, %i, %u : f32[4,2]\n  return %0",
        &[("b", base.clone()), ("i", idx), ("u", upd)],
    );
    assert_eq!(out[0], f32t(&[4, 2], &[0.0, 0.0, 102.0, 203.0, 0.0, 0.0, 10.0, 20.0]));
    // Along axis 1 with i32 indices of rank 2 and a negative index.
    let base = i32t(&[2, 3], &[0; 6]);
    let idx = i32t(&[2, 2], &[0, -1, 2, 0]);
    let upd = i32t(&[2, 2, 2], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let out = run(
        "(%b: i32[2,3], %i: i32[2,2], %u: i32[2,2,2]) -> (y: i32[2,3])",
        "  %0 = scatter_add %b, %i, %u {axis = 1} : i32[2,3]\n  return %0",
        &[("b", base), ("i", idx), ("u", upd)],
    );
    // Row 0 gets updates [1, 2, 3, 4] at columns [0, 2, 2, 0]; row 1 [5, 6, 7, 8].
    assert_eq!(out[0], i32t(&[2, 3], &[5, 0, 5, 13, 0, 13]));
    // Integers wrap, as add does.
    let out = eval(
        Op::ScatterAdd,
        &Attrs::new(),
        &[&i32t(&[1], &[i32::MAX]), &i64t(&[1], &[0]), &i32t(&[1], &[1])],
        &ty(DType::I32, &[1]),
    )
    .unwrap();
    assert_eq!(out, i32t(&[1], &[i32::MIN]));
}

#[test]
fn scatter_add_is_the_adjoint_of_gather() {
    let mut rng = Rng::new(2);
    for case in 0..30 {
        let rank = rng.range(1, 3);
        let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 4)).collect();
        let axis = rng.below(rank);
        let idx_shape: Vec<usize> = (0..rng.range(0, 2)).map(|_| rng.range(1, 5)).collect();
        let count: usize = idx_shape.iter().product();
        // Few distinct values, so indices repeat; some negative.
        let dim = shape[axis] as i64;
        let idx: Vec<i64> =
            (0..count).map(|_| rng.below(dim as usize) as i64 - if rng.below(3) == 0 { dim } else { 0 }).collect();
        let idx = i64t(&idx_shape, &idx);
        let mut gathered: Vec<usize> = shape[..axis].to_vec();
        gathered.extend(&idx_shape);
        gathered.extend(&shape[axis + 1..]);
        let (x, u) = (rng.f64s(&shape), rng.f64s(&gathered));
        let a = attrs(&[("axis", Attr::Int(axis as i64))]);
        let g = eval(Op::Gather, &a, &[&x, &idx], &ty(DType::F64, &gathered)).unwrap();
        let zeros = Tensor::zeros(&ty(DType::F64, &shape)).unwrap();
        let s = eval(Op::ScatterAdd, &a, &[&zeros, &idx, &u], &ty(DType::F64, &shape)).unwrap();
        assert_close(dot(&g, &u), dot(&x, &s), &format!("case {case}"));
        // With a base, the base is added once.
        let s2 = eval(Op::ScatterAdd, &a, &[&x, &idx, &u], &ty(DType::F64, &shape)).unwrap();
        let want: Vec<f64> = x.to_f64_vec().iter().zip(s.to_f64_vec()).map(|(a, b)| a + b).collect();
        assert_all_close(&s2, &want, 1e-15);
    }
}

#[test]
fn scatter_add_index_out_of_range_names_it() {
    let e = try_run(
        "(%b: f32[4,2], %i: i64[3], %u: f32[3,2]) -> (y: f32[4,2])",
        "  %0 = scatter_add %b, %i, %u : f32[4,2]\n  return %0",
        &[("b", f32t(&[4, 2], &[0.0; 8])), ("i", i64t(&[3], &[1, 4, 0])), ("u", f32t(&[3, 2], &[0.0; 6]))],
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("scatter_add index 4 (element 1 of the indices)"), "{e}");
    let e = eval(
        Op::ScatterAdd,
        &Attrs::new(),
        &[&f32t(&[4], &[0.0; 4]), &i32t(&[1], &[-5]), &f32t(&[1], &[1.0])],
        &ty(DType::F32, &[4]),
    )
    .unwrap_err();
    assert!(e.0.contains("index -5"), "{e}");
}

#[test]
fn pad_by_hand() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = run(
        "(%x: f32[2,3], %v: f32[]) -> (y: f32[3,7])",
        "  %0 = pad %x, %v {low = [1, 0], high = [0, 2], interior = [0, 1]} : f32[3,7]\n  return %0",
        &[("x", x), ("v", f32t(&[], &[-1.0]))],
    );
    #[rustfmt::skip]
    let want = [
        -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0,
        1.0, -1.0, 2.0, -1.0, 3.0, -1.0, -1.0,
        4.0, -1.0, 5.0, -1.0, 6.0, -1.0, -1.0,
    ];
    assert_eq!(out[0], f32t(&[3, 7], &want));
    // Bool and integer inputs; a dim of size 0 pads to low + high.
    let out = run(
        "(%x: bool[2], %v: bool[]) -> (y: bool[5])",
        "  %0 = pad %x, %v {low = [1], high = [1], interior = [1]} : bool[5]\n  return %0",
        &[("x", boolt(&[2], &[true, true])), ("v", boolt(&[], &[false]))],
    );
    assert_eq!(out[0], boolt(&[5], &[false, true, false, true, false]));
    let out = run(
        "(%x: i64[0,2], %v: i64[]) -> (y: i64[3,2])",
        "  %0 = pad %x, %v {low = [1, 0], high = [2, 0], interior = [5, 0]} : i64[3,2]\n  return %0",
        &[("x", i64t(&[0, 2], &[])), ("v", i64t(&[], &[7]))],
    );
    assert_eq!(out[0], i64t(&[3, 2], &[7; 6]));
}

#[test]
fn pad_is_the_adjoint_of_slice() {
    // slice {starts, ends, steps} keeps x[start + j*step]; pad with low = start,
    // interior = step - 1 and high what is left puts y[j] back there.
    let mut rng = Rng::new(3);
    for case in 0..30 {
        let rank = rng.range(1, 3);
        let shape: Vec<usize> = (0..rank).map(|_| rng.range(1, 7)).collect();
        let (mut starts, mut ends, mut steps, mut out) = (vec![], vec![], vec![], vec![]);
        let (mut low, mut high, mut interior) = (vec![], vec![], vec![]);
        for &d in &shape {
            let start = rng.below(d);
            let end = rng.range(start, d);
            let step = rng.range(1, 3);
            let n = (end - start).div_ceil(step);
            starts.push(start);
            ends.push(end);
            steps.push(step);
            out.push(n);
            low.push(start);
            interior.push(step - 1);
            high.push(if n == 0 { d - start } else { d - (start + (n - 1) * step + 1) });
        }
        let x = rng.f64s(&shape);
        let y = rng.f64s(&out);
        let s = eval(
            Op::Slice,
            &attrs(&[("starts", ints(&starts)), ("ends", ints(&ends)), ("steps", ints(&steps))]),
            &[&x],
            &ty(DType::F64, &out),
        )
        .unwrap();
        let p = eval(
            Op::Pad,
            &attrs(&[("low", ints(&low)), ("high", ints(&high)), ("interior", ints(&interior))]),
            &[&y, &f64t(&[], &[0.0])],
            &ty(DType::F64, &shape),
        )
        .unwrap();
        assert_close(dot(&s, &y), dot(&x, &p), &format!("case {case}"));
    }
}

// ---- conv and pooling gradients -----------------------------------------------------------

/// A random conv geometry: input, weight and output shapes with the attributes.
fn conv_case(rng: &mut Rng) -> (Vec<usize>, Vec<usize>, Vec<usize>, Attrs) {
    let k = rng.range(1, 2);
    let group = rng.range(1, 3);
    let (c, m) = (group * rng.range(1, 2), group * rng.range(1, 2));
    let n = rng.range(1, 2);
    let kernel: Vec<usize> = (0..k).map(|_| rng.range(1, 3)).collect();
    let strides: Vec<usize> = (0..k).map(|_| rng.range(1, 3)).collect();
    let dilations: Vec<usize> = (0..k).map(|_| rng.range(1, 2)).collect();
    let pads: Vec<usize> = (0..2 * k).map(|_| rng.below(3)).collect();
    let dims: Vec<usize> = (0..k)
        .map(|i| {
            let span = dilations[i] * (kernel[i] - 1) + 1;
            (span + rng.below(5)).saturating_sub(pads[i] + pads[k + i]).max(1)
        })
        .collect();
    let a = attrs(&[
        ("strides", ints(&strides)),
        ("pads", ints(&pads)),
        ("dilations", ints(&dilations)),
        ("group", Attr::Int(group as i64)),
    ]);
    let win = Window::from_attrs(&a, kernel.iter().map(|&x| x as u64).collect()).unwrap();
    let x: Vec<usize> = [n, c].into_iter().chain(dims.iter().copied()).collect();
    let w: Vec<usize> = [m, c / group].into_iter().chain(kernel.iter().copied()).collect();
    let spatial = win.output_dims(&dims.iter().map(|&d| d as u64).collect::<Vec<_>>());
    let y: Vec<usize> = match spatial {
        Ok(s) => [n, m].into_iter().chain(s.iter().map(|&d| d as usize)).collect(),
        // A window wider than the padded input: draw again.
        Err(_) => return conv_case(rng),
    };
    (x, w, y, a)
}

#[test]
fn conv_gradients_are_the_adjoints_of_conv() {
    let mut rng = Rng::new(4);
    for case in 0..60 {
        let (xs, ws, ys, a) = conv_case(&mut rng);
        let (x, w, dy) = (rng.f64s(&xs), rng.f64s(&ws), rng.f64s(&ys));
        let y = eval(Op::Conv, &a, &[&x, &w], &ty(DType::F64, &ys)).unwrap();
        let mut ga = a.clone();
        ga.set("shape", ints(&xs));
        let dx = eval(Op::ConvInputGrad, &ga, &[&dy, &w], &ty(DType::F64, &xs)).unwrap();
        ga.set("shape", ints(&ws));
        let dw = eval(Op::ConvFilterGrad, &ga, &[&x, &dy], &ty(DType::F64, &ws)).unwrap();
        let what = format!("case {case}: x {xs:?} w {ws:?} y {ys:?} {a:?}");
        assert_close(dot(&y, &dy), dot(&x, &dx), &format!("input gradient, {what}"));
        assert_close(dot(&y, &dy), dot(&w, &dw), &format!("filter gradient, {what}"));
    }
}

#[test]
fn conv_gradients_by_hand() {
    // 1-D, stride 2, one channel: x = [x0..x4], w = [w0, w1], y[o] = x[2o] w0 + x[2o+1] w1,
    // o in 0..2 (x4 reached by no window).
    let dy = f32t(&[1, 1, 2], &[1.0, 10.0]);
    let w = f32t(&[1, 1, 2], &[2.0, 3.0]);
    let x = f32t(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let out = run(
        "(%dy: f32[1,1,2], %w: f32[1,1,2], %x: f32[1,1,5]) -> (dx: f32[1,1,5], dw: f32[1,1,2])",
        "  %0 = conv_input_grad %dy, %w {strides = [2], shape = [1, 1, 5]} : f32[1,1,5]\n  %1 = conv_filter_grad %x, %dy {strides = [2], shape = [1, 1, 2]} : f32[1,1,2]\n  return %0, %1",
        &[("dy", dy), ("w", w), ("x", x)],
    );
    assert_eq!(out[0], f32t(&[1, 1, 5], &[2.0, 3.0, 20.0, 30.0, 0.0]));
    assert_eq!(out[1], f32t(&[1, 1, 2], &[1.0 + 30.0, 2.0 + 40.0]));
}

#[test]
fn conv_gradient_type_rules_check_the_forward_shapes() {
    let bad = graphc_ir::parse_module(
        "graph @g(%dy: f32[1,4,3,3], %w: f32[4,2,3,3]) -> (dx: f32[1,2,6,6]) {\n  %0 = conv_input_grad %dy, %w {shape = [1, 2, 6, 6]} : f32[1,2,6,6]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{bad:?}").contains("gives f32[1,4,4,4], but the gradient operand is f32[1,4,3,3]"), "{bad:?}");
    // A trailing row no window reaches: 6 with stride 2 and kernel 3 gives 2, as 5 does.
    let ok = graphc_ir::parse_module(
        "graph @g(%dy: f32[1,4,2,2], %w: f32[4,2,3,3]) -> (dx: f32[1,2,6,6]) {\n  %0 = conv_input_grad %dy, %w {strides = [2, 2], shape = [1, 2, 6, 6]} : f32[1,2,6,6]\n  return %0\n}\n",
    );
    assert!(ok.is_ok(), "{ok:?}");
    let bad = graphc_ir::parse_module(
        "graph @g(%x: f32[1,4,5,5], %dy: f32[1,4,3,3]) -> (dw: f32[4,2,3,3]) {\n  %0 = conv_filter_grad %x, %dy {shape = [4, 2, 3, 3]} : f32[4,2,3,3]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{bad:?}").contains("do not fit 1 group(s)"), "{bad:?}");
}

#[test]
fn avg_pool_grad_is_the_adjoint_of_avg_pool() {
    let mut rng = Rng::new(5);
    for case in 0..60 {
        let k = rng.range(1, 2);
        let kernel: Vec<usize> = (0..k).map(|_| rng.range(1, 3)).collect();
        let pads: Vec<usize> = (0..2 * k).map(|i| rng.below(kernel[i % k])).collect();
        let mut list = vec![
            ("kernel", ints(&kernel)),
            ("strides", ints(&(0..k).map(|_| rng.range(1, 3)).collect::<Vec<_>>())),
            ("pads", ints(&pads)),
            ("dilations", ints(&(0..k).map(|_| rng.range(1, 2)).collect::<Vec<_>>())),
        ];
        list.push(("ceil_mode", Attr::Bool(rng.below(2) == 0)));
        list.push(("count_include_pad", Attr::Bool(rng.below(2) == 0)));
        let a = attrs(&list);
        let win = Window::from_attrs(&a, kernel.iter().map(|&x| x as u64).collect()).unwrap();
        let dims: Vec<usize> = (0..k).map(|_| rng.range(1, 6)).collect();
        let Ok(out) = win.output_dims(&dims.iter().map(|&d| d as u64).collect::<Vec<_>>()) else { continue };
        let (n, c) = (rng.range(1, 2), rng.range(1, 2));
        let xs: Vec<usize> = [n, c].into_iter().chain(dims).collect();
        let ys: Vec<usize> = [n, c].into_iter().chain(out.iter().map(|&d| d as usize)).collect();
        let (x, dy) = (rng.f64s(&xs), rng.f64s(&ys));
        let y = eval(Op::AvgPool, &a, &[&x], &ty(DType::F64, &ys)).unwrap();
        let mut ga = a.clone();
        ga.set("shape", ints(&xs));
        let dx = eval(Op::AvgPoolGrad, &ga, &[&dy], &ty(DType::F64, &xs)).unwrap();
        // Windows with nothing counted are NaN in the pool and reach no input in the gradient.
        let yv = y.to_f64_vec();
        let forward: f64 = yv.iter().zip(dy.to_f64_vec()).filter(|(v, _)| !v.is_nan()).map(|(v, d)| v * d).sum();
        assert_close(forward, dot(&x, &dx), &format!("case {case}: x {xs:?} y {ys:?} {a:?}"));
    }
}

#[test]
fn avg_pool_grad_by_hand() {
    // 1-D, kernel 2, stride 1, pad 1 each side over [a, b]: windows [pad, a], [a, b], [b, pad].
    let dy = f32t(&[1, 1, 3], &[1.0, 2.0, 4.0]);
    let out = run(
        "(%dy: f32[1,1,3]) -> (a: f32[1,1,2], b: f32[1,1,2])",
        "  %0 = avg_pool_grad %dy {kernel = [2], pads = [1, 1], shape = [1, 1, 2]} : f32[1,1,2]\n  %1 = avg_pool_grad %dy {kernel = [2], pads = [1, 1], count_include_pad = true, shape = [1, 1, 2]} : f32[1,1,2]\n  return %0, %1",
        &[("dy", dy)],
    );
    // Divisors 1, 2, 1 without the padding; 2, 2, 2 with it.
    assert_eq!(out[0], f32t(&[1, 1, 2], &[1.0 + 1.0, 1.0 + 4.0]));
    assert_eq!(out[1], f32t(&[1, 1, 2], &[0.5 + 1.0, 1.0 + 2.0]));
}

// ---- losses -------------------------------------------------------------------------------

#[test]
fn softmax_cross_entropy_by_hand() {
    let logits = [1.0f64, 2.0, 3.0, 0.0, 0.0, 0.0];
    let x = f32t(&[2, 3], &logits.iter().map(|&v| v as f32).collect::<Vec<_>>());
    let l = i64t(&[2], &[2, 0]);
    let lse0 = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    let per = [lse0 - 3.0, 3f64.ln()];
    let out = run(
        "(%x: f32[2,3], %l: i64[2]) -> (n: f32[2], s: f32[], m: f32[])",
        "  %0 = softmax_cross_entropy %x, %l {reduction = \"none\"} : f32[2]\n  %1 = softmax_cross_entropy %x, %l {reduction = \"sum\"} : f32[]\n  %2 = softmax_cross_entropy %x, %l : f32[]\n  return %0, %1, %2",
        &[("x", x), ("l", l)],
    );
    assert_all_close(&out[0], &per, 1e-7);
    assert_all_close(&out[1], &[per[0] + per[1]], 1e-7);
    assert_all_close(&out[2], &[(per[0] + per[1]) / 2.0], 1e-7);
    // Large logits stay finite (the maximum is subtracted); f64 with i32 labels, rank 3.
    let x = f64t(&[1, 2, 2], &[1000.0, 0.0, -1000.0, -1000.0]);
    let out = run(
        "(%x: f64[1,2,2], %l: i32[1,2]) -> (n: f64[1,2])",
        "  %0 = softmax_cross_entropy %x, %l {reduction = \"none\"} : f64[1,2]\n  return %0",
        &[("x", x), ("l", i32t(&[1, 2], &[1, 0]))],
    );
    assert_all_close(&out[0], &[1000.0, 2f64.ln()], 1e-12);
    // The mean of no examples is NaN.
    let out =
        eval(Op::SoftmaxCrossEntropy, &Attrs::new(), &[&f32t(&[0, 3], &[]), &i64t(&[0], &[])], &ty(DType::F32, &[]))
            .unwrap();
    assert!(out.to_f64_vec()[0].is_nan());
}

#[test]
fn softmax_cross_entropy_label_out_of_range_names_it() {
    let e = try_run(
        "(%x: f32[2,3], %l: i64[2]) -> (y: f32[])",
        "  %0 = softmax_cross_entropy %x, %l : f32[]\n  return %0",
        &[("x", f32t(&[2, 3], &[0.0; 6])), ("l", i64t(&[2], &[0, 3]))],
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("label 3 (element 1 of the labels) is out of range for 3 classes"), "{e}");
    let e = eval(
        Op::SoftmaxCrossEntropy,
        &Attrs::new(),
        &[&f32t(&[1, 3], &[0.0; 3]), &i32t(&[1], &[-1])],
        &ty(DType::F32, &[]),
    )
    .unwrap_err();
    assert!(e.0.contains("label -1"), "{e}");
    // The type rule: labels of the wrong shape, an unknown reduction.
    let e = graphc_ir::parse_module(
        "graph @g(%x: f32[2,3], %l: i64[3]) -> (y: f32[]) {\n  %0 = softmax_cross_entropy %x, %l : f32[]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("need labels of shape [2]"), "{e:?}");
    let e = graphc_ir::parse_module(
        "graph @g(%x: f32[2,3], %l: i64[2]) -> (y: f32[]) {\n  %0 = softmax_cross_entropy %x, %l {reduction = \"avg\"} : f32[]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("reduction \\\"avg\\\" is not one of"), "{e:?}");
}

#[test]
fn mean_squared_error_by_hand() {
    let p = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let t = f32t(&[2, 2], &[0.0, 2.0, 5.0, 1.0]);
    let out = run(
        "(%p: f32[2,2], %t: f32[2,2]) -> (n: f32[2,2], s: f32[], m: f32[])",
        "  %0 = mean_squared_error %p, %t {reduction = \"none\"} : f32[2,2]\n  %1 = mean_squared_error %p, %t {reduction = \"sum\"} : f32[]\n  %2 = mean_squared_error %p, %t : f32[]\n  return %0, %1, %2",
        &[("p", p), ("t", t)],
    );
    assert_eq!(out[0], f32t(&[2, 2], &[1.0, 0.0, 4.0, 9.0]));
    assert_eq!(out[1], f32t(&[], &[14.0]));
    assert_eq!(out[2], f32t(&[], &[3.5]));
    let e = graphc_ir::parse_module(
        "graph @g(%p: f32[2,2], %t: f32[2]) -> (y: f32[]) {\n  %0 = mean_squared_error %p, %t : f32[]\n  return %0\n}\n",
    )
    .unwrap_err();
    assert!(format!("{e:?}").contains("no broadcasting"), "{e:?}");
}

// ---- grad ---------------------------------------------------------------------------------

#[test]
fn grad_never_runs() {
    let e = try_run(
        "(%x: f32[3]) -> (d: f32[3])",
        "  %0 = reduce_sum %x {axes = [0]} : f32[]\n  %1 = grad %0, %x : f32[3]\n  return %1",
        &[("x", f32t(&[3], &[1.0, 2.0, 3.0]))],
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("grad must be expanded by the autodiff lowering"), "{e}");
    assert!(!kernels::is_kernel(Op::Grad));
    let e = kernels::eval(Op::Grad, &Attrs::new(), &[&f32t(&[], &[0.0]), &f32t(&[], &[0.0])], &[]).unwrap_err();
    assert!(e.0.contains("grad must be expanded by the autodiff lowering"), "{e}");
}

#[test]
fn grad_type_rule() {
    let check = |sig: &str, body: &str| {
        graphc_ir::parse_module(&format!("graph @g{sig} {{\n{body}\n}}\n")).map(|_| ()).map_err(|e| format!("{e:?}"))
    };
    assert!(check("(%x: f64[3], %l: f32[]) -> (d: f64[3])", "  %0 = grad %l, %x : f64[3]\n  return %0").is_ok());
    let e = check("(%x: f32[3], %l: i32[]) -> (d: f32[3])", "  %0 = grad %l, %x : f32[3]\n  return %0").unwrap_err();
    assert!(e.contains("grad needs a scalar float loss, got i32[]"), "{e}");
    let e = check("(%x: f32[3], %l: f32[2]) -> (d: f32[3])", "  %0 = grad %l, %x : f32[3]\n  return %0").unwrap_err();
    assert!(e.contains("grad needs a scalar float loss, got f32[2]"), "{e}");
    let e = check("(%x: i64[3], %l: f32[]) -> (d: i64[3])", "  %0 = grad %l, %x : i64[3]\n  return %0").unwrap_err();
    assert!(e.contains("operand 1 is i64[3]"), "{e}");
}

// ---- optimizers ---------------------------------------------------------------------------

/// One step's feeds: the learning rate, the gradient, the momentum.
fn step_feeds(lr: f32, g: &[f32], mu: f32) -> Vec<(&'static str, Tensor)> {
    vec![("lr", f32t(&[], &[lr])), ("g", f32t(&[g.len()], g)), ("mu", f32t(&[], &[mu]))]
}

fn run_steps(src: &str, graph: &str, steps: &[Vec<(&'static str, Tensor)>]) -> (graphc_runtime::Session, Vec<Tensor>) {
    let s = session(src);
    let mut outs = Vec::new();
    for feeds in steps {
        let mut req = RunRequest::new(graph);
        for (n, t) in feeds {
            req = req.feed(*n, t.clone());
        }
        outs.push(s.run(req).unwrap().tensor(0).unwrap().clone());
    }
    (s, outs)
}

fn value(s: &graphc_runtime::Session, name: &str) -> Vec<f32> {
    s.state().variable(name).unwrap().read().unwrap().to_f64_vec().iter().map(|&v| v as f32).collect()
}

const GRADS: [[f32; 3]; 4] = [[0.5, -1.0, 2.0], [0.25, 0.0, -3.0], [-1.5, 1.0, 0.125], [2.0, -0.5, 1.0]];

#[test]
fn apply_sgd_and_momentum_follow_their_formulas() {
    let src = r#"graph @sgd(%lr: f32[], %g: f32[3]) -> (y: f32[3]) {
  %w = variable {name = "w", init = dense<[1.0, -2.0, 0.5]> : f32[3]} : var<f32[3]>
  %0 = apply_sgd %w, %lr, %g : f32[3]
  return %0
}
graph @momentum(%lr: f32[], %g: f32[3], %mu: f32[]) -> (y: f32[3]) {
  %w = variable {name = "u", init = dense<[1.0, -2.0, 0.5]> : f32[3]} : var<f32[3]>
  %a = variable {name = "u/accum", init = dense<0.0> : f32[3]} : var<f32[3]>
  %0 = apply_momentum %w, %a, %lr, %g, %mu : f32[3]
  return %0
}
graph @nesterov(%lr: f32[], %g: f32[3], %mu: f32[]) -> (y: f32[3]) {
  %w = variable {name = "n", init = dense<[1.0, -2.0, 0.5]> : f32[3]} : var<f32[3]>
  %a = variable {name = "n/accum", init = dense<0.0> : f32[3]} : var<f32[3]>
  %0 = apply_momentum %w, %a, %lr, %g, %mu {use_nesterov = true} : f32[3]
  return %0
}
"#;
    let lrs = [0.1f32, 0.05, 0.2, 0.01];
    let mu = 0.9f32;
    let steps: Vec<_> = (0..4).map(|i| step_feeds(lrs[i], &GRADS[i], mu)).collect();
    let sgd_steps: Vec<_> = steps.iter().map(|f| f[..2].to_vec()).collect();
    let (s, outs) = run_steps(src, "sgd", &sgd_steps);
    let mut w = [1.0f32, -2.0, 0.5];
    for (i, out) in outs.iter().enumerate() {
        for j in 0..3 {
            w[j] -= lrs[i] * GRADS[i][j];
        }
        assert_eq!(out, &f32t(&[3], &w), "sgd step {i}");
    }
    assert_eq!(value(&s, "w"), w);
    for (graph, nesterov) in [("momentum", false), ("nesterov", true)] {
        let (s, outs) = run_steps(src, graph, &steps);
        let (mut w, mut a) = ([1.0f32, -2.0, 0.5], [0.0f32; 3]);
        for (i, out) in outs.iter().enumerate() {
            let (lr, g) = (lrs[i], GRADS[i]);
            for j in 0..3 {
                a[j] = a[j] * mu + g[j];
                w[j] -= if nesterov { lr * g[j] + lr * mu * a[j] } else { lr * a[j] };
            }
            assert_eq!(out, &f32t(&[3], &w), "{graph} step {i}");
        }
        let var = if nesterov { "n" } else { "u" };
        assert_eq!(value(&s, &format!("{var}/accum")), a);
    }
}

#[test]
fn apply_adam_corrects_the_bias_by_the_step_count() {
    let src = r#"graph @adam(%lr: f32[], %g: f32[3]) -> (y: f32[3]) {
  %w = variable {name = "w", init = dense<[1.0, -2.0, 0.5]> : f32[3]} : var<f32[3]>
  %m = variable {name = "w/m", init = dense<0.0> : f32[3]} : var<f32[3]>
  %v = variable {name = "w/v", init = dense<0.0> : f32[3]} : var<f32[3]>
  %t = variable {name = "step", init = dense<0.0> : f32[]} : var<f32[]>
  %0 = apply_adam %w, %m, %v, %t, %lr, %g {beta1 = 0.8, epsilon = 1e-3} : f32[3]
  return %0
}
"#;
    let steps: Vec<_> = (0..4).map(|i| step_feeds(0.1, &GRADS[i], 0.0)[..2].to_vec()).collect();
    let (s, outs) = run_steps(src, "adam", &steps);
    let (b1, b2, eps, lr) = (0.8f32, 0.999f32, 1e-3f32, 0.1f32);
    let (mut w, mut m, mut v) = ([1.0f32, -2.0, 0.5], [0.0f32; 3], [0.0f32; 3]);
    for (i, out) in outs.iter().enumerate() {
        let t = (i + 1) as f32;
        let lr_t = lr * (1.0 - b2.powf(t)).sqrt() / (1.0 - b1.powf(t));
        for j in 0..3 {
            let g = GRADS[i][j];
            m[j] = b1 * m[j] + (1.0 - b1) * g;
            v[j] = b2 * v[j] + (1.0 - b2) * g * g;
            w[j] -= lr_t * m[j] / (v[j].sqrt() + eps);
        }
        assert_eq!(out, &f32t(&[3], &w), "adam step {i}");
    }
    // The first step moves each weight by about lr against its gradient's sign: the bias
    // correction undoes the moments' start at zero.
    let first = outs[0].to_f64_vec();
    for (j, &x) in first.iter().enumerate() {
        let moved = [1.0, -2.0, 0.5][j] - x;
        let g = GRADS[0][j] as f64;
        let want = 0.1 * g / (g.abs() + 1e-3 / (1.0f64 - 0.999).sqrt());
        assert!((moved - want).abs() < 1e-6, "{moved} != {want}");
    }
    assert_eq!(value(&s, "step"), [4.0]);
    assert_eq!(value(&s, "w/m"), m);
    assert_eq!(value(&s, "w/v"), v);
}

#[test]
fn apply_rmsprop_follows_its_formula_in_f64() {
    let src = r#"graph @rms(%lr: f64[], %g: f64[2]) -> (y: f64[2]) {
  %w = variable {name = "w", init = dense<[1.0, -2.0]> : f64[2]} : var<f64[2]>
  %s = variable {name = "w/ms", init = dense<0.0> : f64[2]} : var<f64[2]>
  %p = variable {name = "w/mom", init = dense<0.0> : f64[2]} : var<f64[2]>
  %0 = apply_rmsprop %w, %s, %p, %lr, %g {rho = 0.5, momentum = 0.25} : f64[2]
  return %0
}
"#;
    let s = session(src);
    let (rho, momentum, eps, lr) = (0.5f64, 0.25f64, 1e-7f64, 0.01f64);
    let (mut w, mut ms, mut mom) = ([1.0f64, -2.0], [0.0f64; 2], [0.0f64; 2]);
    for (i, g) in [[1.0f64, -0.5], [0.25, 2.0], [-1.0, 0.0]].iter().enumerate() {
        let out = s
            .run(RunRequest::new("rms").feed("lr", f64t(&[], &[lr])).feed("g", f64t(&[2], g)))
            .unwrap()
            .tensor(0)
            .unwrap()
            .clone();
        for j in 0..2 {
            ms[j] = rho * ms[j] + (1.0 - rho) * g[j] * g[j];
            mom[j] = momentum * mom[j] + lr * g[j] / (ms[j] + eps).sqrt();
            w[j] -= mom[j];
        }
        assert_eq!(out, f64t(&[2], &w), "rmsprop step {i}");
    }
}

fn data_ptr(t: &Tensor) -> usize {
    match t {
        Tensor::F32(a) => a.as_ptr() as usize,
        Tensor::F64(a) => a.as_ptr() as usize,
        _ => unreachable!(),
    }
}

#[test]
fn optimizers_update_in_place_unless_the_value_is_held() {
    let src = r#"graph @adam(%lr: f32[], %g: f32[3]) -> (t: token) {
  %w = variable {name = "w", init = dense<1.0> : f32[3]} : var<f32[3]>
  %m = variable {name = "w/m", init = dense<0.0> : f32[3]} : var<f32[3]>
  %v = variable {name = "w/v", init = dense<0.0> : f32[3]} : var<f32[3]>
  %t = variable {name = "step", init = dense<0.0> : f32[]} : var<f32[]>
  %0 = apply_adam %w, %m, %v, %t, %lr, %g : f32[3]
  %1 = no_op after(%0) : token
  return %1
}
"#;
    let s = session(src);
    let ptr = |name: &str| data_ptr(&s.state().variable(name).unwrap().read().unwrap());
    let req = || RunRequest::new("adam").feed("lr", f32t(&[], &[0.1])).feed("g", f32t(&[3], &[1.0, 2.0, 3.0]));
    s.run(req()).unwrap();
    let before: Vec<usize> = ["w", "w/m", "w/v", "step"].iter().map(|n| ptr(n)).collect();
    for _ in 0..3 {
        s.run(req()).unwrap();
    }
    let after: Vec<usize> = ["w", "w/m", "w/v", "step"].iter().map(|n| ptr(n)).collect();
    assert_eq!(before, after, "nothing held the values, so every buffer was updated in place");
    // A snapshot holds the values: the next update copies, and the snapshot keeps what it saw.
    let snap = s.snapshot();
    let held: Vec<(String, Arc<Tensor>)> = snap.into_iter().map(|(n, v)| (n, v.unwrap())).collect();
    let seen: Vec<Vec<f64>> = held.iter().map(|(_, t)| t.to_f64_vec()).collect();
    s.run(req()).unwrap();
    for ((name, t), seen) in held.iter().zip(&seen) {
        assert_eq!(&t.to_f64_vec(), seen, "the snapshot of {name} changed");
        assert_ne!(data_ptr(t), ptr(name), "{name} was written in place while a snapshot held it");
    }
    assert_eq!(s.state().variable("step").unwrap().read().unwrap().to_f64_vec(), [5.0]);
}

#[test]
fn a_read_still_live_keeps_its_value() {
    let src = r#"graph @g(%lr: f32[], %g: f32[2]) -> (before: f32[2], after: f32[2]) {
  %w = variable {name = "w", init = dense<[1.0, 2.0]> : f32[2]} : var<f32[2]>
  %0 = read %w : f32[2]
  %1 = apply_sgd %w, %lr, %g after(%0) : f32[2]
  return %0, %1
}
"#;
    let s = session(src);
    let o = s.run(RunRequest::new("g").feed("lr", f32t(&[], &[1.0])).feed("g", f32t(&[2], &[0.5, 0.5]))).unwrap();
    assert_eq!(o.tensor(0).unwrap(), &f32t(&[2], &[1.0, 2.0]));
    assert_eq!(o.tensor(1).unwrap(), &f32t(&[2], &[0.5, 1.5]));
}

#[test]
fn optimizer_errors() {
    // An accumulator never given a value is an error, as reading it is.
    let e = try_run(
        "(%lr: f32[], %g: f32[2], %mu: f32[]) -> (y: f32[2])",
        "  %w = variable {name = \"w\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %a = variable {name = \"a\"} : var<f32[2]>\n  %0 = apply_momentum %w, %a, %lr, %g, %mu : f32[2]\n  return %0",
        &[("lr", f32t(&[], &[0.1])), ("g", f32t(&[2], &[1.0, 1.0])), ("mu", f32t(&[], &[0.9]))],
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Uninitialized);
    assert!(e.message.contains("variable \"a\""), "{e}");
    // One variable in two roles cannot be locked twice.
    let e = try_run(
        "(%lr: f32[], %g: f32[2], %mu: f32[]) -> (y: f32[2])",
        "  %w = variable {name = \"w\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %0 = apply_momentum %w, %w, %lr, %g, %mu : f32[2]\n  return %0",
        &[("lr", f32t(&[], &[0.1])), ("g", f32t(&[2], &[1.0, 1.0])), ("mu", f32t(&[], &[0.9]))],
    )
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("variable \"w\" is given twice"), "{e}");
    // Type rules: an integer variable, a gradient of another type, an lr that is not a scalar,
    // Adam's step of another dtype.
    let check = |body: &str| {
        graphc_ir::parse_module(&format!("graph @g(%lr: f32[], %g: f32[2], %gi: i32[2], %l2: f32[2]) -> (t: token) {{\n{body}\n  %9 = no_op : token\n  return %9\n}}\n"))
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    };
    let e = check("  %w = variable {name = \"w\"} : var<i32[2]>\n  %0 = apply_sgd %w, %lr, %gi : i32[2]").unwrap_err();
    assert!(e.contains("optimizers update floats"), "{e}");
    let e = check("  %w = variable {name = \"w\"} : var<f32[3]>\n  %0 = apply_sgd %w, %lr, %g : f32[3]").unwrap_err();
    assert!(e.contains("the gradient is f32[2] but the variable holds f32[3]"), "{e}");
    let e = check("  %w = variable {name = \"w\"} : var<f32[2]>\n  %0 = apply_sgd %w, %l2, %g : f32[2]").unwrap_err();
    assert!(e.contains("the learning rate (operand 1) must be a scalar f32[]"), "{e}");
    let e = check("  %w = variable {name = \"w\"} : var<f32[2]>\n  %m = variable {name = \"m\"} : var<f32[2]>\n  %v = variable {name = \"v\"} : var<f32[2]>\n  %t = variable {name = \"t\"} : var<i64[]>\n  %0 = apply_adam %w, %m, %v, %t, %lr, %g : f32[2]").unwrap_err();
    assert!(e.contains("the step count (operand 3) holds i64[], but it must hold f32[]"), "{e}");
    assert!(check("  %w = variable {name = \"w\"} : var<f32[2]>\n  %0 = apply_sgd %w, %lr, %g : f32[2]").is_ok());
}

#[test]
fn concurrent_updates_lose_nothing_and_never_deadlock() {
    // Two graphs update the same pair of variables in opposite roles (each is the other's
    // accumulator) while a third takes snapshots: the name-ordered locks never deadlock, and
    // every update is counted.
    let src = r#"graph @a(%lr: f32[], %g: f32[1], %mu: f32[]) -> (y: f32[1]) {
  %x = variable {name = "x", init = dense<0.0> : f32[1]} : var<f32[1]>
  %y = variable {name = "y", init = dense<0.0> : f32[1]} : var<f32[1]>
  %0 = apply_momentum %x, %y, %lr, %g, %mu : f32[1]
  return %0
}
graph @b(%lr: f32[], %g: f32[1], %mu: f32[]) -> (y: f32[1]) {
  %x = variable {name = "x", init = dense<0.0> : f32[1]} : var<f32[1]>
  %y = variable {name = "y", init = dense<0.0> : f32[1]} : var<f32[1]>
  %0 = apply_momentum %y, %x, %lr, %g, %mu : f32[1]
  return %0
}
"#;
    let s = Arc::new(session(src));
    let feeds = |graph: &str| {
        RunRequest::new(graph).feed("lr", f32t(&[], &[0.0])).feed("g", f32t(&[1], &[1.0])).feed("mu", f32t(&[], &[1.0]))
    };
    std::thread::scope(|scope| {
        for graph in ["a", "b"] {
            let s = &s;
            scope.spawn(move || {
                for _ in 0..200 {
                    s.run(feeds(graph)).unwrap();
                }
            });
        }
        let s = &s;
        scope.spawn(move || {
            for _ in 0..200 {
                let _ = s.snapshot();
            }
        });
    });
    // With lr = 0 and momentum 1 each update adds 1 to its accumulator only.
    assert_eq!(value(&s, "x"), [200.0]);
    assert_eq!(value(&s, "y"), [200.0]);
}
