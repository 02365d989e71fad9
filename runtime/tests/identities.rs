//! Numpy-style identities of the reference kernels on random shapes and values (proptest),
//! and every op of the spec run by the interpreter.

mod common;
use common::*;
use graphc_ir::{parse_module, Op};
use graphc_runtime::kernels::{self, KernelError};
use graphc_runtime::random::{random_request, random_tensor, Range};
use graphc_runtime::{ErrorKind, RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn attrs(pairs: &[(&str, graphc_ir::Attr)]) -> graphc_ir::Attrs {
    let mut a = graphc_ir::Attrs::new();
    for (k, v) in pairs {
        a.set(*k, v.clone());
    }
    a
}

fn eval1(op: Op, a: &graphc_ir::Attrs, inputs: &[&Tensor], out: &Tensor) -> Result<Tensor, KernelError> {
    kernels::eval(op, a, inputs, &[out.ty()]).map(|mut v| v.remove(0))
}

fn int_matrix(rows: usize, cols: usize) -> impl Strategy<Value = Tensor> {
    proptest::collection::vec(-9i64..10, rows * cols).prop_map(move |v| i64t(&[rows, cols], &v))
}

/// A shape of rank 0..=3 with dims 1..=4, and a second shape that broadcasts with it (some
/// dims replaced by 1, some leading dims dropped).
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    proptest::collection::vec(1usize..5, 0..4).prop_flat_map(|a| {
        let n = a.len();
        (Just(a), proptest::collection::vec(any::<bool>(), n), 0..=n).prop_map(|(a, ones, drop)| {
            let b: Vec<usize> = a.iter().zip(&ones).map(|(&d, &one)| if one { 1 } else { d }).skip(drop).collect();
            (a, b)
        })
    })
}

fn index_of(flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    let mut rest = flat;
    for d in (0..shape.len()).rev() {
        idx[d] = rest % shape[d];
        rest /= shape[d];
    }
    idx
}

/// The element of `t` that numpy broadcasting maps output index `out` to.
fn broadcast_elem(t: &[f64], shape: &[usize], out: &[usize]) -> f64 {
    let offset = out.len() - shape.len();
    let mut flat = 0;
    for (d, &dim) in shape.iter().enumerate() {
        let i = if dim == 1 { 0 } else { out[d + offset] };
        flat = flat * dim + i;
    }
    t[flat]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn binary_ops_broadcast_like_an_index_loop((sa, sb) in broadcast_pair(), seed in any::<u64>(), swap in any::<bool>()) {
        let (sa, sb) = if swap { (sb, sa) } else { (sa, sb) };
        let ta = graphc_ir::TensorType::new(graphc_ir::DType::F64, sa.iter().map(|&d| d as u64).collect::<Vec<_>>());
        let tb = graphc_ir::TensorType::new(graphc_ir::DType::F64, sb.iter().map(|&d| d as u64).collect::<Vec<_>>());
        let a = random_tensor(&ta, seed, Range::Default).expect("small random inputs");
        let b = random_tensor(&tb, seed ^ 1, Range::Default).expect("small random inputs");
        let out_shape: Vec<usize> = {
            let n = sa.len().max(sb.len());
            (0..n).map(|i| {
                let da = if i + sa.len() >= n { sa[i + sa.len() - n] } else { 1 };
                let db = if i + sb.len() >= n { sb[i + sb.len() - n] } else { 1 };
                da.max(db)
            }).collect()
        };
        let out_ty = Tensor::zeros(&graphc_ir::TensorType::new(graphc_ir::DType::F64, out_shape.iter().map(|&d| d as u64).collect::<Vec<_>>())).unwrap();
        for (op, f) in [(Op::Sub, (|x, y| x - y) as fn(f64, f64) -> f64), (Op::Mul, |x, y| x * y), (Op::Max, f64::max)] {
            let got = eval1(op, &attrs(&[]), &[&a, &b], &out_ty).unwrap();
            prop_assert_eq!(got.shape(), &out_shape[..]);
            let (av, bv, gv) = (a.to_f64_vec(), b.to_f64_vec(), got.to_f64_vec());
            for (flat, g) in gv.iter().enumerate() {
                let idx = index_of(flat, &out_shape);
                prop_assert_eq!(*g, f(broadcast_elem(&av, &sa, &idx), broadcast_elem(&bv, &sb, &idx)));
            }
        }
    }

    #[test]
    fn matmul_is_associative_on_small_integers(a in int_matrix(3, 4), b in int_matrix(4, 2), c in int_matrix(2, 5)) {
        let mm = |x: &Tensor, y: &Tensor| {
            let out = Tensor::zeros(&graphc_ir::TensorType::new(graphc_ir::DType::I64, [x.shape()[0] as u64, y.shape()[1] as u64])).unwrap();
            eval1(Op::MatMul, &attrs(&[]), &[x, y], &out).unwrap()
        };
        prop_assert_eq!(mm(&mm(&a, &b), &c), mm(&a, &mm(&b, &c)));
    }

    #[test]
    fn batched_matmul_is_a_loop_of_products(
        batch in proptest::collection::vec(1usize..4, 0..3),
        ones in proptest::collection::vec(any::<bool>(), 3),
        drop_lhs in 0usize..3,
        (m, k, n) in (1usize..4, 1usize..4, 1usize..4),
        seed in any::<u64>(),
    ) {
        // The lhs batch loses some leading dims and has some dims set to 1; both broadcast.
        let lhs_batch: Vec<usize> = batch.iter().zip(&ones).map(|(&d, &o)| if o { 1 } else { d }).skip(drop_lhs.min(batch.len())).collect();
        let shape = |b: &[usize], r: usize, c: usize| b.iter().chain([&r, &c]).map(|&d| d as u64).collect::<Vec<_>>();
        let a = random_tensor(&graphc_ir::TensorType::new(graphc_ir::DType::I64, shape(&lhs_batch, m, k)), seed, Range::Below(7)).expect("small random inputs");
        let b = random_tensor(&graphc_ir::TensorType::new(graphc_ir::DType::I64, shape(&batch, k, n)), seed ^ 3, Range::Below(7)).expect("small random inputs");
        let out_ty = graphc_ir::TensorType::new(graphc_ir::DType::I64, shape(&batch, m, n));
        let got = kernels::eval(Op::MatMul, &attrs(&[]), &[&a, &b], std::slice::from_ref(&out_ty)).unwrap().remove(0);
        let (av, bv, gv) = (a.to_f64_vec(), b.to_f64_vec(), got.to_f64_vec());
        let count: usize = batch.iter().product();
        for i in 0..count {
            let idx = index_of(i, &batch);
            let lhs_flat = {
                let off = idx.len() - lhs_batch.len();
                lhs_batch.iter().enumerate().fold(0, |f, (d, &dim)| f * dim + if dim == 1 { 0 } else { idx[d + off] })
            };
            for r in 0..m {
                for c in 0..n {
                    let want: f64 = (0..k).map(|p| av[(lhs_flat * m + r) * k + p] * bv[(i * k + p) * n + c]).sum();
                    prop_assert_eq!(gv[(i * m + r) * n + c], want);
                }
            }
        }
    }

    #[test]
    fn softmax_rows_sum_to_one(rows in 1usize..5, cols in 1usize..40, seed in any::<u64>(), scale in 0.1f64..100.0) {
        let ty = graphc_ir::TensorType::new(graphc_ir::DType::F32, [rows as u64, cols as u64]);
        let x = random_tensor(&ty, seed, Range::Default).expect("small random inputs");
        let x = eval1(Op::Mul, &attrs(&[]), &[&x, &Tensor::scalar_f32(scale as f32)], &x).unwrap();
        let y = eval1(Op::Softmax, &attrs(&[]), &[&x], &x).unwrap();
        let v = y.to_f64_vec();
        for r in 0..rows {
            let row = &v[r * cols..(r + 1) * cols];
            prop_assert!(row.iter().all(|&p| (0.0..=1.0).contains(&p)));
            prop_assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn summing_all_axes_at_once_equals_one_at_a_time(shape in proptest::collection::vec(1usize..5, 1..4), seed in any::<u64>()) {
        let ty = graphc_ir::TensorType::new(graphc_ir::DType::I64, shape.iter().map(|&d| d as u64).collect::<Vec<_>>());
        let x = random_tensor(&ty, seed, Range::Below(100)).expect("small random inputs");
        let scalar = i64t(&[], &[0]);
        let all: Vec<i64> = (0..shape.len() as i64).collect();
        let total = eval1(Op::ReduceSum, &attrs(&[("axes", graphc_ir::Attr::Ints(all))]), &[&x], &scalar).unwrap();
        let mut cur = x.clone();
        while !cur.shape().is_empty() {
            let mut s = cur.shape().to_vec();
            s.pop();
            let out = Tensor::zeros(&graphc_ir::TensorType::new(graphc_ir::DType::I64, s.iter().map(|&d| d as u64).collect::<Vec<_>>())).unwrap();
            cur = eval1(Op::ReduceSum, &attrs(&[("axes", graphc_ir::Attr::Ints(vec![-1]))]), &[&cur], &out).unwrap();
        }
        prop_assert_eq!(&total, &cur);
        prop_assert_eq!(total.to_f64_vec()[0], x.to_f64_vec().iter().sum::<f64>());
    }

    #[test]
    fn split_undoes_concat(rows in 1usize..4, a in 0usize..4, b in 0usize..4, seed in any::<u64>()) {
        let ta = graphc_ir::TensorType::new(graphc_ir::DType::F32, [rows as u64, a as u64]);
        let tb = graphc_ir::TensorType::new(graphc_ir::DType::F32, [rows as u64, b as u64]);
        let (x, y) = (random_tensor(&ta, seed, Range::Default).expect("small random inputs"), random_tensor(&tb, seed ^ 7, Range::Default).expect("small random inputs"));
        let joined = kernels::eval(Op::Concat, &attrs(&[("axis", graphc_ir::Attr::Int(1))]), &[&x, &y], &[]).unwrap().remove(0);
        let parts = kernels::eval(
            Op::Split,
            &attrs(&[("axis", graphc_ir::Attr::Int(-1)), ("sizes", graphc_ir::Attr::Ints(vec![a as i64, b as i64]))]),
            &[&joined],
            &[],
        ).unwrap();
        prop_assert_eq!(parts, vec![x, y]);
    }
}

/// Runs every graph of a module with seeded random inputs; blocking ops that can never be woken
/// (a lone dequeue or recv) fail as deadlocks rather than hang.
fn run_all(src: &str) -> Vec<(String, Result<(), graphc_runtime::RunError>)> {
    let m = parse_module(src).unwrap();
    let s = Session::new(m.clone(), SessionOptions { detect_deadlock: true, ..Default::default() }).unwrap();
    m.graphs
        .iter()
        .map(|g| (g.name.clone(), s.run(random_request(g, 1).expect("small random inputs")).map(|_| ())))
        .collect()
}

#[test]
fn every_op_runs_in_the_interpreter() {
    let mut covered = BTreeSet::new();
    for &op in Op::ALL {
        let example = op.def().example;
        for (graph, result) in run_all(example) {
            match (op, result) {
                (_, Ok(())) => {
                    let m = parse_module(example).unwrap();
                    let g = m.graph(&graph).unwrap();
                    covered.extend(g.walk().into_iter().map(|n| g.nodes[n].op));
                }
                // Alone, these wait for a producer that never comes.
                (Op::Dequeue | Op::Recv, Err(e)) if e.kind == ErrorKind::Deadlock => {}
                // The autodiff lowering (the compiler's) replaces it; nothing runs it.
                (Op::Grad, Err(e)) if e.message.contains("grad must be expanded by the autodiff lowering") => {
                    covered.insert(Op::Grad);
                }
                (_, Err(e)) => panic!("the example of '{}' failed: {e}", op.name()),
            }
        }
    }
    // Dequeue and recv run with their producers: the queue example, and a send/recv pair.
    let pair = format!("{}\n{}", Op::Send.def().example, Op::Recv.def().example.replace("@g", "@h"));
    let s = Session::new(parse_module(&pair).unwrap(), SessionOptions::default()).unwrap();
    let x = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let out = s.run_step(vec![RunRequest::new("g").feed("x", x.clone()), RunRequest::new("h")]).unwrap();
    assert_eq!(out[1].tensor(0).unwrap(), &x);
    covered.insert(Op::Recv);
    let missing: Vec<&str> = Op::ALL.iter().filter(|op| !covered.contains(op)).map(|op| op.name()).collect();
    assert!(missing.is_empty(), "ops never run: {missing:?}");
}
