//! The Cranelift backend against the interpreter: every example (as written and after the
//! default pipeline) and random fused elementwise graphs on random broadcast shapes and odd
//! sizes give the interpreter's results (1e-5 relative for f32), and bad values (NaN, Inf)
//! behave alike.

mod common;

use common::examples;
use graphc::lower::cpu::{matmul_plan, plan, CpuKernels};
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_ir::{parse_module, print_module, Attr, DType, Graph, Module, NodeSpec, Op, TensorType, Type, Value};
use graphc_runtime::random::random_request;
use graphc_runtime::{ErrorKind, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use std::sync::Arc;

fn optimize(m: &Module) -> Module {
    let mut out = m.clone();
    PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut out, &mut |_| {}).unwrap();
    out
}

type Outcome = Result<Vec<Option<Tensor>>, ErrorKind>;

fn options() -> SessionOptions {
    SessionOptions { detect_deadlock: true, ..Default::default() }
}

/// Each graph once, in order, with seeded inputs (or the given feeds).
fn run_all(s: &Session, m: &Module, feeds: Option<&[(String, Arc<Tensor>)]>) -> Vec<Outcome> {
    m.graphs
        .iter()
        .map(|g| {
            let mut req = random_request(g, 11).expect("small random inputs");
            if let Some(f) = feeds {
                req.feeds = f.to_vec();
            }
            s.run(req).map(|o| o.values.iter().map(|v| v.as_tensor().cloned()).collect()).map_err(|e| e.kind)
        })
        .collect()
}

/// What SPEC §12 allows a compiled node: 1e-5 relative, absolute below 1.
const NODE_TOLERANCE: f64 = 1e-5;

fn close(x: &Tensor, y: &Tensor, what: &str) {
    close_within(x, y, what, NODE_TOLERANCE)
}

fn close_within(x: &Tensor, y: &Tensor, what: &str, tol: f64) {
    assert_eq!(x.ty(), y.ty(), "{what}");
    for (i, (a, b)) in x.to_f64_vec().iter().zip(y.to_f64_vec()).enumerate() {
        let ok = *a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * a.abs().max(1.0);
        assert!(ok, "{what}: element {i}: interpreter {a}, jit {b}");
    }
}

fn assert_same(a: &[Outcome], b: &[Outcome], what: &str) {
    assert_same_within(a, b, what, NODE_TOLERANCE)
}

fn assert_same_within(a: &[Outcome], b: &[Outcome], what: &str, tol: f64) {
    for (x, y) in a.iter().zip(b) {
        match (x, y) {
            (Ok(x), Ok(y)) => {
                for (p, q) in x.iter().zip(y) {
                    match (p, q) {
                        (Some(p), Some(q)) => close_within(p, q, what, tol),
                        (None, None) => {}
                        _ => panic!("{what}: tensor vs non-tensor"),
                    }
                }
            }
            (Err(x), Err(y)) => assert_eq!(x, y, "{what}"),
            _ => panic!("{what}: interpreter {x:?}, jit {y:?}"),
        }
    }
}

/// Runs a module on the interpreter and on the JIT; returns how many nodes were compiled.
fn compare(m: &Module, what: &str, feeds: Option<&[(String, Arc<Tensor>)]>) -> usize {
    let interp = Session::new(m.clone(), options()).unwrap();
    let kernels = CpuKernels::compile(m).unwrap_or_else(|e| panic!("{what}: {e}"));
    let compiled = kernels.len();
    let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
    assert_same(&run_all(&interp, m, feeds), &run_all(&jit, m, feeds), what);
    compiled
}

/// Every compiled node of `m`'s graph bodies, run on the operands the interpreter computed,
/// against the interpreter's results for it: the per-node agreement of SPEC §12. Returns how
/// many nodes were checked.
fn compare_per_node(m: &Module, what: &str) -> usize {
    // Every value gets a name to fetch it by.
    let mut m = m.clone();
    for g in &mut m.graphs {
        let unnamed: Vec<Value> = g.values.keys().filter(|&v| g.values[v].name.is_none()).collect();
        for (i, v) in unnamed.into_iter().enumerate() {
            g.set_name(v, &format!("unnamed{i}"));
        }
    }
    let interp = Session::new(m.clone(), options()).unwrap();
    let kernels = CpuKernels::compile(&m).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut checked = 0;
    for g in &m.graphs {
        for &n in &g.regions[g.body].nodes {
            let nd = &g.nodes[n];
            let name = |v: Value| format!("%{}", g.values[v].name.clone().expect("every value is named"));
            let mut req = random_request(g, 11).expect("small random inputs");
            req.fetches = nd.operands.iter().chain(&nd.results).map(|&v| name(v)).collect();
            let Ok(out) = interp.run(req) else { continue };
            let Some(inputs) = (0..nd.operands.len()).map(|i| out.values[i].as_tensor()).collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            use graphc_runtime::CompiledKernels;
            let pool = graphc_runtime::BufferPool::default();
            let shared = inputs.iter().map(|&t| std::sync::Arc::new(t.clone())).collect();
            let mut operands = graphc_runtime::Operands::new(shared, &pool);
            let Some(got) = kernels.run(&g.name, n, &mut operands) else { continue };
            let got = got.unwrap_or_else(|e| panic!("{what}: node {:?}: {e}", nd.op));
            // A product's sums may run in another order: its error is relative to the sum of
            // the terms' magnitudes, (|A||B|)_ij, not to the (possibly cancelled) result.
            let scale = matmul_plan(g, n).map(|mp| {
                let f = |t: &Tensor| match t {
                    Tensor::F32(a) => a.clone().into_dimensionality::<ndarray::Ix2>().unwrap().mapv(f32::abs),
                    _ => panic!("f32 factors"),
                };
                f(inputs[mp.lhs]).dot(&f(inputs[mp.rhs]))
            });
            for (k, t) in got.iter().enumerate() {
                let want = out.values[nd.operands.len() + k].as_tensor().expect("kernel results are tensors");
                let what = format!("{what}: {:?} -> {}", nd.op, name(nd.results[k]));
                match (&scale, want, t) {
                    (Some(scale), Tensor::F32(w), Tensor::F32(g)) => {
                        for (i, ((a, b), s)) in w.iter().zip(g.iter()).zip(scale.iter()).enumerate() {
                            let ok = a == b
                                || (a.is_nan() && b.is_nan())
                                || (a - b).abs() <= NODE_TOLERANCE as f32 * s.max(a.abs()).max(1.0);
                            assert!(ok, "{what}: element {i}: interpreter {a}, jit {b}, terms {s}");
                        }
                    }
                    _ => close(want, t, &what),
                }
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_example_runs_alike_compiled() {
    let mut compiled = 0;
    for (name, text) in examples() {
        let m = parse_module(&text).unwrap();
        for (m, what) in [(m.clone(), name.clone()), (optimize(&m), format!("{name} after the pipeline"))] {
            compiled += compare_per_node(&m, &what);
            // End to end, each node's rounding differences pass through the nodes after it:
            // six layers of 512-term products and tanh (two_branches.gir) take 1e-5 per node
            // past 1e-5 at the end.
            let interp = Session::new(m.clone(), options()).unwrap();
            let jit = Session::with_compiled(m.clone(), options(), CpuKernels::compile(&m).unwrap()).unwrap();
            assert_same_within(&run_all(&interp, &m, None), &run_all(&jit, &m, None), &what, 1e-4);
        }
    }
    assert!(compiled >= 20, "the examples hold elementwise kernels: {compiled} compiled");
}

/// A random fused elementwise DAG over inputs of shapes broadcasting to `[r, c]`.
fn random_graph(r: u64, c: u64, ops: &[(u8, u8, u8)]) -> Module {
    let mut g = Graph::new("g");
    let body = g.body;
    let mut vals: Vec<Value> = vec![
        g.add_input("x", Type::tensor(DType::F32, [r, c])),
        g.add_input("row", Type::tensor(DType::F32, [c])),
        g.add_input("col", Type::tensor(DType::F32, [r, 1])),
        g.add_input("s", Type::tensor(DType::F32, [])),
    ];
    for &(kind, a, b) in ops {
        let x = vals[a as usize % vals.len()];
        let y = vals[b as usize % vals.len()];
        let spec = match kind % 19 {
            0 => NodeSpec::new(Op::Add, vec![x, y]),
            1 => NodeSpec::new(Op::Mul, vec![x, y]),
            2 => NodeSpec::new(Op::Sub, vec![x, y]),
            3 => NodeSpec::new(Op::Div, vec![x, y]),
            4 => NodeSpec::new(Op::Max, vec![x, y]),
            5 => NodeSpec::new(Op::Min, vec![x, y]),
            6 => NodeSpec::new(Op::Tanh, vec![x]),
            7 => NodeSpec::new(Op::Exp, vec![x]),
            8 => NodeSpec::new(Op::Relu, vec![x]),
            9 => NodeSpec::new(Op::Neg, vec![x]),
            10 => NodeSpec::new(Op::Sigmoid, vec![x]),
            11 => NodeSpec::new(Op::Abs, vec![x]),
            12 => NodeSpec::new(Op::Sqrt, vec![x]),
            13 => NodeSpec::new(Op::Log, vec![x]),
            14 => NodeSpec::new(Op::Erf, vec![x]),
            15 => NodeSpec::new(Op::Pow, vec![x, y]),
            16 => {
                let Ok(m) = g.add(body, NodeSpec::new(Op::Less, vec![x, y])) else { continue };
                NodeSpec::new(Op::Select, vec![m[0], x, y])
            }
            17 => {
                let t = TensorType::new(DType::F32, []);
                let lit = graphc_ir::TensorLiteral::new(t, graphc_ir::TensorData::F32(vec![0.5 + a as f32])).unwrap();
                let k = g.add(body, NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(lit))).unwrap()[0];
                NodeSpec::new(Op::Mul, vec![x, k])
            }
            _ => NodeSpec::new(Op::Broadcast, vec![x]).attr("shape", Attr::Ints(vec![r as i64, c as i64])),
        };
        if let Ok(v) = g.add(body, spec) {
            vals.push(v[0]);
        }
    }
    let outs: Vec<(String, Value)> =
        vals.iter().rev().take(2).enumerate().map(|(i, &v)| (format!("y{i}"), v)).collect();
    g.set_outputs(outs);
    Module { graphs: vec![g], end_comments: vec![] }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_elementwise_graphs_run_alike_compiled(
        r in prop_oneof![Just(1u64), Just(3), Just(7), Just(64)],
        c in prop_oneof![Just(1u64), Just(5), Just(16), Just(1023)],
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u8>()), 1..16),
    ) {
        let m = random_graph(r, c, &ops);
        compare(&m, &print_module(&m), None);
        compare(&optimize(&m), &print_module(&m), None);
    }
}

#[test]
fn nan_and_inf_inputs_behave_as_in_the_interpreter() {
    let text = "graph @g(%x: f32[9], %y: f32[9]) -> (a: f32[9], b: f32[9]) {\n  %m = max %x, %y : f32[9]\n  %t = tanh %m : f32[9]\n  %d = div %x, %y : f32[9]\n  %e = exp %d : f32[9]\n  %a = add %t, %e : f32[9]\n  %b = relu %d : f32[9]\n  return %a, %b\n}\n";
    let m = parse_module(text).unwrap();
    let v = |xs: [f32; 9]| Arc::new(Tensor::F32(ndarray::arr1(&xs).into_dyn()));
    let x = v([f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -0.0, 1.0, 1e30, -1e-30, 3.0]);
    let y = v([1.0, 1.0, f32::NAN, 0.0, 0.0, f32::INFINITY, 1e-30, 0.0, -2.0]);
    let feeds = vec![("x".to_string(), x), ("y".to_string(), y)];
    for m in [m.clone(), optimize(&m)] {
        assert!(compare(&m, "nan/inf", Some(&feeds)) >= 1);
    }
}

#[test]
fn max_and_min_rows_propagate_nan_from_any_column() {
    // 37 columns: two vector chains, a vector tail and a scalar tail; a NaN in each of them,
    // and a row of signed zeros and infinities.
    // A kernel's results have the row's full shape, so the reductions reach them through a
    // subtraction: a NaN the reduction dropped would leave the row's other elements finite.
    let text = "graph @g(%x: f32[6,37]) -> (y: f32[6,37]) {\n  %hi = reduce_max %x {axes = [-1], keep_dims = true} : f32[6,1]\n  %lo = reduce_min %x {axes = [-1], keep_dims = true} : f32[6,1]\n  %a = sub %x, %hi : f32[6,37]\n  %b = sub %x, %lo : f32[6,37]\n  %y = add %a, %b : f32[6,37]\n  return %y\n}\n";
    let m = parse_module(text).unwrap();
    let nan_at = [0, 5, 33, 36];
    let xs: Vec<f32> = (0..6 * 37)
        .map(|i| {
            let (r, c) = (i / 37, i % 37);
            match r {
                _ if r < 4 && c == nan_at[r] => f32::NAN,
                4 => [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY][c % 4],
                _ => ((i as f32) * 0.77).sin() * 5.0,
            }
        })
        .collect();
    let x = Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(vec![6, 37], xs).unwrap()));
    let feeds = vec![("x".to_string(), x)];
    // One kernel: both reductions and the arithmetic.
    assert_eq!(compare(&optimize(&m), "max/min", Some(&feeds)), 1);
}

#[test]
fn row_reductions_are_kernel_results() {
    // Reductions as results of their own (one value per row) beside full-shape ones, alone
    // and fused; 37 columns reach every part of the column loop.
    let text = "graph @g(%x: f32[7,37]) -> (d: f32[7,37], mean: f32[7,1], ss: f32[7,1], hi: f32[7,1], lo: f32[7,1]) {
  %mean = reduce_mean %x {axes = [-1], keep_dims = true} : f32[7,1]
  %d = sub %x, %mean : f32[7,37]
  %sq = mul %d, %d : f32[7,37]
  %ss = reduce_sum %sq {axes = [-1], keep_dims = true} : f32[7,1]
  %hi = reduce_max %x {axes = [-1], keep_dims = true} : f32[7,1]
  %nx = neg %x : f32[7,37]
  %lo = reduce_min %nx {axes = [1], keep_dims = true} : f32[7,1]
  return %d, %mean, %ss, %hi, %lo
}
";
    let m = parse_module(text).unwrap();
    assert_eq!(compare(&m, "as written", None), 7, "every node is a kernel");
    assert!(compare(&optimize(&m), "fused", None) >= 2);
    assert!(compare_per_node(&optimize(&m), "fused per node") >= 2);
}

#[test]
fn softmax_over_extreme_rows_matches_the_interpreter() {
    // Its exponential of x - max(x) is the non-positive one: rows that reach far below the
    // maximum (denormal and zero exponentials), infinities and NaN.
    let text =
        "graph @g(%x: f32[6,11]) -> (y: f32[6,11]) {\n  %y = softmax %x {axis = -1} : f32[6,11]\n  return %y\n}\n";
    let m = optimize(&parse_module(text).unwrap());
    let kernels = CpuKernels::compile(&m).unwrap();
    assert_eq!(kernels.len(), 1, "softmax is one kernel");
    let g = &m.graphs[0];
    let p = g.regions[g.body].nodes.iter().find_map(|&n| plan(g, n)).expect("a loop plan");
    let exp = p.steps.iter().find_map(|s| match *s {
        graphc::lower::cpu::Step::Unary(Op::Exp, a) => Some(a),
        _ => None,
    });
    assert!(p.at_most_zero(exp.expect("an exponential")), "{:?}", p.steps);
    // Its sum is at least 1: the division needs no guard against a subnormal divisor.
    assert!(p.reduces.iter().any(|&r| p.at_least_one(r)), "{:?}", p.steps);
    let mut xs: Vec<f32> = Vec::new();
    for r in 0..6 {
        for c in 0..11 {
            xs.push(match r {
                0 => -10.0 * c as f32,
                1 => 80.0 - 20.0 * c as f32,
                2 if c == 3 => f32::INFINITY,
                3 if c == 5 => f32::NAN,
                4 if c % 2 == 0 => f32::NEG_INFINITY,
                _ => (c as f32 * 0.37).sin() * 3.0,
            });
        }
    }
    let x = Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(vec![6, 11], xs).unwrap()));
    let feeds = vec![("x".to_string(), x)];
    assert_eq!(compare(&m, "softmax", Some(&feeds)), 1);
}

#[test]
fn planning_takes_elementwise_kernels_and_leaves_the_rest() {
    let text = "graph @g(%x: f32[4,8], %w: f32[8,8], %b: f32[8], %i: i32[4]) -> (y: f32[4,8], z: f32[4,8], k: i32[4]) {\n  %h = matmul %x, %w : f32[4,8]\n  %y = add %h, %b : f32[4,8]\n  %z = transpose %y {perm = [0, 1]} : f32[4,8]\n  %k = neg %i : i32[4]\n  return %y, %z, %k\n}\n";
    let m = parse_module(text).unwrap();
    let g = &m.graphs[0];
    let by_name = |n: &str| g.producer(g.value_named(n).unwrap()).unwrap();
    assert!(plan(g, by_name("h")).is_none(), "a matmul is not a loop");
    let mm = matmul_plan(g, by_name("h")).expect("a 2-D f32 matmul");
    assert_eq!((mm.m, mm.k, mm.n), (4, 8, 8));
    assert!(mm.epilogue.is_none());
    let p = plan(g, by_name("y")).expect("an f32 add with a broadcast row");
    assert_eq!((p.rows, p.cols), (4, 8));
    assert_eq!((p.inputs[1].row_stride, p.inputs[1].col_stride), (0, 1), "the bias row is read for every row");
    assert!(plan(g, by_name("z")).is_none());
    assert!(plan(g, by_name("k")).is_none(), "i32 is not compiled yet");
}

/// The inline exp, tanh and sigmoid across their whole range, from underflow to overflow,
/// against libm in the interpreter.
#[test]
fn inline_transcendentals_match_libm_across_their_range() {
    let n = 4099; // not a multiple of 4: the scalar tail runs too
    let xs: Vec<f32> = (0..n).map(|i| -110.0 + 220.0 * i as f32 / (n - 1) as f32).collect();
    let mut fine: Vec<f32> = (0..n).map(|i| -3.0 + 6.0 * i as f32 / (n - 1) as f32).collect();
    fine.extend([0.0, -0.0, 1e-8, -1e-8, 88.72, 88.73, -87.5, -103.0, -104.5, f32::MAX, f32::MIN]);
    fine.extend([1e-3, -2e-4, 3e-20, -1e-30, 1e-40, -1e-41, 0.34, 0.35, -0.347, 0.625]);
    for (name, xs) in [("wide", xs), ("fine", fine)] {
        let len = xs.len();
        let text = format!(
            "graph @g(%x: f32[{len}]) -> (e: f32[{len}], t: f32[{len}], s: f32[{len}]) {{\n  %e = exp %x : f32[{len}]\n  %t = tanh %x : f32[{len}]\n  %s = sigmoid %x : f32[{len}]\n  return %e, %t, %s\n}}\n"
        );
        let m = parse_module(&text).unwrap();
        let x = Arc::new(Tensor::F32(ndarray::Array1::from(xs).into_dyn()));
        let feeds = vec![("x".to_string(), x)];
        assert_eq!(compare(&m, name, Some(&feeds)), 3);
        assert!(compare(&optimize(&m), name, Some(&feeds)) >= 1);
        // Closer than the tolerance: a few ulp, relative even for tiny results (tanh x ~ x).
        let interp = Session::new(m.clone(), options()).unwrap();
        let jit = Session::with_compiled(m.clone(), options(), CpuKernels::compile(&m).unwrap()).unwrap();
        let (want, got) = (run_all(&interp, &m, Some(&feeds)), run_all(&jit, &m, Some(&feeds)));
        let (Ok(want), Ok(got)) = (&want[0], &got[0]) else { panic!("{name}: the sweep runs") };
        for (k, op) in ["exp", "tanh", "sigmoid"].iter().enumerate() {
            let (Some(Tensor::F32(w)), Some(Tensor::F32(g))) = (&want[k], &got[k]) else { panic!("f32 results") };
            for ((&a, &b), &x) in w.iter().zip(g.iter()).zip(feeds[0].1.to_f64_vec().iter()) {
                let ulps = (a - b).abs() / (a.abs().max(f32::MIN_POSITIVE) * f32::EPSILON);
                // sigmoid and tanh may differ by 1e-38 where they underflow (see codegen.rs).
                let ok = a == b || (a.is_nan() && b.is_nan()) || ulps <= 4.0 || (a - b).abs() < 1e-37;
                assert!(ok, "{name}: {op}({x}) = {a} by libm, {b} compiled ({ulps} ulp)");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Matrix products of odd sizes, alone and fused with a bias, an activation and a
    /// residual (an output fusion), split by rows across threads when large.
    #[test]
    fn matmuls_with_epilogues_run_alike_compiled(
        m in prop_oneof![Just(1u64), Just(7), Just(64), Just(257)],
        k in prop_oneof![Just(1u64), Just(9), Just(128)],
        n in prop_oneof![Just(1u64), Just(5), Just(130)],
        act in 0u8..3,
    ) {
        let act = ["relu", "tanh", "sigmoid"][act as usize];
        let text = format!(
            "graph @g(%a: f32[{m},{k}], %b: f32[{k},{n}], %bias: f32[{n}], %res: f32[{m},{n}]) -> (y: f32[{m},{n}], p: f32[{m},{n}]) {{\n  %p = matmul %a, %b : f32[{m},{n}]\n  %h = add %p, %bias : f32[{m},{n}]\n  %r = {act} %h : f32[{m},{n}]\n  %y = add %r, %res : f32[{m},{n}]\n  return %y, %p\n}}\n"
        );
        let m1 = parse_module(&text).unwrap();
        let fused = optimize(&m1);
        prop_assert!(compare(&m1, &text, None) >= 2);
        prop_assert!(compare(&fused, &print_module(&fused), None) >= 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Row reductions inside input fusions (softmax's max and sum, layernorm's means, one pass
    /// each, softmax's exponentials kept in the scratch row between passes), on odd
    /// row lengths so that vector parts and scalar tails both count, with large values and
    /// signs mixed so that the f64 accumulation matters.
    #[test]
    fn softmax_and_layernorm_run_alike_compiled(
        r in prop_oneof![Just(1u64), Just(3), Just(64)],
        c in prop_oneof![Just(1u64), Just(3), Just(7), Just(1023)],
        scale in prop_oneof![Just(1.0f32), Just(100.0)],
    ) {
        let text = format!(
            "graph @g(%x: f32[{r},{c}], %gamma: f32[{c}], %beta: f32[{c}]) -> (s: f32[{r},{c}], y: f32[{r},{c}], m: f32[{r},{c}]) {{\n  %k = constant {{value = dense<{scale:?}> : f32[]}} : f32[]\n  %xs = mul %x, %k : f32[{r},{c}]\n  %s = softmax %xs {{axis = -1}} : f32[{r},{c}]\n  %mean = reduce_mean %xs {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %d = sub %xs, %mean : f32[{r},{c}]\n  %sq = mul %d, %d : f32[{r},{c}]\n  %var = reduce_mean %sq {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %eps = constant {{value = dense<1.0e-5> : f32[]}} : f32[]\n  %ve = add %var, %eps : f32[{r},1]\n  %sd = sqrt %ve : f32[{r},1]\n  %n = div %d, %sd : f32[{r},{c}]\n  %g = mul %n, %gamma : f32[{r},{c}]\n  %y = add %g, %beta : f32[{r},{c}]\n  %mx = reduce_min %xs {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %m = sub %xs, %mx : f32[{r},{c}]\n  return %s, %y, %m\n}}\n"
        );
        let m = parse_module(&text).unwrap();
        let fused = optimize(&m);
        // All five reductions read rows of %xs: one kernel, a pass per reduction.
        prop_assert!(compare(&fused, &print_module(&fused), None) >= 1, "{}", print_module(&fused));
    }
}
