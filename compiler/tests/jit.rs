//! The Cranelift backend against the interpreter: every example (as written and after the
//! default pipeline) and random fused elementwise graphs on random broadcast shapes and odd
//! sizes give the interpreter's results within SPEC §12's bounds (`common/close.rs`), and bad
//! values (NaN, Inf) behave alike; kernels never touch memory outside their plans' buffers.

mod common;

use common::close::{assert_close_spec, assert_close_within, bound, Bound};
use common::examples;
use graphc::lower::cpu::{CompileOptions, Isa};
use graphc::lower::plan::{matmul_plan, plan};
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

fn assert_same(a: &[Outcome], b: &[Outcome], what: &str) {
    assert_same_within(a, b, what, bound("graph"))
}

/// The interpreter's outcomes `a` against the JIT's `b`: the same errors, or results within `b`.
fn assert_same_within(a: &[Outcome], b: &[Outcome], what: &str, bnd: Bound) {
    for (x, y) in a.iter().zip(b) {
        match (x, y) {
            (Ok(x), Ok(y)) => {
                for (p, q) in x.iter().zip(y) {
                    match (p, q) {
                        (Some(p), Some(q)) => assert_close_within(what, q, p, bnd),
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
    compare_with(m, what, feeds, &CompileOptions::default())
}

/// `compare`, with kernels compiled with `opts`.
fn compare_with(m: &Module, what: &str, feeds: Option<&[(String, Arc<Tensor>)]>, opts: &CompileOptions) -> usize {
    compare_within(m, what, feeds, opts, bound("graph"))
}

/// `compare_with`, the results within `bnd`.
fn compare_within(
    m: &Module,
    what: &str,
    feeds: Option<&[(String, Arc<Tensor>)]>,
    opts: &CompileOptions,
    bnd: Bound,
) -> usize {
    let interp = Session::new(m.clone(), options()).unwrap();
    let kernels = common::cpu_kernels(m, opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    let compiled = kernels.len();
    let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
    assert_same_within(&run_all(&interp, m, feeds), &run_all(&jit, m, feeds), what, bnd);
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
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
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
            // the terms' magnitudes, (|A||B|)_ij, not to the (possibly cancelled) result, A and
            // B the factors as the product reads them (a flagged one transposed).
            // A batched product's terms are those of its reference kernel on |A| and |B|.
            let scale = matmul_plan(g, n).map(|mp| {
                let abs = |t: &Tensor| match t {
                    Tensor::F32(a) => Tensor::F32(a.mapv(f32::abs)),
                    _ => panic!("f32 factors"),
                };
                let mut attrs = graphc_ir::Attrs::new();
                attrs.set("transpose_a", graphc_ir::Attr::Bool(mp.transpose_a));
                attrs.set("transpose_b", graphc_ir::Attr::Bool(mp.transpose_b));
                let (a, b) = (abs(inputs[mp.lhs]), abs(inputs[mp.rhs]));
                let out = graphc_runtime::kernels::eval(graphc_ir::Op::MatMul, &attrs, &[&a, &b], &[mp.out()]).unwrap();
                match out.into_iter().next() {
                    Some(Tensor::F32(s)) => s,
                    _ => panic!("an f32 product"),
                }
            });
            for (k, t) in got.iter().enumerate() {
                let want = out.values[nd.operands.len() + k].as_tensor().expect("kernel results are tensors");
                let what = format!("{what}: {:?} -> {}", nd.op, name(nd.results[k]));
                match (&scale, want, t) {
                    (Some(scale), Tensor::F32(w), Tensor::F32(g)) => {
                        for (i, ((a, b), s)) in w.iter().zip(g.iter()).zip(scale.iter()).enumerate() {
                            // SPEC §12: 1e-5 relative to the terms' magnitudes.
                            let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-5 * s.max(a.abs());
                            assert!(ok, "{what}: element {i}: interpreter {a}, jit {b}, terms {s}");
                        }
                    }
                    // A lone op within its own bound; a fusion as a chain.
                    _ => assert_close_spec(&format!("{} {what}", nd.op.name()), t, want),
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
            // six layers of 512-term products and tanh (two_branches.gir) take 1e-5 per node,
            // relative to terms of magnitude about 1, to 1e-4 at the end, absolute where
            // cancellation made a result small.
            let interp = Session::new(m.clone(), options()).unwrap();
            let jit = Session::with_compiled(
                m.clone(),
                options(),
                common::cpu_kernels(&m, &CompileOptions::default()).unwrap(),
            )
            .unwrap();
            assert_same_within(&run_all(&interp, &m, None), &run_all(&jit, &m, None), &what, Bound::Rel(1e-4, 1e-4));
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
    // A fixed seed: CI sees the same cases on every run (a long run can vary it).
    #![proptest_config(ProptestConfig { cases: 48, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

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
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    assert_eq!(kernels.len(), 1, "softmax is one kernel");
    let g = &m.graphs[0];
    let p = g.regions[g.body].nodes.iter().find_map(|&n| plan(g, n)).expect("a loop plan");
    let exp = p.steps.iter().find_map(|s| match *s {
        graphc::lower::plan::Step::Unary(Op::Exp, a) => Some(a),
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

/// Every f32 bit pattern with a stride of a prime (so every exponent, denormals and both signs
/// included), the neighbourhoods of the points where results overflow, underflow and cut
/// off, and the specials.
fn f32_sweep() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(40_009).map(f32::from_bits).collect();
    for centre in [0.0f32, 1.0, -1.0, 0.35, -0.35, 9.0, -9.0, 87.3, -87.3, 88.72, -88.72, -103.9, -104.0, 20.0, -20.0] {
        let mut x = centre;
        for _ in 0..200 {
            xs.extend([x, -x]);
            x = f32::from_bits(x.to_bits() + 1);
        }
        xs.extend((0..400).map(|i| centre + (i as f32 - 200.0) * 1e-3));
    }
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, -f32::MIN_POSITIVE]);
    xs.extend([f32::from_bits(1), f32::from_bits(0x8000_0001), f32::MAX, f32::MIN, 1e-40, -1e-41]);
    xs
}

/// The inline exp, tanh, sigmoid and erf, and the ops with their own rules at zeros and NaN
/// (relu, max, min), over `f32_sweep`, each against the interpreter within its SPEC §12
/// bound: exp and sigmoid through the denormals to zero, as libm and the reference compute
/// them; on the host's instructions and on SSE alone (no fused multiply-adds).
#[test]
fn elementwise_ops_match_the_reference_within_their_bounds() {
    let xs = f32_sweep();
    let len = xs.len();
    // Pairs for max and min: every value against +0, -0, NaN and its neighbour in the sweep.
    let ys: Vec<f32> = (0..len).map(|i| [0.0, -0.0, f32::NAN, xs[(i + 1) % len]][i % 4]).collect();
    let ops = ["exp", "tanh", "sigmoid", "erf", "relu", "neg", "abs"];
    let mut text = format!("graph @g(%x: f32[{len}], %y: f32[{len}]) -> (");
    let outs: Vec<String> =
        ops.iter().chain(&["max", "min", "maxr", "minr"]).map(|o| format!("{o}: f32[{len}]")).collect();
    text += &outs.join(", ");
    text += ") {\n";
    for op in ops {
        text += &format!("  %{op} = {op} %x : f32[{len}]\n");
    }
    text += &format!("  %max = max %x, %y : f32[{len}]\n  %min = min %x, %y : f32[{len}]\n");
    text += &format!("  %maxr = max %y, %x : f32[{len}]\n  %minr = min %y, %x : f32[{len}]\n");
    let names: Vec<String> = ops.iter().chain(&["max", "min", "maxr", "minr"]).map(|o| format!("%{o}")).collect();
    text += &format!("  return {}\n}}\n", names.join(", "));
    let m = parse_module(&text).unwrap();
    let t = |v: &[f32]| Arc::new(Tensor::F32(ndarray::Array1::from(v.to_vec()).into_dyn()));
    let feeds = vec![("x".to_string(), t(&xs)), ("y".to_string(), t(&ys))];
    let interp = Session::new(m.clone(), options()).unwrap();
    for isa in [Isa::Native, Isa::Sse] {
        let opts = CompileOptions { isa, ..Default::default() };
        let kernels = common::cpu_kernels(&m, &opts).unwrap();
        assert_eq!(kernels.len(), 11);
        let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
        let (want, got) = (run_all(&interp, &m, Some(&feeds)), run_all(&jit, &m, Some(&feeds)));
        let (Ok(want), Ok(got)) = (&want[0], &got[0]) else { panic!("the sweep runs") };
        for (k, op) in ops.iter().chain(&["max", "min", "max", "min"]).enumerate() {
            let (w, g) = (want[k].as_ref().unwrap(), got[k].as_ref().unwrap());
            assert_close_spec(&format!("{op} ({isa:?}, output {k})"), g, w);
        }
    }
}

/// `pow` by a constant 2 or 3 (inline: the product in f64, converted to f32), by another constant
/// (a call to the runtime's `powf`) and by a tensor, over `f32_sweep`: bit for bit the
/// reference's (SPEC §12: `pow` is exact), overflow to infinity, zeros' signs and NaN included.
#[test]
fn pow_by_squares_cubes_and_other_exponents_matches_the_reference_exactly() {
    let xs = f32_sweep();
    let len = xs.len();
    let ys: Vec<f32> = (0..len).map(|i| [2.0, 3.0, 0.5, -1.0, 2.5][i % 5]).collect();
    let mut text = format!(
        "graph @g(%x: f32[{len}], %y: f32[{len}]) -> (sq: f32[{len}], cube: f32[{len}], half: f32[{len}], by: f32[{len}]) {{\n"
    );
    for (name, e) in [("two", "2.0"), ("three", "3.0"), ("point5", "0.5")] {
        text += &format!("  %{name} = constant {{value = dense<{e}> : f32[]}} : f32[]\n");
    }
    // Each fused with a neighbour, as GELU's cube is.
    text += &format!("  %sq = pow %x, %two : f32[{len}]\n  %c = pow %x, %three : f32[{len}]\n");
    text += &format!("  %cube = neg %c : f32[{len}]\n  %half = pow %x, %point5 : f32[{len}]\n");
    text += &format!("  %by = pow %x, %y : f32[{len}]\n  return %sq, %cube, %half, %by\n}}\n");
    let t = |v: &[f32]| Arc::new(Tensor::F32(ndarray::Array1::from(v.to_vec()).into_dyn()));
    let feeds = vec![("x".to_string(), t(&xs)), ("y".to_string(), t(&ys))];
    let m = optimize(&parse_module(&text).unwrap());
    for isa in [Isa::Native, Isa::Sse] {
        let opts = CompileOptions { isa, ..Default::default() };
        assert!(compare_within(&m, "pow", Some(&feeds), &opts, Bound::Ulps(0, 0.0)) >= 1);
    }
    // A square is correctly rounded: the f32 product's bits.
    for &x in &xs {
        let (p, q) = (graphc_runtime::kernels::elem::powf(x, 2.0), x * x);
        assert!(p.to_bits() == q.to_bits() || p.is_nan() && q.is_nan(), "{x}^2: {p} vs {q}");
    }
}

/// A division by a scale the kernel reads or is given as a constant (a quantizer's
/// `x / scale`, rounded to an integer after) is the exact quotient, not a product by the reciprocal: -2.5 / 0.019607844 is
/// -127.49999, which a reciprocal makes -127.5 (and the rounding -128, ONNX's
/// DynamicQuantizeLinear off by one).
#[test]
fn a_division_by_a_scale_operand_is_exact() {
    let text = "graph @g(%x: f32[6], %s: f32[]) -> (y: f32[6]) {\n  %q = div %x, %s : f32[6]\n  %y = round %q : f32[6]\n  return %y\n}\n";
    let x = Arc::new(Tensor::F32(ndarray::Array1::from(vec![0.0f32, 2.0, -3.0, -2.5, 1.34, 0.5]).into_dyn()));
    let s = Arc::new(Tensor::F32(ndarray::arr0(0.019607844f32).into_dyn()));
    let feeds = vec![("x".to_string(), x), ("s".to_string(), s)];
    let m = optimize(&parse_module(text).unwrap());
    assert!(compare_within(&m, "x / scale", Some(&feeds), &CompileOptions::default(), Bound::Ulps(0, 0.0)) >= 1);
    // The same scale as a constant (QuantizeLinear's initializer).
    let text = "graph @g(%x: f32[6]) -> (y: f32[6]) {\n  %s = constant {value = dense<0.019607844> : f32[]} : f32[]\n  %q = div %x, %s : f32[6]\n  %y = round %q : f32[6]\n  return %y\n}\n";
    let m = optimize(&parse_module(text).unwrap());
    assert!(
        compare_within(&m, "x / constant", Some(&feeds[..1]), &CompileOptions::default(), Bound::Ulps(0, 0.0)) >= 1
    );
}

/// log(softmax(x)) for rows reaching far below their maximum: the exponentials go through the
/// denormals to zero as the reference's do, so the logarithms are -90, -100 and -inf, not a
/// floor at -87.3.
#[test]
fn log_softmax_of_far_rows_matches_the_reference() {
    let text = "graph @g(%x: f32[4,9]) -> (y: f32[4,9]) {\n  %s = softmax %x {axis = -1} : f32[4,9]\n  %y = log %s : f32[4,9]\n  return %y\n}\n";
    let rows: [[f32; 9]; 4] = [
        [0.0, -90.0, -100.0, -103.0, -104.0, -110.0, -200.0, -1e30, f32::NEG_INFINITY],
        [5.0, -85.0, -95.0, -98.0, -99.5, 4.0, -1.0, -87.5, -88.0],
        [0.0, -0.0, -1e-40, -1e-45, -87.3, -87.4, -90.5, -101.0, -102.9],
        [100.0, 10.0, 12.0, 13.5, 14.0, 16.0, 3.0, 1.0, 0.5],
    ];
    let x = Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(vec![4, 9], rows.concat()).unwrap()));
    let feeds = vec![("x".to_string(), x)];
    let m = optimize(&parse_module(text).unwrap());
    for isa in [Isa::Native, Isa::Sse] {
        assert!(compare_with(&m, "log softmax", Some(&feeds), &CompileOptions { isa, ..Default::default() }) >= 1);
    }
}

/// Matrix products of odd sizes, alone and fused with a bias, an activation and a residual
/// (an output fusion), split by rows across threads when large: every point of the grid.
#[test]
fn matmuls_with_epilogues_run_alike_compiled() {
    for m in [1u64, 7, 64, 257] {
        for k in [1u64, 9, 128] {
            for n in [1u64, 5, 130] {
                for act in ["relu", "tanh", "sigmoid"] {
                    let text = format!(
                        "graph @g(%a: f32[{m},{k}], %b: f32[{k},{n}], %bias: f32[{n}], %res: f32[{m},{n}]) -> (y: f32[{m},{n}], p: f32[{m},{n}]) {{\n  %p = matmul %a, %b : f32[{m},{n}]\n  %h = add %p, %bias : f32[{m},{n}]\n  %r = {act} %h : f32[{m},{n}]\n  %y = add %r, %res : f32[{m},{n}]\n  return %y, %p\n}}\n"
                    );
                    let m1 = parse_module(&text).unwrap();
                    let fused = optimize(&m1);
                    // SPEC §12: a product is within 1e-5 of (|A| |B|)_ij, at most k here
                    // (inputs in [-1, 1)); what follows it does not amplify (slopes <= 1).
                    let bnd = Bound::Rel(1e-5, 1e-5 * k as f64);
                    let opts = CompileOptions::default();
                    assert!(compare_within(&m1, &text, None, &opts, bnd) >= 2, "{text}");
                    assert!(compare_within(&fused, &print_module(&fused), None, &opts, bnd) >= 1, "{text}");
                }
            }
        }
    }
}

/// Row reductions inside input fusions (softmax's max and sum, layernorm's means, one pass
/// each, softmax's exponentials kept in the scratch row between passes), on odd row lengths
/// so that vector parts and scalar tails both count, with large values and signs mixed so
/// that the f64 accumulation matters: every point of the grid.
#[test]
fn softmax_and_layernorm_run_alike_compiled() {
    for r in [1u64, 3, 64] {
        for c in [1u64, 3, 7, 1023] {
            for scale in [1.0f32, 100.0] {
                let text = format!(
                    "graph @g(%x: f32[{r},{c}], %gamma: f32[{c}], %beta: f32[{c}]) -> (s: f32[{r},{c}], y: f32[{r},{c}], m: f32[{r},{c}]) {{\n  %k = constant {{value = dense<{scale:?}> : f32[]}} : f32[]\n  %xs = mul %x, %k : f32[{r},{c}]\n  %s = softmax %xs {{axis = -1}} : f32[{r},{c}]\n  %mean = reduce_mean %xs {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %d = sub %xs, %mean : f32[{r},{c}]\n  %sq = mul %d, %d : f32[{r},{c}]\n  %var = reduce_mean %sq {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %eps = constant {{value = dense<1.0e-5> : f32[]}} : f32[]\n  %ve = add %var, %eps : f32[{r},1]\n  %sd = sqrt %ve : f32[{r},1]\n  %n = div %d, %sd : f32[{r},{c}]\n  %g = mul %n, %gamma : f32[{r},{c}]\n  %y = add %g, %beta : f32[{r},{c}]\n  %mx = reduce_min %xs {{axes = [-1], keep_dims = true}} : f32[{r},1]\n  %m = sub %xs, %mx : f32[{r},{c}]\n  return %s, %y, %m\n}}\n"
                );
                let m = parse_module(&text).unwrap();
                let fused = optimize(&m);
                // All five reductions read rows of %xs: one kernel, a pass per reduction.
                assert!(compare(&fused, &print_module(&fused), None) >= 1, "{}", print_module(&fused));
            }
        }
    }
}

/// An "output" fusion of a matmul and the epilogue `EPILOGUE` (its nodes, reading `%p`, the
/// product `[M,N]`, and `%z: Z`), yielding `%q: Y`.
fn output_fusion(m: u64, k: u64, n: u64, z: &str, y: &str, epilogue: &str) -> Module {
    let text = format!(
        "graph @g(%x: f32[{m},{k}], %w: f32[{k},{n}], %z: {z}) -> (y: {y}) {{\n  %y = fusion %x, %w, %z {{kind = \"output\"}} : {y}\n    kernel(%fx: f32[{m},{k}], %fw: f32[{k},{n}], %fz: {z}) {{\n      %p = matmul %fx, %fw : f32[{m},{n}]\n{epilogue}      yield %q\n    }}\n  return %y\n}}\n"
    );
    parse_module(&text).unwrap_or_else(|d| panic!("{d:?}\n{text}"))
}

/// Epilogues that broadcast the product wider than itself are valid IR, but not the in-place
/// epilogue over the product's rows the matmul kernel runs: the plan declines them (they
/// stay with the interpreter) rather than writing past the product's buffer.
#[test]
fn output_fusions_that_broadcast_the_product_wider_stay_with_the_interpreter() {
    let cases = [
        output_fusion(4, 3, 1, "f32[4,5]", "f32[4,5]", "      %q = add %p, %fz : f32[4,5]\n"),
        output_fusion(1, 3, 64, "f32[64,64]", "f32[64,64]", "      %q = add %p, %fz : f32[64,64]\n"),
        output_fusion(
            4,
            3,
            16,
            "f32[16]",
            "f32[2,4,16]",
            "      %b = broadcast %p {shape = [2, 4, 16]} : f32[2,4,16]\n      %q = add %b, %fz : f32[2,4,16]\n",
        ),
    ];
    for m in cases {
        let g = &m.graphs[0];
        let fusion = g.regions[g.body].nodes[0];
        assert!(matmul_plan(g, fusion).is_none(), "{}", print_module(&m));
        compare(&m, &print_module(&m), None);
    }
    // Broadcasting INTO the product's shape is the epilogue's business.
    let m = output_fusion(5, 3, 7, "f32[5,1]", "f32[5,7]", "      %q = mul %p, %fz : f32[5,7]\n");
    assert_eq!(compare(&m, "a per-row scale", None), 1);
}

/// Row reductions in an epilogue (softmax over the product's rows, written out or expanded)
/// run in the matmul kernel with their scratch rows.
#[test]
fn output_fusions_with_reductions_run_alike_compiled() {
    let softmax = "      %s = softmax %p {axis = -1} : f32[6,37]\n      %q = add %s, %fz : f32[6,37]\n";
    let expanded = "      %mx = reduce_max %p {axes = [-1], keep_dims = true} : f32[6,1]\n      %d = sub %p, %mx : f32[6,37]\n      %e = exp %d : f32[6,37]\n      %sum = reduce_sum %e {axes = [-1], keep_dims = true} : f32[6,1]\n      %r = div %e, %sum : f32[6,37]\n      %q = add %r, %fz : f32[6,37]\n";
    for epilogue in [softmax, expanded] {
        let m = output_fusion(6, 5, 37, "f32[37]", "f32[6,37]", epilogue);
        let what = print_module(&m);
        compare(&m, &what, None);
        let opt = optimize(&m);
        assert!(compare(&opt, &what, None) >= 1);
    }
    let m = optimize(&output_fusion(6, 5, 37, "f32[37]", "f32[6,37]", expanded));
    let g = &m.graphs[0];
    let planned = g.regions[g.body].nodes.iter().filter_map(|&n| matmul_plan(g, n)).next();
    let (lp, _) = planned.and_then(|p| p.epilogue).expect("the epilogue is compiled");
    assert!(!lp.cached.is_empty(), "the exponentials are kept in a scratch row");
}

/// A kernel run on operands of other shapes than it was compiled for (which a session's type
/// checks never allow, but the kernel must not trust) is an error, not a read or write out
/// of bounds.
#[test]
fn kernels_check_their_operands_against_the_plan() {
    use graphc_runtime::CompiledKernels;
    let text = "graph @g(%x: f32[4,8], %w: f32[8,8], %b: f32[8]) -> (y: f32[4,8], t: f32[4,8]) {\n  %h = matmul %x, %w : f32[4,8]\n  %y = add %h, %b : f32[4,8]\n  %t = tanh %y : f32[4,8]\n  return %y, %t\n}\n";
    let m = parse_module(text).unwrap();
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let g = &m.graphs[0];
    let node = |n: &str| g.producer(g.value_named(n).unwrap()).unwrap();
    let t = |shape: &[usize]| Arc::new(Tensor::F32(ndarray::ArrayD::zeros(shape)));
    let pool = graphc_runtime::BufferPool::default();
    let cases: [(&str, Vec<Arc<Tensor>>); 4] = [
        ("h", vec![t(&[4, 8]), t(&[2, 8])]),
        ("y", vec![t(&[4, 8]), t(&[2])]),
        ("y", vec![t(&[2, 8]), t(&[8])]),
        ("t", vec![t(&[1])]),
    ];
    for (name, operands) in cases {
        let mut operands = graphc_runtime::Operands::new(operands, &pool);
        let got = kernels.run("g", node(name), &mut operands).expect("a kernel");
        let e = got.expect_err(name);
        assert!(e.contains("compiled for"), "{name}: {e}");
    }
}

/// A flagged product's kernel checks each factor against the shape it is stored in: a
/// transposed factor handed over untransposed (as many elements, other strides) is an
/// error, not a product of the wrong elements.
#[test]
fn flagged_products_check_their_factors_stored_shapes() {
    use graphc_runtime::CompiledKernels;
    let text = "graph @g(%x: f32[8,4], %w: f32[6,8], %v: f32[6,8], %b: f32[6]) -> (p: f32[4,6], y: f32[4,6]) {\n  %p = matmul %x, %w {transpose_a = true, transpose_b = true} : f32[4,6]\n  %q = matmul %x, %v {transpose_a = true, transpose_b = true} : f32[4,6]\n  %h = add %q, %b : f32[4,6]\n  %y = relu %h : f32[4,6]\n  return %p, %y\n}\n";
    let m = optimize(&parse_module(text).unwrap());
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let g = &m.graphs[0];
    let t = |shape: &[usize]| Arc::new(Tensor::F32(ndarray::ArrayD::zeros(shape)));
    let pool = graphc_runtime::BufferPool::default();
    for name in ["p", "y"] {
        let node = g.producer(g.value_named(name).unwrap()).unwrap();
        // The node's operands by name, the factors stored as given.
        let operands = |x: &[usize], w: &[usize]| {
            let by_name = |v: &graphc_ir::Value| match g.values[*v].name.as_deref() {
                Some("x") => t(x),
                Some("w" | "v") => t(w),
                Some("b") => t(&[6]),
                other => panic!("operand {other:?}"),
            };
            graphc_runtime::Operands::new(g.nodes[node].operands.iter().map(by_name).collect(), &pool)
        };
        assert!(matmul_plan(g, node).is_some_and(|mp| mp.transpose_a && mp.transpose_b), "{}", print_module(&m));
        for (x, w) in [([4, 8], [6, 8]), ([8, 4], [8, 6])] {
            let got = kernels.run("g", node, &mut operands(&x, &w)).expect("a compiled kernel");
            let e = got.expect_err(name);
            assert!(e.contains("compiled for f32[8,4]") || e.contains("compiled for f32[6,8]"), "{name}: {e}");
        }
        let got = kernels.run("g", node, &mut operands(&[8, 4], &[6, 8])).expect("a compiled kernel");
        assert_eq!(got.expect(name)[0].shape(), &[4, 6], "{name}");
    }
}

/// The process's resident pages, from /proc/self/statm (not its mapped size, which counts
/// the allocator's reserved arenas whole).
fn mapped_pages() -> Option<u64> {
    std::fs::read_to_string("/proc/self/statm").ok()?.split_whitespace().nth(1)?.parse().ok()
}

/// Dropping compiled kernels frees their code: compiling and dropping a module again and again
/// does not grow the process's resident memory (each module's code and constants are pages
/// of their own, which leaked before). Measured in a process of its own (`leak_probe`), where
/// no other test allocates meanwhile.
#[test]
fn dropped_kernels_free_their_code() {
    let Some(_) = mapped_pages() else { return }; // not Linux: nothing to measure by
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--exact", "leak_probe", "--include-ignored", "--test-threads=1", "--nocapture"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{stderr}");
}

#[test]
#[ignore = "run by dropped_kernels_free_their_code, in a process of its own"]
fn leak_probe() {
    let m = optimize(&parse_module(&std::fs::read_to_string(common::example("fused.gir")).unwrap()).unwrap());
    let compile_and_drop = |times: usize| {
        for _ in 0..times {
            let k = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
            assert!(k.len() >= 3);
        }
    };
    compile_and_drop(20);
    let before = mapped_pages().unwrap();
    compile_and_drop(200);
    let grown = mapped_pages().unwrap().saturating_sub(before);
    // Three kernels a module, in pages of code and constants: leaking them grew it by 400
    // pages; freeing them, by about 10.
    assert!(grown < 120, "200 compiled modules grew the resident memory by {grown} pages");
}

/// Kernels compiled without AVX (the legacy SSE encodings, whose folded memory operands must
/// be 16-byte aligned) on rows whose lengths are not multiples of 4, so that every row but the
/// first starts misaligned: vector loads and stores must claim no alignment they lack.
#[test]
fn kernels_without_avx_run_misaligned_rows_alike() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let sse = CompileOptions { isa: Isa::Sse, ..Default::default() };
    for cols in [1u64, 3, 5, 7, 9, 13, 37] {
        let r = 5;
        let text = format!(
            "graph @g(%x: f32[{r},{cols}], %b: f32[{cols}], %w: f32[{cols},{cols}]) -> (y: f32[{r},{cols}], s: f32[{r},{cols}], h: f32[{r},{cols}]) {{\n  %a = add %x, %b : f32[{r},{cols}]\n  %t = tanh %a : f32[{r},{cols}]\n  %e = exp %x : f32[{r},{cols}]\n  %g = sigmoid %e : f32[{r},{cols}]\n  %y = mul %t, %g : f32[{r},{cols}]\n  %s = softmax %y {{axis = -1}} : f32[{r},{cols}]\n  %p = matmul %x, %w : f32[{r},{cols}]\n  %q = add %p, %b : f32[{r},{cols}]\n  %h = relu %q : f32[{r},{cols}]\n  return %y, %s, %h\n}}\n"
        );
        let m = parse_module(&text).unwrap();
        let what = format!("SSE, {cols} columns");
        assert!(compare_with(&m, &what, None, &sse) >= 6, "{what}");
        assert!(compare_with(&optimize(&m), &what, None, &sse) >= 2, "{what}");
    }
}

/// A run-time error inside a fusion names the node and the source line it came from, as the
/// interpreter's error for the graph as written does: an i32 chain (which the interpreter runs
/// node by node inside the fusion) dividing by zero.
#[test]
fn errors_inside_fusions_keep_their_location() {
    let text = "graph @g(%x: i32[4], %y: i32[4]) -> (z: i32[4]) {\n  %a = add %x, %y : i32[4]\n  %b = div %a, %y : i32[4]\n  %c = mul %b, %x : i32[4]\n  return %c\n}\n";
    let m = parse_module(text).unwrap();
    let fused = optimize(&m);
    assert!(print_module(&fused).contains("fusion"), "{}", print_module(&fused));
    let i32s = |v: [i32; 4]| Arc::new(Tensor::I32(ndarray::arr1(&v).into_dyn()));
    let feeds = vec![("x".to_string(), i32s([1, 2, 3, 4])), ("y".to_string(), i32s([1, 0, 3, 4]))];
    let error = |m: &Module, compiled: bool| {
        let s = if compiled {
            Session::with_compiled(m.clone(), options(), common::cpu_kernels(m, &CompileOptions::default()).unwrap())
                .unwrap()
        } else {
            Session::new(m.clone(), options()).unwrap()
        };
        let mut req = random_request(&m.graphs[0], 1).expect("small random inputs");
        req.feeds = feeds.clone();
        s.run(req).expect_err("division by zero")
    };
    let want = error(&m, false);
    assert!(want.span.is_some(), "{want:?}");
    for got in [error(&fused, false), error(&fused, true)] {
        assert_eq!(got.kind, want.kind);
        assert_eq!(got.span, want.span, "{got}");
        assert!(got.node.as_deref().is_some_and(|n| n.contains("div")), "{got}");
    }
}

/// The shared comparison: infinities and NaN exactly, zero signs where the bound is exact, ulps
/// through the denormals, and relative bounds that no infinity or value below 1 slips through.
#[test]
fn the_spec_comparison_catches_what_the_old_one_let_pass() {
    use common::close::check_close;
    let t = |v: &[f32]| Tensor::F32(ndarray::Array1::from(v.to_vec()).into_dyn());
    let chain = bound("graph");
    let fails = |got: &[f32], want: &[f32], b: Bound| check_close(&t(got), &t(want), b).is_err();
    assert!(fails(&[1e30], &[f32::INFINITY], chain), "a finite value for an infinity");
    assert!(fails(&[f32::NEG_INFINITY], &[f32::INFINITY], chain));
    assert!(fails(&[f32::NAN], &[1.0], chain) && fails(&[1.0], &[f32::NAN], chain));
    assert!(!fails(&[f32::NAN, f32::INFINITY], &[-f32::NAN, f32::INFINITY], chain));
    assert!(fails(&[0.5 + 2e-5], &[0.5], chain), "below 1 is relative too");
    assert!(fails(&[-0.0], &[0.0], bound("relu")) && !fails(&[-0.0], &[0.0], chain));
    let denormal = f32::from_bits(100);
    assert!(!fails(&[f32::from_bits(102)], &[denormal], bound("exp")));
    assert!(fails(&[f32::from_bits(103)], &[denormal], bound("exp")));
    assert!(fails(&[0.0], &[denormal], bound("exp")), "a denormal is not zero");
    assert!(check_close(&t(&[1.0]), &Tensor::F32(ndarray::arr2(&[[1.0f32]]).into_dyn()), chain).is_err());
}

/// Where libm's tanh is exactly ±1 (|x| above about 9.01), the compiled one is too: within
/// 4 ulp is not enough there, since `log(tanh x)` is then 0 and not a tiny negative number
/// whose log is NaN (found by the differential fuzzer).
#[test]
fn tanh_saturates_exactly_where_the_reference_does() {
    // From 9.2 up: just below, libm's tanh is 1 - 2^-24 for some x and 1 for others, and a
    // result one ulp away is within the bound (and log log of it NaN or -inf).
    let xs: Vec<f32> = (0..2000).map(|i| 9.2 + i as f32 * 0.05).flat_map(|x| [x, -x]).collect();
    let n = xs.len();
    let text = format!(
        "graph @g(%x: f32[{n}]) -> (y: f32[{n}], z: f32[{n}]) {{\n  %y = tanh %x : f32[{n}]\n  %a = abs %y : f32[{n}]\n  %l = log %a : f32[{n}]\n  %z = log %l : f32[{n}]\n  return %y, %z\n}}\n"
    );
    let m = optimize(&parse_module(&text).unwrap());
    let feeds = vec![("x".to_string(), Arc::new(Tensor::F32(ndarray::Array::from_vec(xs.clone()).into_dyn())))];
    for isa in [Isa::Native, Isa::Sse] {
        let kernels = common::cpu_kernels(&m, &CompileOptions { isa, ..Default::default() }).unwrap();
        let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
        let got = run_all(&jit, &m, Some(&feeds));
        let Ok(got) = &got[0] else { panic!("{got:?}") };
        let Some(Tensor::F32(y)) = &got[0] else { panic!("f32 results") };
        for (x, t) in xs.iter().zip(y.iter()) {
            if x.tanh().abs() == 1.0 {
                assert_eq!(t.to_bits(), x.tanh().to_bits(), "{isa:?}: tanh({x}) = {t}, libm {}", x.tanh());
            }
        }
        let interp = Session::new(m.clone(), options()).unwrap();
        assert_same(&run_all(&interp, &m, Some(&feeds)), &run_all(&jit, &m, Some(&feeds)), "log log |tanh|");
    }
}

/// A product whose terms are all zeros is +0, as the reference's sum from +0 is, whatever
/// their signs: a later division then gives the reference's +inf and not -inf (found by the
/// differential fuzzer, where gemm gave -0 for a single term -0 * x).
#[test]
fn zero_products_are_positive_zeros() {
    for k in [1u64, 2, 9] {
        let text = format!(
            "graph @g(%a: f32[5,{k}], %b: f32[{k},8], %one: f32[5,8]) -> (p: f32[5,8], q: f32[5,8]) {{\n  %p = matmul %a, %b : f32[5,8]\n  %q = div %one, %p : f32[5,8]\n  return %p, %q\n}}\n"
        );
        let m = parse_module(&text).unwrap();
        let signed = |shape: Vec<usize>, v: f32| {
            let n: usize = shape.iter().product();
            Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(shape, vec![v; n]).unwrap()))
        };
        let feeds = vec![
            ("a".to_string(), signed(vec![5, k as usize], -0.0)),
            ("b".to_string(), signed(vec![k as usize, 8], 3.0)),
            ("one".to_string(), signed(vec![5, 8], 1.0)),
        ];
        for m in [m.clone(), optimize(&m)] {
            assert!(compare(&m, &text, Some(&feeds)) >= 1, "{text}");
            let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
            let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
            let got = run_all(&jit, &m, Some(&feeds));
            let Ok(got) = &got[0] else { panic!("{got:?}") };
            let Some(Tensor::F32(q)) = &got[1] else { panic!("f32 results") };
            assert!(q.iter().all(|&x| x == f32::INFINITY), "k = {k}: {q:?}");
        }
    }
}

/// A row of -0 sums to -0 as in the reference (which sums from -0, the identity of IEEE
/// addition), so a later division gives the same infinity; rows with a +0 sum to +0. Row
/// lengths cover the scalar tail and both vector chains (found by the differential fuzzer).
#[test]
fn sums_of_negative_zeros_keep_their_sign() {
    for cols in [1usize, 3, 4, 8, 9, 17] {
        let text = format!(
            "graph @g(%x: f32[3,{cols}], %one: f32[3,1]) -> (s: f32[3,1], q: f32[3,1], m: f32[3,1]) {{\n  %s = reduce_sum %x {{axes = [-1], keep_dims = true}} : f32[3,1]\n  %q = div %one, %s : f32[3,1]\n  %m = reduce_mean %x {{axes = [-1], keep_dims = true}} : f32[3,1]\n  return %s, %q, %m\n}}\n"
        );
        let mut rows = vec![-0.0f32; 3 * cols];
        rows[cols] = 0.0; // the second row holds one +0
        let x = Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(vec![3, cols], rows).unwrap()));
        let one = Arc::new(Tensor::F32(ndarray::Array::from_elem(vec![3, 1], 1.0f32)));
        let feeds = vec![("x".to_string(), x), ("one".to_string(), one)];
        let m = parse_module(&text).unwrap();
        for m in [m.clone(), optimize(&m)] {
            for isa in [Isa::Native, Isa::Sse] {
                assert!(
                    compare_with(&m, &text, Some(&feeds), &CompileOptions { isa, ..Default::default() }) >= 1,
                    "{text}"
                );
            }
        }
    }
}

/// A max or min of zero is the row's first zero, as in the reference (its fold keeps the first
/// of equal values), so a later division gives the same infinity. Every row of +0, -0 and -1
/// up to 5 columns (max of x, min of -x); every sign pattern of zeros at 8 and 9 columns (both
/// vector chains and the tail); 512 patterns at 17 (found by the differential fuzzer).
#[test]
fn max_and_min_of_zeros_give_the_first_zero() {
    for cols in [1usize, 2, 3, 4, 5, 8, 9, 17] {
        let alphabet: &[f32] = if cols <= 5 { &[0.0, -0.0, -1.0] } else { &[0.0, -0.0] };
        let rows = alphabet.len().pow(cols as u32).min(512);
        let xs: Vec<f32> = (0..rows)
            .flat_map(|r| {
                let mut code = r.wrapping_mul(if cols > 9 { 2_654_435_761 } else { 1 });
                (0..cols).map(move |_| {
                    let x = alphabet[code % alphabet.len()];
                    code /= alphabet.len();
                    x
                })
            })
            .collect();
        let text = format!(
            "graph @g(%x: f32[{rows},{cols}], %one: f32[{rows},1]) -> (a: f32[{rows},1], b: f32[{rows},1]) {{\n  %hi = reduce_max %x {{axes = [-1], keep_dims = true}} : f32[{rows},1]\n  %n = neg %x : f32[{rows},{cols}]\n  %lo = reduce_min %n {{axes = [-1], keep_dims = true}} : f32[{rows},1]\n  %a = div %one, %hi : f32[{rows},1]\n  %b = div %one, %lo : f32[{rows},1]\n  return %a, %b\n}}\n"
        );
        let x = Arc::new(Tensor::F32(ndarray::Array::from_shape_vec(vec![rows, cols], xs).unwrap()));
        let one = Arc::new(Tensor::F32(ndarray::Array::from_elem(vec![rows, 1], 1.0f32)));
        let feeds = vec![("x".to_string(), x), ("one".to_string(), one)];
        let m = parse_module(&text).unwrap();
        for m in [m.clone(), optimize(&m)] {
            for isa in [Isa::Native, Isa::Sse] {
                assert!(
                    compare_with(&m, &text, Some(&feeds), &CompileOptions { isa, ..Default::default() }) >= 1,
                    "{text}"
                );
            }
        }
    }
}

/// A product `[m,k] x [k,n]` with the flags `(transpose_a, transpose_b)`, its factors
/// stored as they say, alone or (with `epilogue`) followed by a bias and relu.
fn flagged_product(m: u64, k: u64, n: u64, (ta, tb): (bool, bool), epilogue: bool) -> Module {
    let a = if ta { format!("{k},{m}") } else { format!("{m},{k}") };
    let b = if tb { format!("{n},{k}") } else { format!("{k},{n}") };
    let flags: Vec<&str> = [(ta, "transpose_a = true"), (tb, "transpose_b = true")]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect();
    let attrs = if flags.is_empty() { String::new() } else { format!(" {{{}}}", flags.join(", ")) };
    let body = if epilogue {
        format!("  %h = add %p, %bias : f32[{m},{n}]\n  %y = relu %h : f32[{m},{n}]\n  return %y\n")
    } else {
        "  return %p\n".to_string()
    };
    let y = if epilogue { "y" } else { "p" };
    let text = format!(
        "graph @g(%a: f32[{a}], %b: f32[{b}], %bias: f32[{n}]) -> ({y}: f32[{m},{n}]) {{\n  %p = matmul %a, %b{attrs} : f32[{m},{n}]\n{body}}}\n"
    );
    parse_module(&text).unwrap_or_else(|d| panic!("{d:?}\n{text}"))
}

/// Runs `m` (one graph, after the pipeline) compiled against the interpreter, asserting that
/// every matmul of it, lone or heading an output fusion, has a matmul plan with `flags` and a
/// compiled kernel (not the reference kernel's fallback); returns how many it checked.
fn assert_flagged_products_compiled(m: &Module, k: u64, flags: Option<(bool, bool)>) -> usize {
    let what = print_module(m);
    let g = &m.graphs[0];
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut products = 0;
    for &node in &g.regions[g.body].nodes {
        let nd = &g.nodes[node];
        let head = match nd.op {
            Op::MatMul => node,
            Op::Fusion => g.regions[nd.regions[0]].nodes[0],
            _ => continue,
        };
        if g.nodes[head].op != Op::MatMul {
            continue;
        }
        let mp = matmul_plan(g, node).unwrap_or_else(|| panic!("no matmul plan for {:?}: {what}", nd.op));
        let attr = |f: &str| g.nodes[head].attrs.bool(f).unwrap_or(false);
        assert_eq!((mp.transpose_a, mp.transpose_b), (attr("transpose_a"), attr("transpose_b")), "{what}");
        if let Some(flags) = flags {
            assert_eq!((mp.transpose_a, mp.transpose_b), flags, "{what}");
        }
        assert!(kernels.table().get(&g.name, node).is_some(), "{:?} runs on the reference kernel: {what}", nd.op);
        products += 1;
    }
    assert_eq!(compare_per_node(m, &what), kernels.len(), "every compiled node checked on its operands: {what}");
    // End to end: within 1e-5 of the terms (inputs in [-1, 1), at most k), which the
    // epilogue (bias, relu) does not amplify.
    let bnd = Bound::Rel(1e-5, 1e-5 * k as f64);
    let interp = Session::new(m.clone(), options()).unwrap();
    let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
    assert_same_within(&run_all(&interp, m, None), &run_all(&jit, m, None), &what, bnd);
    products
}

/// The flagged products the gradients of every matmul are made of (`dA = dC B^T`, `dB = A^T
/// dC`), all four combinations of the flags, alone and heading an output fusion, run compiled
/// (on gemm, the factors read through their strides) and agree with the interpreter: odd
/// sizes, 1s, and products above the parallel threshold (`PARALLEL_FLOPS`), which gemm splits
/// across threads and the epilogue runs by row blocks.
#[test]
fn products_with_transposed_operands_run_compiled() {
    const { assert!(130 * 129 * 65 >= graphc_cpu_runtime::PARALLEL_FLOPS) };
    let mut shapes =
        vec![(1, 1, 1), (1, 7, 1), (7, 1, 9), (3, 5, 4), (1, 13, 6), (17, 33, 1), (64, 9, 130), (130, 129, 65)];
    // And random shapes, from a seeded splitmix64 (the same on every run).
    let mut state = 0x5eed_u64;
    let mut next = |below: u64| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    };
    let sizes = [1u64, 2, 3, 5, 8, 11, 16, 31, 64, 97];
    for _ in 0..6 {
        let mut pick = || sizes[next(sizes.len() as u64) as usize];
        shapes.push((pick(), pick(), pick()));
    }
    for (m, k, n) in shapes {
        for flags in [(false, false), (true, false), (false, true), (true, true)] {
            for epilogue in [false, true] {
                let module = flagged_product(m, k, n, flags, epilogue);
                // As written (the epilogue's ops as kernels of their own) and after the
                // pipeline (the product heading an output fusion).
                assert_eq!(assert_flagged_products_compiled(&module, k, Some(flags)), 1);
                let fused = optimize(&module);
                assert_eq!(assert_flagged_products_compiled(&fused, k, Some(flags)), 1);
                if epilogue {
                    let g = &fused.graphs[0];
                    let fusion = g.regions[g.body].nodes.iter().find(|&&x| g.nodes[x].op == Op::Fusion);
                    let mp = fusion.and_then(|&x| matmul_plan(g, x)).expect("an output fusion");
                    assert!(mp.epilogue.is_some(), "{}", print_module(&fused));
                }
            }
        }
    }
}

#[test]
fn products_with_transposed_operands_run_alike() {
    // matmul's transpose flags, lone and heading an output fusion (after the pipeline), each
    // product compiled; and transposes of the last two dims, which canonicalization folds
    // into the flags.
    let src = "graph @g(%a: f32[5,3], %b: f32[4,5], %d: f32[5,4], %bias: f32[4]) -> (x: f32[3,4], y: f32[3,4], z: f32[3,3]) {\n  %x = matmul %a, %b {transpose_a = true, transpose_b = true} : f32[3,4]\n  %p = matmul %a, %d {transpose_a = true} : f32[3,4]\n  %q = add %p, %bias : f32[3,4]\n  %y = relu %q : f32[3,4]\n  %z = matmul %x, %y {transpose_b = true} : f32[3,3]\n  return %x, %y, %z\n}\n";
    let m = parse_module(src).unwrap();
    assert_eq!(assert_flagged_products_compiled(&m, 5, None), 3);
    assert_eq!(assert_flagged_products_compiled(&optimize(&m), 5, None), 3);
    let src = "graph @g(%a: f32[5,3], %b: f32[4,5]) -> (y: f32[3,4]) {\n  %at = transpose %a {perm = [1, 0]} : f32[3,5]\n  %bt = transpose %b {perm = [1, 0]} : f32[5,4]\n  %y = matmul %at, %bt : f32[3,4]\n  return %y\n}\n";
    let m = optimize(&parse_module(src).unwrap());
    let g = &m.graphs[0];
    assert!(g.regions[g.body].nodes.iter().all(|&x| g.nodes[x].op != Op::Transpose), "{}", print_module(&m));
    assert_eq!(assert_flagged_products_compiled(&m, 5, Some((true, true))), 1);
}

/// Lone sums and means over leading axes (a bias gradient's sum over the batch) or a middle
/// block of axes (a batch of column reductions) run on the run half's column kernel, which sums
/// each column in order in f64 as the reference does: the same results, bit for bit, NaN and
/// infinities included.
#[test]
fn column_reductions_run_compiled_and_equal_the_reference_bit_for_bit() {
    let cases: &[(&[u64], &[i64], bool)] = &[
        (&[1, 1], &[0], true),
        (&[3, 5], &[0], true),
        (&[3, 5], &[0], false),
        (&[7, 3, 4], &[0, 1], true),
        (&[7, 3, 4], &[1, 0], false),
        (&[9], &[0], false),
        (&[2, 3, 4], &[0, 1, 2], false),
        (&[256, 1024], &[0], true),
        (&[40, 2000], &[-2], false),
        (&[3, 5, 7], &[1], false),
        (&[2, 6, 5, 3], &[1], true),
        (&[2, 3, 4, 5], &[2, 1], false),
        (&[4, 1, 300], &[-2], true),
        (&[3, 70, 2, 257], &[1, 2], true),
    ];
    for &(shape, axes, keep) in cases {
        for op in ["reduce_sum", "reduce_mean"] {
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            let out: Vec<String> = (0..shape.len() as i64)
                .filter_map(|i| {
                    let reduced = axes.iter().any(|&a| a.rem_euclid(shape.len() as i64) == i);
                    match (reduced, keep) {
                        (true, true) => Some("1".to_string()),
                        (true, false) => None,
                        (false, _) => Some(shape[i as usize].to_string()),
                    }
                })
                .collect();
            let axes_text: Vec<String> = axes.iter().map(|a| a.to_string()).collect();
            let text = format!(
                "graph @g(%x: f32[{}]) -> (y: f32[{}]) {{\n  %y = {op} %x {{axes = [{}]{}}} : f32[{}]\n  return %y\n}}\n",
                dims.join(","),
                out.join(","),
                axes_text.join(", "),
                if keep { ", keep_dims = true" } else { "" },
                out.join(",")
            );
            let m = parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
            let g = &m.graphs[0];
            let kernel = graphc::lower::plan::kernel_plan(g, g.regions[g.body].nodes[0]);
            let columns = matches!(kernel, Some(graphc::lower::plan::KernelPlan::Columns(_)));
            assert!(
                columns || axes.iter().any(|&a| a.rem_euclid(shape.len() as i64) == shape.len() as i64 - 1),
                "{text}"
            );
            let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
            assert_eq!(kernels.len(), 1, "compiled:\n{text}");
            let interp = Session::new(m.clone(), options()).unwrap();
            let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
            for seed in [1, 2] {
                let mut req = random_request(&m.graphs[0], seed).unwrap();
                if seed == 2 {
                    // Specials: NaN, both infinities, -0 and huge values in the first row.
                    let n: usize = shape.iter().product::<u64>() as usize;
                    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 3e38, -3e38, 1e-45];
                    let v: Vec<f32> =
                        (0..n).map(|i| if i < 7 { specials[i] } else { (i as f32 * 0.37).sin() }).collect();
                    let t = Tensor::from_f32(v, &TensorType::new(DType::F32, shape.to_vec())).unwrap();
                    req.feeds = vec![("x".to_string(), Arc::new(t))];
                }
                let want = interp.run(req.clone()).unwrap().values[0].as_tensor().cloned().unwrap();
                let got = jit.run(req).unwrap().values[0].as_tensor().cloned().unwrap();
                assert!(got.bit_identical(&want), "{op} {shape:?} {axes:?}: {got:?} vs {want:?}");
            }
        }
    }
}

/// A reduction over a block of trailing axes (`[2, 3]` of `[N, C, H, W]`, a squeeze-excitation
/// block's global average pool; every axis; the last) is a row reduction of the operand viewed
/// as `[rows, cols]`: alone, and fused between a sigmoid and what reads the reduced value back
/// over its row (kept axes) or beside it (dropped axes). Random shapes with odd sizes, NaN,
/// infinities and -0 at random places: max and min exactly, sums and means within SPEC's bound.
#[test]
fn reductions_over_trailing_axes_run_compiled_within_the_spec() {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    let sizes = [1u64, 2, 3, 5, 7, 13, 37, 64];
    let ops = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"];
    for case in 0..64 {
        let rank = 1 + next(4) as usize;
        let shape: Vec<u64> = (0..rank).map(|_| sizes[next(sizes.len() as u64) as usize]).collect();
        let from = next(rank as u64) as usize;
        let op = ops[case % 4];
        let keep = case % 8 < 4;
        let ty = |dims: &[u64]| format!("f32[{}]", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","));
        let kept: Vec<u64> = (0..rank).map(|i| if i < from { shape[i] } else { 1 }).collect();
        let rty = if keep { ty(&kept) } else { ty(&shape[..from]) };
        // Negative axes for half of them: the same block.
        let axes: Vec<String> = (from..rank)
            .map(|a| if case % 3 == 0 { format!("{}", a as i64 - rank as i64) } else { a.to_string() })
            .collect();
        let attrs = format!("{{axes = [{}]{}}}", axes.join(", "), if keep { ", keep_dims = true" } else { "" });
        let (x, k) = (ty(&shape), ty(&kept));
        let lone = format!("graph @g(%x: {x}) -> (y: {rty}) {{\n  %y = {op} %x {attrs} : {rty}\n  return %y\n}}\n");
        // Kept axes: the reduced value times a per-row operand, read back over its row (both
        // results need `w`, else the fusion pass would not group them).
        let fused = if keep {
            format!("graph @g(%x: {x}, %w: {k}) -> (rw: {k}, y: {x}) {{\n  %e = sigmoid %x : {x}\n  %r = {op} %e {attrs} : {rty}\n  %rw = mul %r, %w : {k}\n  %y = sub %e, %rw : {x}\n  return %rw, %y\n}}\n")
        } else {
            format!("graph @g(%x: {x}) -> (r: {rty}, e: {x}) {{\n  %e = sigmoid %x : {x}\n  %r = {op} %e {attrs} : {rty}\n  return %r, %e\n}}\n")
        };
        let n: usize = shape.iter().product::<u64>() as usize;
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0];
        let mut xs = common::seeded_f32(n, case as u64 + 1);
        for _ in 0..next(4) {
            let at = next(n as u64) as usize;
            xs[at] = specials[next(specials.len() as u64) as usize];
        }
        let xt = Arc::new(Tensor::from_f32(xs, &TensorType::new(DType::F32, shape.clone())).unwrap());
        let wt = Arc::new(
            Tensor::from_f32(
                common::seeded_f32(kept.iter().product::<u64>() as usize, 99),
                &TensorType::new(DType::F32, kept.clone()),
            )
            .unwrap(),
        );
        for (text, fuses) in [(&lone, false), (&fused, true)] {
            let m = parse_module(text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
            let m = if fuses { optimize(&m) } else { m };
            let g = &m.graphs[0];
            let reducing: Vec<_> =
                g.regions[g.body].nodes.iter().filter_map(|&n| plan(g, n)).filter(|p| !p.reduces.is_empty()).collect();
            assert_eq!(reducing.len(), 1, "one kernel reduces rows:\n{}", print_module(&m));
            assert_eq!(reducing[0].cols, shape[from..].iter().product::<u64>() as usize, "{text}");
            if fuses {
                assert!(
                    g.regions[g.body].nodes.iter().all(|&n| g.nodes[n].op != Op::Sigmoid),
                    "fused:\n{}",
                    print_module(&m)
                );
            }
            let mut feeds = vec![("x".to_string(), xt.clone())];
            if fuses && keep {
                feeds.push(("w".to_string(), wt.clone()));
            }
            let interp = Session::new(m.clone(), options()).unwrap();
            let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{text}: {e}"));
            let jit = Session::with_compiled(m.clone(), options(), kernels).unwrap();
            let mut req = random_request(g, 1).unwrap();
            req.feeds = feeds;
            let want = interp.run(req.clone()).unwrap();
            let got = jit.run(req).unwrap();
            for (w, o) in want.values.iter().zip(&got.values) {
                let (w, o) = (w.as_tensor().unwrap(), o.as_tensor().unwrap());
                // The reduction alone within its op's bound; a chain within the graph's.
                let context = if fuses { "graph".to_string() } else { format!("{op} {text}") };
                assert_close_spec(&context, o, w);
            }
        }
    }
}

/// A reduction that drops its axes yields `[N, C]` from `[N, C, H, W]`: an op reading it
/// broadcasts it against the last axes (here the shapes allow that), not over the reduced rows,
/// so no kernel may read it as a row value. Whatever fuses, the results are the interpreter's.
#[test]
fn dropped_axes_are_not_read_back_as_rows() {
    let text = "graph @g(%x: f32[1,7,7,7]) -> (y: f32[1,7,7,7], r: f32[1,7]) {
  %e = exp %x : f32[1,7,7,7]
  %r = reduce_sum %e {axes = [2, 3]} : f32[1,7]
  %y = add %e, %r : f32[1,7,7,7]
  return %y, %r
}
";
    let m = parse_module(text).unwrap();
    for m in [m.clone(), optimize(&m)] {
        assert!(compare(&m, &print_module(&m), None) >= 2, "{}", print_module(&m));
    }
    // Fused by hand, as the fusion pass does not: the plan refuses the group, which the
    // interpreter then runs.
    let text = "graph @g(%x: f32[1,7,7,7]) -> (y: f32[1,7,7,7], r: f32[1,7]) {
  %y, %r = fusion %x {kind = \"input\"} : f32[1,7,7,7], f32[1,7]
    kernel(%a: f32[1,7,7,7]) {
      %e = exp %a : f32[1,7,7,7]
      %s = reduce_sum %e {axes = [2, 3]} : f32[1,7]
      %b = add %e, %s : f32[1,7,7,7]
      yield %b, %s
    }
  return %y, %r
}
";
    let m = parse_module(text).unwrap();
    let g = &m.graphs[0];
    assert!(plan(g, g.regions[g.body].nodes[0]).is_none());
    compare(&m, text, None);
}

/// Reductions over other axes than a trailing block (a middle axis, axes apart) are no row
/// reductions: no loop plan takes them, and what runs them gives the interpreter's results.
#[test]
fn reductions_over_other_axes_are_no_row_reductions() {
    for axes in ["[1]", "[0, 2]", "[1, 2]"] {
        let out = match axes {
            "[1]" => "f32[3,1,5,7]",
            "[0, 2]" => "f32[1,4,1,7]",
            _ => "f32[3,1,1,7]",
        };
        let text = format!("graph @g(%x: f32[3,4,5,7]) -> (y: f32[3,4,5,7]) {{\n  %s = sigmoid %x : f32[3,4,5,7]\n  %m = reduce_max %s {{axes = {axes}, keep_dims = true}} : {out}\n  %y = sub %s, %m : f32[3,4,5,7]\n  return %y\n}}\n");
        let m = parse_module(&text).unwrap();
        let g = &m.graphs[0];
        let reduce = g.regions[g.body].nodes[1];
        assert!(plan(g, reduce).is_none(), "{text}");
        for m in [m.clone(), optimize(&m)] {
            compare(&m, &text, None);
        }
    }
}

/// A graph reading a slice of `x: f32[dims]` (per dim: start, end, step, where a negative
/// start or end counts from the end) through elementwise ops: the slice alone, and where it
/// broadcasts into `x`, added to `x` read whole in the same kernel; with `gather`, also the
/// row `x[i]` of a constant index (negative counting from the end).
fn sliced_graph(dims: &[u64], cuts: &[(i64, i64, i64)], gather: Option<i64>) -> Module {
    let shape = |d: &[u64]| format!("f32[{}]", d.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
    let list = |v: &[i64]| format!("[{}]", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "));
    let resolve = |i: i64, dim: i64| (if i < 0 { i + dim } else { i }).clamp(0, dim);
    let r: Vec<u64> = (dims.iter().zip(cuts))
        .map(|(&d, &(s, e, st))| {
            let (s, e) = (resolve(s, d as i64), resolve(e, d as i64));
            if e > s {
                ((e - s + st - 1) / st) as u64
            } else {
                0
            }
        })
        .collect();
    let (x, rs) = (shape(dims), shape(&r));
    let (starts, ends, steps): (Vec<i64>, Vec<i64>, Vec<i64>) =
        (cuts.iter().map(|c| c.0).collect(), cuts.iter().map(|c| c.1).collect(), cuts.iter().map(|c| c.2).collect());
    let wide = r.iter().zip(dims).all(|(&a, &d)| a == d || a == 1);
    let mut outs = vec![format!("a: {rs}")];
    let mut body = format!(
        "  %s = slice %x {{starts = {}, ends = {}, steps = {}}} : {rs}\n  %t = sigmoid %s : {rs}\n  %u = mul %t, %s : {rs}\n  %a = add %u, %s : {rs}\n",
        list(&starts),
        list(&ends),
        list(&steps)
    );
    let mut rets = vec!["%a".to_string()];
    if wide {
        body += &format!("  %w = sub %x, %s : {x}\n  %b = tanh %w : {x}\n");
        outs.push(format!("b: {x}"));
        rets.push("%b".into());
    }
    if let Some(i) = gather.filter(|_| dims.len() >= 2) {
        let gs = shape(&dims[1..]);
        body += &format!(
            "  %k = constant {{value = dense<{i}> : i64[]}} : i64[]\n  %g = gather %x, %k : {gs}\n  %n = neg %g : {gs}\n  %c = exp %n : {gs}\n"
        );
        outs.push(format!("c: {gs}"));
        rets.push("%c".into());
    }
    let text = format!("graph @g(%x: {x}) -> ({}) {{\n{body}  return {}\n}}\n", outs.join(", "), rets.join(", "));
    parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

/// The fusions of `m`'s graph that read a slice or a gather inside; each has a kernel plan
/// (the fusion pass forms no group the kernels cannot run).
fn fused_views(m: &Module) -> usize {
    let g = &m.graphs[0];
    let fused: Vec<_> = (g.regions[g.body].nodes.iter().copied())
        .filter(|&n| g.nodes[n].op == Op::Fusion)
        .filter(|&n| {
            let r = g.nodes[n].regions[0];
            g.regions[r].nodes.iter().any(|&k| matches!(g.nodes[k].op, Op::Slice | Op::Gather))
        })
        .collect();
    for &n in &fused {
        assert!(graphc::lower::plan::kernel_plan(g, n).is_some(), "a fusion without a plan: {}", print_module(m));
    }
    fused.len()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

    /// Slices of random boxes (odd sizes, steps, offsets at the end, negative bounds) and
    /// gathers of one index, fused into the loops that read them as views where the view is
    /// expressible, give the interpreter's results.
    #[test]
    fn slices_read_as_views_run_alike_compiled(
        dims in proptest::collection::vec(prop_oneof![Just(1u64), Just(2), Just(3), Just(7), Just(33)], 1..4),
        raw in proptest::collection::vec((0i64..40, 1i64..40, prop_oneof![Just(1i64), Just(1), Just(2), Just(3)], any::<bool>()), 3),
        gather in proptest::option::of(-3i64..3),
    ) {
        // A nonempty box per dim; with `neg`, the start counted from the end.
        let cuts: Vec<(i64, i64, i64)> = (dims.iter().zip(&raw))
            .map(|(&d, &(a, b, st, neg))| {
                let d = d as i64;
                let s = a % d;
                let e = s + 1 + b % (d - s);
                if neg { (s - d, e, st) } else { (s, e, st) }
            })
            .collect();
        let gather = gather.filter(|&i| i < dims[0] as i64 && i >= -(dims[0] as i64));
        let m = sliced_graph(&dims, &cuts, gather);
        compare(&m, &print_module(&m), None);
        let o = optimize(&m);
        fused_views(&o);
        compare(&o, &print_module(&o), None);
    }
}

#[test]
fn slices_fuse_into_the_loops_that_read_them() {
    // The last axis's pieces (an LSTM's gates), the last one ending at the end; a block of
    // rows; the row x[-1]; each read as a view, alone and with x read whole.
    for (dims, cuts, gather) in [
        (vec![1u64, 512], vec![(0i64, 1i64, 1i64), (384, 512, 1)], Some(0)),
        (vec![3, 37], vec![(0, 3, 1), (-5, 37, 1)], Some(-1)),
        (vec![6, 5], vec![(2, 5, 1), (0, 5, 1)], Some(5)),
        (vec![5, 4, 9], vec![(4, 5, 1), (0, 4, 1), (0, 9, 1)], Some(2)),
        (vec![7, 9], vec![(1, 7, 2), (0, 9, 1)], Some(1)),
    ] {
        let m = sliced_graph(&dims, &cuts, gather);
        let o = optimize(&m);
        let what = print_module(&o);
        assert!(fused_views(&o) >= 1, "a slice fused: {what}");
        assert!(compare(&o, &what, None) >= 1, "{what}");
        // NaN and infinities pass through the views as through the copies.
        let n: usize = dims.iter().product::<u64>() as usize;
        let xs: Vec<f32> = (0..n)
            .map(|i| [f32::NAN, f32::INFINITY, -f32::INFINITY, -0.0, 1e30, 0.5][i % 6] * (i % 5) as f32)
            .collect();
        let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let x = Arc::new(Tensor::F32(ndarray::ArrayD::from_shape_vec(shape, xs).unwrap()));
        compare(&o, &what, Some(&[("x".to_string(), x)]));
    }
    // A column slice (a step along the loop's columns) is no view: the slice runs alone.
    let m = sliced_graph(&[4, 8], &[(0, 4, 1), (0, 8, 2)], None);
    let o = optimize(&m);
    assert_eq!(fused_views(&o), 0, "{}", print_module(&o));
    compare(&o, "a column step", None);
}

#[test]
fn a_gathered_row_joins_the_product_epilogue_as_a_view() {
    // An unrolled recurrence's step: the recurrent product plus the input projection's row t.
    // The row gathered before the product (as the ONNX importer orders them) or after.
    for (t, before) in [(0i64, true), (3, false), (-1, true)] {
        let product = "  %p = matmul %h, %w : f32[1,36]\n";
        let row = format!("  %k = constant {{value = dense<{t}> : i64[]}} : i64[]\n  %r = gather %x, %k : f32[1,36]\n");
        let (one, two) = if before { (row.as_str(), product) } else { (product, row.as_str()) };
        let text = format!(
            "graph @g(%h: f32[1,16], %w: f32[16,36], %x: f32[5,1,36]) -> (y: f32[1,36]) {{\n{one}{two}  %y = add %p, %r : f32[1,36]\n  return %y\n}}\n"
        );
        let o = optimize(&parse_module(&text).unwrap());
        let what = print_module(&o);
        assert_eq!(fused_views(&o), 1, "{what}");
        let g = &o.graphs[0];
        let n = g.regions[g.body].nodes.iter().copied().find(|&n| g.nodes[n].op == Op::Fusion).unwrap();
        let (lp, _) = matmul_plan(g, n).and_then(|mp| mp.epilogue).expect("a product with its epilogue");
        assert!(lp.inputs.iter().any(|m| m.view == Some(36 * t.rem_euclid(5) as usize)), "{what}");
        assert!(compare(&o, &what, None) >= 1, "{what}");
        compare_per_node(&o, &what);
    }
}

/// Loops that read bool operands (a transformer's causal and padding masks) are compiled and
/// agree with the interpreter: masks broadcast against each other, combined, negated, sliced
/// (a view of a mask), selecting among scores with NaNs and infinities.
#[test]
fn loops_reading_bool_operands_run_alike_compiled() {
    let cases = [
        // GPT-2's: scores where the causal mask and the padding mask both allow, else -inf.
        "graph @g(%c: bool[1,1,8,8], %p: bool[1,1,1,8], %s: f32[1,2,8,8], %n: f32[]) -> (y: f32[1,2,8,8]) {\n  %m = and %c, %p : bool[1,1,8,8]\n  %y = select %m, %s, %n : f32[1,2,8,8]\n  return %y\n}\n",
        // A negated mask or'ed with a per-row one, a row sum of what it keeps.
        "graph @g(%c: bool[5,33], %r: bool[5,1], %s: f32[5,33]) -> (y: f32[5,1]) {\n  %nc = not %c : bool[5,33]\n  %m = or %nc, %r : bool[5,33]\n  %z = constant {value = dense<0.0> : f32[]} : f32[]\n  %k = select %m, %s, %z : f32[5,33]\n  %y = reduce_sum %k {axes = [1], keep_dims = true} : f32[5,1]\n  return %y\n}\n",
        // A slice of a mask, read as a view.
        "graph @g(%c: bool[4,40], %s: f32[4,16], %t: f32[4,16]) -> (y: f32[4,16]) {\n  %v = slice %c {starts = [0, 3], ends = [4, 19]} : bool[4,16]\n  %y = select %v, %s, %t : f32[4,16]\n  return %y\n}\n",
    ];
    for text in cases {
        let m = optimize(&parse_module(text).unwrap());
        let what = print_module(&m);
        let g = &m.graphs[0];
        let loops: Vec<_> = (g.regions[g.body].nodes.iter())
            .filter_map(|&n| plan(g, n))
            .filter(|p| p.input_types.iter().any(|t| t.dtype == DType::Bool))
            .collect();
        assert_eq!(loops.len(), 1, "one loop reads the masks: {what}");
        assert!(compare(&m, &what, None) >= 1, "{what}");
        // Scores with NaN, infinities and -0 where the masks keep them and where they do not.
        for seed in 0..4u64 {
            let mut req = random_request(g, seed).unwrap();
            for (_, t) in &mut req.feeds {
                if let Tensor::F32(a) = &**t {
                    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
                    let v = a.iter().enumerate().map(|(i, &x)| if i % 3 == 0 { specials[i % 4] } else { x });
                    let b = ndarray::ArrayD::from_shape_vec(a.raw_dim(), v.collect()).unwrap();
                    *t = Arc::new(Tensor::F32(b));
                }
            }
            compare(&m, &what, Some(&req.feeds));
        }
    }
}
