//! Gradients checked against central finite differences in f64: for each differentiable op,
//! a graph `loss = sum(op(inputs) * W)` (W a fixed, uneven weight) is differentiated by the
//! `autodiff` lowering and run on the interpreter, and every element of every gradient is
//! compared with `(loss(x + h) - loss(x - h)) / 2h`. Inputs are kept away from kinks (relu at
//! 0, ties of max) where the derivative is not defined. Random shapes come from proptest;
//! the grids are small enough to perturb every element.

mod common;

use graphc::backend::LOWERINGS;
use graphc::passes::PassManager;
use graphc_ir::{
    verify_module, Attr, DType, Graph, Module, NodeSpec, Op, TensorData, TensorLiteral, TensorType, Type, Value,
};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use std::sync::Arc;

type Build = dyn Fn(&mut Graph, &[Value]) -> Value;

/// One input: its type and elements (as f64; integers are rounded).
struct Input {
    ty: TensorType,
    data: Vec<f64>,
}

fn f64_input(shape: &[u64], data: Vec<f64>) -> Input {
    Input { ty: TensorType::new(DType::F64, shape.to_vec()), data }
}

fn i64_input(shape: &[u64], data: Vec<i64>) -> Input {
    Input { ty: TensorType::new(DType::I64, shape.to_vec()), data: data.into_iter().map(|i| i as f64).collect() }
}

/// Deterministic values in [lo, hi), spread so that no two are close.
fn spread(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    for i in (1..n).rev() {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    order.iter().map(|&k| lo + (hi - lo) * (k as f64 + 0.5) / n as f64).collect()
}

fn rand_input(shape: &[u64], lo: f64, hi: f64, seed: u64) -> Input {
    let n = shape.iter().product::<u64>() as usize;
    f64_input(shape, spread(n, lo, hi, seed))
}

fn tensor(i: &Input) -> Tensor {
    let shape: Vec<usize> = i.ty.shape.iter().map(|&d| d as usize).collect();
    let wide = Tensor::from_data(&shape, TensorData::F64(i.data.clone())).expect("input matches its shape");
    graphc_runtime::kernels::cast(&wide, i.ty.dtype)
}

pub fn op(g: &mut Graph, op: Op, operands: &[Value], attrs: &[(&str, Attr)]) -> Value {
    let mut spec = NodeSpec::new(op, operands.to_vec());
    for (k, v) in attrs {
        spec = spec.attr(k, v.clone());
    }
    let body = g.body;
    g.add(body, spec).unwrap_or_else(|e| panic!("building {}: {e}", op.name()))[0]
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// `sum(out * W)` with W uneven over `out`'s elements.
fn weighted_sum(g: &mut Graph, out: Value) -> Value {
    let ty = g.value_type(out).as_tensor().unwrap().clone();
    let n = ty.num_elements().unwrap() as usize;
    let w: Vec<f64> = (0..n).map(|i| 0.5 + (1.3 * i as f64 + 0.2).sin()).collect();
    let data = match ty.dtype {
        DType::F32 => TensorData::F32(w.iter().map(|&x| x as f32).collect()),
        _ => TensorData::F64(w),
    };
    let lit = TensorLiteral::new(ty.clone(), data).unwrap();
    let wv = op(g, Op::Constant, &[], &[("value", Attr::Tensor(lit))]);
    let p = op(g, Op::Mul, &[out, wv], &[]);
    let axes: Vec<i64> = (0..ty.rank() as i64).collect();
    op(g, Op::ReduceSum, &[p], &[("axes", ints(&axes))])
}

/// The module: `@loss` (the forward loss) and `@grad` (the loss and its gradients with
/// respect to the inputs `wrt`), with `grad` expanded.
fn module(inputs: &[Input], wrt: &[usize], build: &Build) -> Module {
    let make = |name: &str, with_grad: bool| {
        let mut g = Graph::new(name);
        let xs: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, inp)| g.add_input(&format!("x{i}"), Type::Tensor(inp.ty.clone())))
            .collect();
        let out = build(&mut g, &xs);
        let loss = weighted_sum(&mut g, out);
        let mut outputs = vec![("loss".to_string(), loss)];
        if with_grad {
            let mut operands = vec![loss];
            operands.extend(wrt.iter().map(|&i| xs[i]));
            let body = g.body;
            let grads = g.add(body, NodeSpec::new(Op::Grad, operands)).expect("a grad node");
            outputs.extend(grads.into_iter().enumerate().map(|(i, v)| (format!("d{i}"), v)));
        }
        g.set_outputs(outputs);
        g
    };
    let mut m = Module { graphs: vec![make("loss", false), make("grad", true)], ..Default::default() };
    PassManager::new(LOWERINGS).unwrap().run(&mut m, &mut |_| {}).unwrap_or_else(|e| panic!("autodiff: {e}"));
    let diags = verify_module(&m);
    assert!(diags.is_empty(), "autodiff's output does not verify: {:?}\n{}", diags, graphc_ir::print_module(&m));
    let text = graphc_ir::print_module(&m);
    let again =
        graphc_ir::parse_module(&text).unwrap_or_else(|d| panic!("autodiff's output does not re-parse: {d:?}\n{text}"));
    assert_eq!(graphc_ir::print_module(&again), text, "autodiff's output round-trips");
    m
}

fn run(s: &Session, graph: &str, inputs: &[Input]) -> Vec<Vec<f64>> {
    let mut req = RunRequest::new(graph);
    for (i, inp) in inputs.iter().enumerate() {
        req = req.feed(format!("x{i}"), Arc::new(tensor(inp)));
    }
    let out = s.run(req).unwrap_or_else(|e| panic!("running @{graph}: {e}"));
    out.values.iter().map(|v| v.as_tensor().expect("a tensor").to_f64_vec()).collect()
}

/// Checks every gradient element against central differences.
fn check(inputs: Vec<Input>, wrt: &[usize], build: &Build) {
    let m = module(&inputs, wrt, build);
    let s = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let got = run(&s, "grad", &inputs);
    let mut inputs = inputs;
    for (k, &i) in wrt.iter().enumerate() {
        let ad = &got[k + 1];
        assert_eq!(ad.len(), inputs[i].data.len(), "gradient {k} has the input's size");
        for (j, &want) in ad.iter().enumerate() {
            let x = inputs[i].data[j];
            let h = 1e-6 * x.abs().max(1.0);
            inputs[i].data[j] = x + h;
            let up = run(&s, "loss", &inputs)[0][0];
            inputs[i].data[j] = x - h;
            let down = run(&s, "loss", &inputs)[0][0];
            inputs[i].data[j] = x;
            let fd = (up - down) / (2.0 * h);
            let tol = 1e-5 * (1.0 + fd.abs().max(want.abs()));
            assert!(
                (fd - want).abs() <= tol,
                "d loss / d x{i}[{j}]: autodiff {want} but finite differences {fd}\n{}",
                graphc_ir::print_module(&m)
            );
        }
    }
}

// ----- elementwise -----

fn unary_case(o: Op, lo: f64, hi: f64) {
    check(vec![rand_input(&[3, 4], lo, hi, 1)], &[0], &move |g, x| op(g, o, &[x[0]], &[]));
}

#[test]
fn unary_ops() {
    for o in [Op::Neg, Op::Exp, Op::Tanh, Op::Sigmoid, Op::Erf, Op::Identity] {
        unary_case(o, -2.0, 2.0);
    }
    for o in [Op::Log, Op::Sqrt] {
        unary_case(o, 0.2, 3.0);
    }
    // Kinks at 0: values stay at least 0.08 away.
    for o in [Op::Abs, Op::Relu] {
        check(vec![rand_input(&[3, 4], -2.0, 2.0, 3)], &[0], &move |g, x| op(g, o, &[x[0]], &[]));
    }
}

#[test]
fn trigonometric_and_hyperbolic_ops() {
    for o in [Op::Sin, Op::Cos, Op::Atan, Op::Sinh, Op::Cosh, Op::Asinh] {
        unary_case(o, -2.0, 2.0);
    }
    unary_case(Op::Tan, -1.2, 1.2);
    // Inside the domains, away from the poles at ±1.
    for o in [Op::Asin, Op::Acos, Op::Atanh] {
        unary_case(o, -0.9, 0.9);
    }
    unary_case(Op::Acosh, 1.2, 3.0);
}

#[test]
fn rounding_ops_have_zero_gradients() {
    // Values stay away from the integers and halves where they jump.
    for o in [Op::Floor, Op::Ceil, Op::Round, Op::Sign] {
        check(vec![rand_input(&[3, 4], -2.1, 1.9, 4)], &[0], &move |g, x| op(g, o, &[x[0]], &[]));
        let inputs = [rand_input(&[3], -2.1, 1.9, 4)];
        let m = module(&inputs, &[0], &move |g, x| op(g, o, &[x[0]], &[]));
        let s = Session::new(m, SessionOptions::default()).unwrap();
        assert_eq!(run(&s, "grad", &inputs)[1], vec![0.0; 3], "{}", o.name());
    }
}

#[test]
fn mod_in_both_modes() {
    // d/da = 1, d/db = -floor(a / b) or -trunc(a / b); a / b stays away from the integers.
    let shapes: &[(&[u64], &[u64])] = &[(&[3, 4], &[3, 4]), (&[3, 4], &[4]), (&[], &[2, 3])];
    for &(sa, sb) in shapes {
        for (lo, hi) in [(0.753, 1.953), (-1.953, -0.753)] {
            for fmod in [false, true] {
                check(vec![rand_input(sa, -3.1, 2.9, 30), rand_input(sb, lo, hi, 31)], &[0, 1], &move |g, x| {
                    op(g, Op::Mod, &[x[0], x[1]], &[("fmod", Attr::Bool(fmod))])
                });
            }
        }
    }
}

#[test]
fn cast_passes_the_adjoint_back_in_the_operand_dtype() {
    // d/dx sum(f64(f32(x)) * W) = W, rounded through f32 on the way back.
    let inputs = [f64_input(&[3], vec![0.5, -1.25, 2.0])];
    let m = module(&inputs, &[0], &|g, x| {
        let narrow = op(g, Op::Cast, &[x[0]], &[("to", Attr::DType(DType::F32))]);
        op(g, Op::Cast, &[narrow], &[("to", Attr::DType(DType::F64))])
    });
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let out = run(&s, "grad", &inputs);
    let want: Vec<f64> = (0..3).map(|i| (0.5 + (1.3 * i as f64 + 0.2).sin()) as f32 as f64).collect();
    assert_eq!(out[1], want);
}

#[test]
fn binary_ops_broadcast() {
    let shapes: &[(&[u64], &[u64])] = &[(&[3, 4], &[3, 4]), (&[3, 4], &[4]), (&[2, 1, 3], &[4, 1]), (&[], &[2, 3])];
    for &(a, b) in shapes {
        for o in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min] {
            let (lo, hi) = if o == Op::Div { (0.5, 2.0) } else { (-2.0, 2.0) };
            // Offset grids: no ties between the operands.
            check(vec![rand_input(a, lo, hi, 5), rand_input(b, lo + 0.013, hi + 0.013, 6)], &[0, 1], &move |g, x| {
                op(g, o, &[x[0], x[1]], &[])
            });
        }
        check(vec![rand_input(a, 0.5, 2.0, 7), rand_input(b, -1.5, 1.5, 8)], &[0, 1], &|g, x| {
            op(g, Op::Pow, &[x[0], x[1]], &[])
        });
    }
}

#[test]
fn pow_at_non_positive_base_gives_zero_exponent_gradient() {
    // d/db of a^b where a <= 0 is 0 by definition (TensorFlow's rule), not NaN.
    let m = module(&[f64_input(&[2], vec![0.0, -2.0]), f64_input(&[2], vec![2.0, 2.0])], &[0, 1], &|g, x| {
        op(g, Op::Pow, &[x[0], x[1]], &[])
    });
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let out = run(&s, "grad", &[f64_input(&[2], vec![0.0, -2.0]), f64_input(&[2], vec![2.0, 2.0])]);
    let w0 = 0.5 + 0.2f64.sin();
    let w1 = 0.5 + 1.5f64.sin();
    assert_eq!(out[1], vec![0.0, 2.0 * -2.0 * w1], "d/da = b a^(b-1)");
    assert_eq!(out[2], vec![0.0, 0.0], "d/db where a <= 0");
    let _ = w0;
}

#[test]
fn select_routes_the_adjoint() {
    check(vec![rand_input(&[2, 3], -1.0, 1.0, 9), rand_input(&[3], -1.0, 1.0, 10)], &[0, 1], &|g, x| {
        let zero = op(g, Op::Constant, &[], &[("value", Attr::Tensor(lit_f64(&[], vec![0.0])))]);
        let c = op(g, Op::Greater, &[x[0], zero], &[]);
        op(g, Op::Select, &[c, x[0], x[1]], &[])
    });
}

fn lit_f64(shape: &[u64], v: Vec<f64>) -> TensorLiteral {
    TensorLiteral::new(TensorType::new(DType::F64, shape.to_vec()), TensorData::F64(v)).unwrap()
}

// ----- reductions, softmax, losses -----

#[test]
fn reductions() {
    for o in [Op::ReduceSum, Op::ReduceMean, Op::ReduceMax, Op::ReduceMin] {
        for (axes, keep) in
            [(vec![1], false), (vec![0, 2], true), (vec![-1], false), (vec![0, 1, 2], false), (vec![], false)]
        {
            check(vec![rand_input(&[2, 3, 4], -2.0, 2.0, 11)], &[0], &move |g, x| {
                op(g, o, &[x[0]], &[("axes", ints(&axes)), ("keep_dims", Attr::Bool(keep))])
            });
        }
    }
}

#[test]
fn reduce_prod_with_and_without_zeros() {
    for (axes, keep) in
        [(vec![1], false), (vec![0, 2], true), (vec![-1], false), (vec![0, 1, 2], false), (vec![], false)]
    {
        check(vec![rand_input(&[2, 3, 4], -2.0, 2.0, 32)], &[0], &move |g, x| {
            op(g, Op::ReduceProd, &[x[0]], &[("axes", ints(&axes)), ("keep_dims", Attr::Bool(keep))])
        });
    }
    // Rows with no zero, one zero (its gradient is the product of the others) and two zeros
    // (every gradient 0).
    let data = vec![1.5, -2.0, 0.5, 3.0, 0.0, -1.25, 0.0, 2.0, 0.0];
    check(vec![f64_input(&[3, 3], data.clone())], &[0], &|g, x| {
        op(g, Op::ReduceProd, &[x[0]], &[("axes", ints(&[1]))])
    });
    let inputs = [f64_input(&[3, 3], data)];
    let m = module(&inputs, &[0], &|g, x| op(g, Op::ReduceProd, &[x[0]], &[("axes", ints(&[1]))]));
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let w: Vec<f64> = (0..3).map(|i| 0.5 + (1.3 * i as f64 + 0.2).sin()).collect();
    let want = vec![-w[0], 0.75 * w[0], -3.0 * w[0], 0.0, -3.75 * w[1], 0.0, 0.0, 0.0, 0.0];
    assert_eq!(run(&s, "grad", &inputs)[1], want);
}

#[test]
fn reduce_max_splits_ties() {
    // max of [1, 3, 3]: each tied maximum gets half the adjoint, as TensorFlow does.
    let inputs = [f64_input(&[3], vec![1.0, 3.0, 3.0])];
    let m = module(&inputs, &[0], &|g, x| op(g, Op::ReduceMax, &[x[0]], &[("axes", ints(&[0]))]));
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let out = run(&s, "grad", &inputs);
    let w = 0.5 + 0.2f64.sin();
    assert_eq!(out[1], vec![0.0, w / 2.0, w / 2.0]);
}

#[test]
fn softmax_and_losses() {
    for axis in [0, 1, -1] {
        check(vec![rand_input(&[3, 4], -2.0, 2.0, 12)], &[0], &move |g, x| {
            op(g, Op::Softmax, &[x[0]], &[("axis", Attr::Int(axis))])
        });
    }
    for reduction in ["none", "sum", "mean"] {
        check(vec![rand_input(&[4, 5], -2.0, 2.0, 13), i64_input(&[4], vec![0, 4, 2, 2])], &[0], &move |g, x| {
            op(g, Op::SoftmaxCrossEntropy, &[x[0], x[1]], &[("reduction", Attr::Str(reduction.into()))])
        });
        check(vec![rand_input(&[3, 2], -2.0, 2.0, 14), rand_input(&[3, 2], -2.0, 2.0, 15)], &[0, 1], &move |g, x| {
            op(g, Op::MeanSquaredError, &[x[0], x[1]], &[("reduction", Attr::Str(reduction.into()))])
        });
    }
}

// ----- matmul -----

#[test]
fn matmul_with_flags_and_batches() {
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let a: &[u64] = if ta { &[4, 3] } else { &[3, 4] };
        let b: &[u64] = if tb { &[5, 4] } else { &[4, 5] };
        check(vec![rand_input(a, -1.0, 1.0, 16), rand_input(b, -1.0, 1.0, 17)], &[0, 1], &move |g, x| {
            op(g, Op::MatMul, &[x[0], x[1]], &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))])
        });
    }
    let batched: &[(&[u64], &[u64])] = &[(&[2, 3, 4], &[2, 4, 5]), (&[2, 3, 4], &[4, 5]), (&[1, 3, 4], &[2, 4, 5])];
    for &(a, b) in batched {
        check(vec![rand_input(a, -1.0, 1.0, 18), rand_input(b, -1.0, 1.0, 19)], &[0, 1], &|g, x| {
            op(g, Op::MatMul, &[x[0], x[1]], &[])
        });
    }
}

// ----- array ops -----

#[test]
fn array_ops() {
    let x = || vec![rand_input(&[3, 4], -1.0, 1.0, 20)];
    check(x(), &[0], &|g, x| op(g, Op::Reshape, &[x[0]], &[("shape", ints(&[2, 6]))]));
    check(x(), &[0], &|g, x| op(g, Op::Transpose, &[x[0]], &[("perm", ints(&[1, 0]))]));
    check(vec![rand_input(&[2, 3, 4], -1.0, 1.0, 21)], &[0], &|g, x| {
        op(g, Op::Transpose, &[x[0]], &[("perm", ints(&[2, 0, 1]))])
    });
    check(vec![rand_input(&[3, 1], -1.0, 1.0, 22)], &[0], &|g, x| {
        op(g, Op::Broadcast, &[x[0]], &[("shape", ints(&[2, 3, 4]))])
    });
    check(vec![rand_input(&[5, 7], -1.0, 1.0, 23)], &[0], &|g, x| {
        op(g, Op::Slice, &[x[0]], &[("starts", ints(&[1, -6])), ("ends", ints(&[5, 7])), ("steps", ints(&[2, 3]))])
    });
    check(vec![rand_input(&[2, 3], -1.0, 1.0, 24), rand_input(&[2, 2], -1.0, 1.0, 25)], &[0, 1], &|g, x| {
        op(g, Op::Concat, &[x[0], x[1]], &[("axis", Attr::Int(-1))])
    });
    // Split: only the second piece reaches the loss; the first gets zeros.
    check(vec![rand_input(&[4, 5], -1.0, 1.0, 26)], &[0], &|g, x| {
        let body = g.body;
        let parts = g
            .add(body, NodeSpec::new(Op::Split, vec![x[0]]).attr("axis", Attr::Int(1)).attr("sizes", ints(&[2, 3])))
            .unwrap();
        op(g, Op::Exp, &[parts[1]], &[])
    });
    check(vec![rand_input(&[3, 4], -1.0, 1.0, 27)], &[0], &|g, x| {
        let v = op(g, Op::Constant, &[], &[("value", Attr::Tensor(lit_f64(&[], vec![0.25])))]);
        op(g, Op::Pad, &[x[0], v], &[("low", ints(&[1, 0])), ("high", ints(&[0, 2])), ("interior", ints(&[1, 2]))])
    });
}

#[test]
fn gather_with_repeated_indices_and_scatter_add() {
    for axis in [0i64, 1] {
        check(
            vec![rand_input(&[4, 3], -1.0, 1.0, 28), i64_input(&[2, 3], vec![1, 0, 1, 2, 1, 1])],
            &[0],
            &move |g, x| op(g, Op::Gather, &[x[0], x[1]], &[("axis", Attr::Int(axis))]),
        );
    }
    check(
        vec![
            rand_input(&[4, 3], -1.0, 1.0, 29),
            i64_input(&[5], vec![1, 3, 1, 0, 1]),
            rand_input(&[5, 3], -1.0, 1.0, 30),
        ],
        &[0, 2],
        &|g, x| op(g, Op::ScatterAdd, &[x[0], x[1], x[2]], &[("axis", Attr::Int(0))]),
    );
}

// ----- convolution and pooling -----

fn conv_attrs(strides: [i64; 2], pads: [i64; 4], dil: [i64; 2], group: i64) -> Vec<(&'static str, Attr)> {
    vec![("strides", ints(&strides)), ("pads", ints(&pads)), ("dilations", ints(&dil)), ("group", Attr::Int(group))]
}

#[test]
fn conv_and_its_gradient_ops() {
    let cases = [
        ([1, 1], [0, 0, 0, 0], [1, 1], 1),
        ([2, 1], [1, 0, 0, 1], [1, 1], 1),
        ([1, 2], [1, 1, 1, 1], [2, 1], 2),
        ([2, 2], [0, 1, 1, 0], [1, 2], 4),
    ];
    for (strides, pads, dil, group) in cases {
        let attrs = conv_attrs(strides, pads, dil, group);
        let (x, w) = (vec![2u64, 4, 6, 5], vec![4u64, 4 / group as u64, 2, 3]);
        let a = attrs.clone();
        check(vec![rand_input(&x, -1.0, 1.0, 31), rand_input(&w, -1.0, 1.0, 32)], &[0, 1], &move |g, v| {
            op(g, Op::Conv, &[v[0], v[1]], &a)
        });
        // The gradient ops themselves, so gradients of gradients hold.
        let y = conv_out(&x, &w, strides, pads, dil);
        let mut a = attrs.clone();
        a.push(("shape", ints(&x.iter().map(|&d| d as i64).collect::<Vec<_>>())));
        check(vec![rand_input(&y, -1.0, 1.0, 33), rand_input(&w, -1.0, 1.0, 34)], &[0, 1], &move |g, v| {
            op(g, Op::ConvInputGrad, &[v[0], v[1]], &a)
        });
        let mut a = attrs.clone();
        a.push(("shape", ints(&w.iter().map(|&d| d as i64).collect::<Vec<_>>())));
        check(vec![rand_input(&x, -1.0, 1.0, 35), rand_input(&y, -1.0, 1.0, 36)], &[0, 1], &move |g, v| {
            op(g, Op::ConvFilterGrad, &[v[0], v[1]], &a)
        });
    }
}

fn conv_out(x: &[u64], w: &[u64], strides: [i64; 2], pads: [i64; 4], dil: [i64; 2]) -> Vec<u64> {
    let mut out = vec![x[0], w[0]];
    for d in 0..2 {
        let span = dil[d] as u64 * (w[2 + d] - 1) + 1;
        out.push((x[2 + d] + pads[d] as u64 + pads[2 + d] as u64 - span) / strides[d] as u64 + 1);
    }
    out
}

#[test]
fn pooling() {
    let x = vec![2u64, 3, 5, 6];
    for (kernel, strides, pads, ceil) in [
        ([2, 2], [2, 2], [0, 0, 0, 0], false),
        ([3, 2], [1, 2], [1, 0, 1, 1], false),
        ([2, 3], [2, 2], [0, 0, 0, 0], true),
    ] {
        let mut attrs = vec![("kernel", ints(&kernel)), ("strides", ints(&strides)), ("pads", ints(&pads))];
        attrs.push(("ceil_mode", Attr::Bool(ceil)));
        let a = attrs.clone();
        check(vec![rand_input(&x, -1.0, 1.0, 37)], &[0], &move |g, v| op(g, Op::MaxPool, &[v[0]], &a));
        for include in [false, true] {
            let mut a = attrs.clone();
            a.push(("count_include_pad", Attr::Bool(include)));
            let b = a.clone();
            check(vec![rand_input(&x, -1.0, 1.0, 38)], &[0], &move |g, v| op(g, Op::AvgPool, &[v[0]], &b));
            // avg_pool_grad, differentiated in turn.
            let probe = module(&[rand_input(&x, -1.0, 1.0, 38)], &[0], &{
                let b = a.clone();
                move |g: &mut Graph, v: &[Value]| op(g, Op::AvgPool, &[v[0]], &b)
            });
            let pooled = probe.graph("loss").unwrap();
            let n = pooled.walk().into_iter().find(|&n| pooled.nodes[n].op == Op::AvgPool).unwrap();
            let y = pooled.value_type(pooled.nodes[n].results[0]).as_tensor().unwrap().shape.clone();
            let mut c = a.clone();
            c.push(("shape", ints(&x.iter().map(|&d| d as i64).collect::<Vec<_>>())));
            check(vec![rand_input(&y, -1.0, 1.0, 39)], &[0], &move |g, v| op(g, Op::AvgPoolGrad, &[v[0]], &c));
        }
    }
}

// ----- control flow -----

fn region_graph(text: &str) -> Graph {
    graphc_ir::parse_module(text).unwrap_or_else(|d| panic!("{d:?}")).graphs.remove(0)
}

/// The forward body is parsed from text, the loss and grad added by `module`.
fn from_text(text: &'static str) -> impl Fn(&mut Graph, &[Value]) -> Value {
    move |g: &mut Graph, xs: &[Value]| {
        let src = region_graph(text);
        let mut map = std::collections::HashMap::new();
        for (&a, &b) in src.inputs().iter().zip(xs) {
            map.insert(a, b);
        }
        let body = g.body;
        for &n in &src.regions[src.body].nodes {
            let nd = &src.nodes[n];
            let ops = nd.operands.iter().map(|v| map[v]).collect();
            let deps = nd.control_deps.iter().map(|v| map[v]).collect();
            let res = g.import_node(body, &src, n, ops, deps).unwrap();
            map.extend(nd.results.iter().copied().zip(res));
        }
        map[&src.output_values()[0]]
    }
}

#[test]
fn through_cond() {
    let text = "graph @f(%p: bool[], %x: f64[3], %w: f64[3]) -> (y: f64[3]) {
  %0 = cond %p, %x, %w : f64[3]
    then(%a: f64[3], %b: f64[3]) {
      %1 = mul %a, %b : f64[3]
      %2 = exp %1 : f64[3]
      yield %2
    }
    else(%c: f64[3], %d: f64[3]) {
      %3 = tanh %c : f64[3]
      yield %3
    }
  return %0
}
";
    for p in [1.0, 0.0] {
        let inputs = vec![
            Input { ty: TensorType::new(DType::Bool, vec![]), data: vec![p] },
            rand_input(&[3], -1.0, 1.0, 40),
            rand_input(&[3], -1.0, 1.0, 41),
        ];
        check(inputs, &[1, 2], &from_text(text));
    }
}

#[test]
fn through_while() {
    // x <- x * w + sin-free nonlinearity, n times; the gradient with respect to x and w.
    let text = "graph @f(%n: i64[], %x: f64[3], %w: f64[3]) -> (y: f64[3]) {
  %i0 = constant {value = dense<0> : i64[]} : i64[]
  %0, %1, %2, %3 = while %i0, %n, %x, %w : i64[], i64[], f64[3], f64[3]
    cond(%i: i64[], %m: i64[], %a: f64[3], %b: f64[3]) {
      %4 = less %i, %m : bool[]
      yield %4
    }
    body(%j: i64[], %k: i64[], %c: f64[3], %d: f64[3]) {
      %5 = constant {value = dense<1> : i64[]} : i64[]
      %6 = add %j, %5 : i64[]
      %7 = mul %c, %d : f64[3]
      %8 = tanh %7 : f64[3]
      %9 = add %8, %c : f64[3]
      yield %6, %k, %9, %d
    }
  return %2
}
";
    for n in [0i64, 1, 3] {
        let inputs = vec![i64_input(&[], vec![n]), rand_input(&[3], -1.0, 1.0, 42), rand_input(&[3], 0.5, 1.5, 43)];
        check(inputs, &[1, 2], &from_text(text));
    }
}

// ----- gradients of gradients -----

#[test]
fn gradient_of_a_gradient() {
    // out = d/dx sum(tanh(x) * x * W'), itself differentiated by `module`.
    check(vec![rand_input(&[2, 3], -1.0, 1.0, 44), rand_input(&[3, 2], -1.0, 1.0, 45)], &[0, 1], &|g, x| {
        let h = op(g, Op::MatMul, &[x[0], x[1]], &[]);
        let t = op(g, Op::Tanh, &[h], &[]);
        let inner = weighted_sum(g, t);
        let body = g.body;
        g.add(body, NodeSpec::new(Op::Grad, vec![inner, x[0]])).unwrap()[0]
    });
}

// ----- random shapes -----

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

    #[test]
    fn random_broadcast_shapes(a in proptest::collection::vec(1u64..4, 0..4), mask in proptest::collection::vec(any::<bool>(), 4), seed in 0u64..1000) {
        // b: a suffix of a's shape, some dims set to 1.
        let k = a.len().min(mask.iter().filter(|&&m| m).count());
        let b: Vec<u64> = a[a.len() - k..].iter().zip(&mask).map(|(&d, &m)| if m { d } else { 1 }).collect();
        for o in [Op::Mul, Op::Sub, Op::Max] {
            check(vec![rand_input(&a, -1.0, 1.0, seed), rand_input(&b, -0.987, 1.013, seed + 1)], &[0, 1], &move |g, x| op(g, o, &[x[0], x[1]], &[]));
        }
    }

    #[test]
    fn random_matmuls(m in 1u64..5, k in 1u64..5, n in 1u64..5, batch in 0u64..3, ta: bool, tb: bool, seed in 0u64..1000) {
        let with_batch = |s: [u64; 2]| if batch == 0 { s.to_vec() } else { vec![batch, s[0], s[1]] };
        let a = with_batch(if ta { [k, m] } else { [m, k] });
        let b = if tb { vec![n, k] } else { vec![k, n] };
        check(vec![rand_input(&a, -1.0, 1.0, seed), rand_input(&b, -1.0, 1.0, seed + 1)], &[0, 1], &move |g, x| {
            op(g, Op::MatMul, &[x[0], x[1]], &[("transpose_a", Attr::Bool(ta)), ("transpose_b", Attr::Bool(tb))])
        });
    }

    #[test]
    fn random_convs(c in 1u64..3, hw in 3u64..6, kh in 1u64..3, s in 1i64..3, p in 0i64..2, seed in 0u64..1000) {
        let (x, w) = (vec![1, c, hw, hw + 1], vec![2, c, kh, kh]);
        let attrs = conv_attrs([s, s], [p, 0, 0, p], [1, 1], 1);
        check(vec![rand_input(&x, -1.0, 1.0, seed), rand_input(&w, -1.0, 1.0, seed + 1)], &[0, 1], &move |g, v| op(g, Op::Conv, &[v[0], v[1]], &attrs));
    }
}
