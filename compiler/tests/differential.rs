//! Differential fuzzing: random valid graphs run through the default pipeline and the CPU
//! kernels (what `graphc run` does) against the reference interpreter on the module as
//! written. Graphs mix elementwise DAGs over f32 with broadcasts, reductions along any axes,
//! matmuls with broadcasting and reducing epilogues, softmax, `cond`, `while` and variables
//! (each graph runs twice per session, so state written in the first run is read in the
//! second), a quarter of them with gradients of their first output (the `autodiff` lowering's
//! expansion, so the JIT's gradients are checked against the interpreter's); inputs hold ±0, ±inf, NaN, denormals and huge and tiny values; shapes have 1s,
//! odd sizes and some above the kernels' parallel threshold. Results must agree: NaN where
//! NaN, infinities exactly, the rest within `close_spec`.
//!
//! CI runs a fixed number of seeds. A long run, from a given seed or a random one:
//!
//! ```text
//! GRAPHC_FUZZ_SECS=3600 cargo test --release -p graphc --test differential -- --nocapture
//! GRAPHC_FUZZ_CASES=100000 GRAPHC_FUZZ_SEED=42 cargo test --release -p graphc --test differential -- --nocapture
//! ```
//!
//! Two kinds of disagreement are excused and counted: differences SPEC §12 allows each node,
//! compounding through later nodes (every compiled node agrees with the reference on its own
//! operands, and the interpreter agrees on the pipeline's module; a fused node agrees where
//! its result lies within what its members' bounds allow, `differential/interval.rs`), and, unless
//! `GRAPHC_FUZZ_STRICT=1`, those that go away with inputs capped at 1e6 in magnitude
//! (`magnitude_only`: huge terms whose sum any order may round or overflow differently).
//!
//! A long run checks its seeds in child processes of 1000 each (the test binary again), so
//! that a crash does not end it; a seed whose check kills its process is reported as failing.
//!
//! A failing graph is minimized (one output, ops bypassed while it still fails) and written
//! with its inputs to `GRAPHC_FUZZ_OUT` (default `target/fuzz-failures/`) as `SEED.gir` and
//! `SEED.NAME.npy`, to replay with `graphc run SEED.gir --input NAME=SEED.NAME.npy ...`
//! against `--backend interp`. A long run keeps going after failures and fails at the end.

use graphc::lower::cpu::CpuKernels;
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_ir::{
    parse_module, print_module, verify_module, Attr, DType, Graph, Module, Node, NodeSpec, Op, Region, TensorData,
    TensorLiteral, TensorType, Type, Value,
};
use graphc_runtime::{CompiledKernels, Operands, RunRequest, Session, SessionOptions, Tensor};
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
#[path = "differential/interval.rs"]
mod interval;

/// splitmix64: seeds map to graphs the same way on every machine and in every build.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// An input element: mostly moderate values, some of every special kind.
fn element(rng: &mut Rng) -> f32 {
    if rng.chance(85) {
        return (rng.unit() * 4.0 - 2.0) * if rng.chance(10) { 40.0 } else { 1.0 };
    }
    rng.pick(&[
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -3e-39,
        f32::MIN_POSITIVE,
        1e30,
        -1e30,
        1e-30,
        -88.0,
        -100.0,
        89.0,
        f32::MAX,
        1.0,
        -1.0,
    ])
}

fn tensor_of(rng: &mut Rng, t: &TensorType) -> Tensor {
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    let n = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| element(rng)).collect();
    Tensor::F32(ndarray::ArrayD::from_shape_vec(shape, data).expect("the shape's element count"))
}

fn f32t(shape: &[u64]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

fn scalar(x: f32) -> NodeSpec {
    let lit = TensorLiteral::new(f32t(&[]), TensorData::F32(vec![x])).expect("a scalar literal");
    NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(lit))
}

fn shape_of(g: &Graph, v: Value) -> Vec<u64> {
    g.values[v].ty.as_tensor().map(|t| t.shape.clone()).unwrap_or_default()
}

const UNARY: [Op; 9] = [Op::Neg, Op::Abs, Op::Relu, Op::Exp, Op::Log, Op::Sqrt, Op::Tanh, Op::Sigmoid, Op::Erf];
const BINARY: [Op; 7] = [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min, Op::Pow];
/// Between two computed values: no `pow`, whose jumps (pow(1, NaN) = 1 but pow(1 - 1ulp, NaN)
/// = NaN; pow(1 - 1ulp, inf) = 0) turn the one-ulp differences SPEC §12 allows a
/// transcendental into different infinities and NaNs. Powers of constants are drawn.
const BINARY_OF_VALUES: [Op; 6] = [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min];
const REDUCE: [Op; 4] = [Op::ReduceSum, Op::ReduceMax, Op::ReduceMin, Op::ReduceMean];

/// Builds one random graph; every node goes through the builder, which infers its type and
/// refuses operands that do not broadcast (those draws are skipped).
struct Gen {
    rng: Rng,
    g: Graph,
    /// f32 tensor values of the body.
    vals: Vec<Value>,
    base: Vec<u64>,
    vars: usize,
}

impl Gen {
    fn input(&mut self, shape: &[u64]) -> Value {
        let name = format!("in{}", self.g.inputs().len());
        let v = self.g.add_input(&name, Type::Tensor(f32t(shape)));
        self.vals.push(v);
        v
    }

    /// The base shape with some dims 1 or dropped from the front: broadcasts into it.
    fn broadcastable(&mut self) -> Vec<u64> {
        let drop = if self.rng.chance(25) { self.rng.below(self.base.len() + 1) } else { 0 };
        self.base[drop..].iter().map(|&d| if self.rng.chance(25) { 1 } else { d }).collect()
    }

    fn add(&mut self, region: Region, spec: NodeSpec) -> Option<Value> {
        let v = self.g.add(region, spec).ok()?.first().copied()?;
        matches!(&self.g.values[v].ty, Type::Tensor(t) if t.dtype == DType::F32).then_some(v)
    }

    fn any(&mut self) -> Value {
        // Recent values more often, so chains grow deep.
        let n = self.vals.len();
        if self.rng.chance(60) {
            self.vals[n - 1 - self.rng.below(n.min(3))]
        } else {
            self.vals[self.rng.below(n)]
        }
    }

    /// Elementwise ops on `x` in `region` (a branch or loop body), ending with a value of `x`'s type.
    fn elementwise_chain(&mut self, region: Region, x: Value, len: usize) -> Value {
        let mut v = x;
        for _ in 0..len {
            let spec = if self.rng.chance(50) {
                NodeSpec::new(self.rng.pick(&UNARY), vec![v])
            } else {
                let c = self.rng.pick(&[0.5f32, 2.0, -1.0, 3.0]);
                let Some(k) = self.add(region, scalar(c)) else { continue };
                NodeSpec::new(self.rng.pick(&BINARY), vec![v, k])
            };
            if let Some(w) = self.add(region, spec) {
                v = w;
            }
        }
        v
    }

    fn step(&mut self) {
        let body = self.g.body;
        let x = self.any();
        let spec = match self.rng.below(100) {
            0..=24 => NodeSpec::new(self.rng.pick(&UNARY), vec![x]),
            25..=54 => {
                let y = self.any();
                let (a, b) = if self.rng.chance(50) { (x, y) } else { (y, x) };
                NodeSpec::new(self.rng.pick(&BINARY_OF_VALUES), vec![a, b])
            }
            55..=59 => {
                let y = self.any();
                let Some(m) = self.g.add(body, NodeSpec::new(Op::Less, vec![x, y])).ok().map(|r| r[0]) else {
                    return;
                };
                NodeSpec::new(Op::Select, vec![m, x, y])
            }
            60..=64 => {
                let c = self.rng.pick(&[0.5f32, 2.0, -1.0, 1e-3, 0.0]);
                let Some(k) = self.add(body, scalar(c)) else { return };
                NodeSpec::new(self.rng.pick(&BINARY), vec![x, k])
            }
            65..=74 => {
                let rank = shape_of(&self.g, x).len();
                if rank == 0 {
                    return;
                }
                let axes: Vec<i64> = if self.rng.chance(60) {
                    vec![-1]
                } else {
                    let a: Vec<i64> = (0..rank as i64).filter(|_| self.rng.chance(50)).collect();
                    if a.is_empty() {
                        vec![self.rng.below(rank) as i64]
                    } else {
                        a
                    }
                };
                NodeSpec::new(self.rng.pick(&REDUCE), vec![x])
                    .attr("axes", Attr::Ints(axes))
                    .attr("keep_dims", Attr::Bool(self.rng.chance(70)))
            }
            75..=79 => {
                let rank = shape_of(&self.g, x).len();
                if rank == 0 {
                    return;
                }
                let axis = if self.rng.chance(70) { -1 } else { self.rng.below(rank) as i64 };
                NodeSpec::new(Op::Softmax, vec![x]).attr("axis", Attr::Int(axis))
            }
            80..=87 => return self.matmul(x),
            88..=90 => {
                let mut shape = shape_of(&self.g, x);
                shape.insert(0, self.rng.pick(&[2, 3]));
                NodeSpec::new(Op::Broadcast, vec![x])
                    .attr("shape", Attr::Ints(shape.iter().map(|&d| d as i64).collect()))
            }
            91..=93 => return self.cond(x),
            94..=96 => return self.while_loop(x),
            _ => return self.state(x),
        };
        if let Some(v) = self.add(body, spec) {
            self.vals.push(v);
        }
    }

    /// A 2-D product of `x` (or an input) and a new weight input, often with a bias, an
    /// activation, or an op broadcasting the product wider or reducing it.
    fn matmul(&mut self, x: Value) {
        let body = self.g.body;
        let a = if shape_of(&self.g, x).len() == 2 {
            x
        } else {
            let m = self.rng.pick(&[1, 3, 4, 7, 64]);
            let k = self.rng.pick(&[1, 3, 5, 16]);
            self.input(&[m, k])
        };
        let k = shape_of(&self.g, a)[1];
        let n = self.rng.pick(&[1, 5, 8, 17, 64]);
        let w = self.input(&[k, n]);
        let Some(mut p) = self.add(body, NodeSpec::new(Op::MatMul, vec![a, w])) else { return };
        self.vals.push(p);
        let m = shape_of(&self.g, p)[0];
        if self.rng.chance(60) {
            let b = self.input(&[n]);
            if let Some(v) = self.add(body, NodeSpec::new(Op::Add, vec![p, b])) {
                p = v;
                self.vals.push(v);
            }
        }
        if self.rng.chance(50) {
            let op = self.rng.pick(&UNARY);
            if let Some(v) = self.add(body, NodeSpec::new(op, vec![p])) {
                p = v;
                self.vals.push(v);
            }
        }
        let wider = match self.rng.below(4) {
            0 => vec![m, if n == 1 { 5 } else { n }],
            1 => vec![if m == 1 { 64 } else { m }, n],
            2 => vec![2, m, n],
            _ => return,
        };
        let other = self.input(&wider);
        let op = self.rng.pick(&BINARY_OF_VALUES);
        if let Some(v) = self.add(body, NodeSpec::new(op, vec![p, other])) {
            self.vals.push(v);
        }
    }

    /// `cond` on the sign of a sum of `x`, each branch an elementwise chain of `x`.
    fn cond(&mut self, x: Value) {
        let body = self.g.body;
        let rank = shape_of(&self.g, x).len() as i64;
        let Some(s) =
            self.add(body, NodeSpec::new(Op::ReduceSum, vec![x]).attr("axes", Attr::Ints((0..rank).collect())))
        else {
            return;
        };
        let Some(zero) = self.add(body, scalar(0.0)) else { return };
        let Ok(pred) = self.g.add(body, NodeSpec::new(Op::Greater, vec![s, zero])) else { return };
        let ty = self.g.values[x].ty.clone();
        let mut branches = Vec::new();
        for label in ["then", "else"] {
            let r = self.g.new_region(label, std::slice::from_ref(&ty));
            let p = self.g.regions[r].params[0];
            let len = 1 + self.rng.below(3);
            let y = self.elementwise_chain(r, p, len);
            self.g.set_yields(r, vec![y]);
            branches.push(r);
        }
        if let Some(v) = self.add(body, NodeSpec::new(Op::Cond, vec![pred[0], x]).regions(branches)) {
            self.vals.push(v);
        }
    }

    /// A `while` running an elementwise chain on `x` 0 to 3 times.
    fn while_loop(&mut self, x: Value) {
        let body = self.g.body;
        let i32s = |g: &mut Graph, r: Region, k: i32| {
            let lit = TensorLiteral::new(TensorType::new(DType::I32, vec![]), TensorData::I32(vec![k])).unwrap();
            g.add(r, NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(lit))).unwrap()[0]
        };
        let i0 = i32s(&mut self.g, body, 0);
        let trips = self.rng.below(4) as i32;
        let n = i32s(&mut self.g, body, trips);
        let ty = self.g.values[x].ty.clone();
        let int = Type::Tensor(TensorType::new(DType::I32, vec![]));
        let types = [int.clone(), ty, int];
        let c = self.g.new_region("cond", &types);
        let [ci, _, cn] = self.g.regions[c].params[..] else { return };
        let more = self.g.add(c, NodeSpec::new(Op::Less, vec![ci, cn])).unwrap()[0];
        self.g.set_yields(c, vec![more]);
        let b = self.g.new_region("body", &types);
        let [bi, bx, bn] = self.g.regions[b].params[..] else { return };
        let one = i32s(&mut self.g, b, 1);
        let next = self.g.add(b, NodeSpec::new(Op::Add, vec![bi, one])).unwrap()[0];
        let len = 1 + self.rng.below(3);
        let y = self.elementwise_chain(b, bx, len);
        self.g.set_yields(b, vec![next, y, bn]);
        if let Ok(r) = self.g.add(body, NodeSpec::new(Op::While, vec![i0, x, n]).regions(vec![c, b])) {
            self.vals.push(r[1]);
        }
    }

    /// A variable of `x`'s type: its value read (the init in a session's first run), then `x`
    /// assigned after the read, so the second run reads `x` of the first.
    fn state(&mut self, x: Value) {
        let body = self.g.body;
        let Some(t) = self.g.values[x].ty.as_tensor().cloned() else { return };
        let init = TensorLiteral::new(t.clone(), TensorData::F32(vec![0.25])).unwrap_or_else(|_| {
            let n = t.num_elements().unwrap_or(0) as usize;
            TensorLiteral::new(t.clone(), TensorData::F32(vec![0.25; n])).unwrap()
        });
        let name = format!("v{}", self.vars);
        self.vars += 1;
        let spec = NodeSpec::new(Op::Variable, vec![])
            .attr("name", Attr::Str(name))
            .attr("init", Attr::Tensor(init))
            .declared(vec![Type::Var(t)]);
        let Ok(var) = self.g.add(body, spec) else { return };
        let Ok(read) = self.g.add(body, NodeSpec::new(Op::Read, vec![var[0]])) else { return };
        self.vals.push(read[0]);
        if let Ok(w) = self.g.add(body, NodeSpec::new(Op::Assign, vec![var[0], x]).after(vec![read[0]])) {
            self.vals.push(w[0]);
        }
    }
}

/// The graph of `seed`, with its feeds.
fn generate(seed: u64) -> (Module, Vec<(String, Arc<Tensor>)>) {
    let mut rng = Rng(seed);
    let rank = 1 + rng.below(3);
    let mut base: Vec<u64> = (0..rank).map(|_| rng.pick(&[1, 2, 3, 4, 5, 7, 8, 16, 33])).collect();
    if rng.chance(10) {
        // Above the parallel threshold (1 << 15 elements).
        base = vec![rng.pick(&[40, 64, 129]), rng.pick(&[520, 1024])];
    }
    let mut gen = Gen { rng, g: Graph::new("g"), vals: Vec::new(), base: base.clone(), vars: 0 };
    gen.input(&base);
    for _ in 0..1 + gen.rng.below(3) {
        let s = gen.broadcastable();
        gen.input(&s);
    }
    let steps = 3 + gen.rng.below(12);
    for _ in 0..steps {
        gen.step();
    }
    let Gen { mut rng, mut g, vals, .. } = gen;
    let mut outs = vec![*vals.last().expect("inputs are values")];
    for _ in 0..rng.below(3) {
        let v = vals[rng.below(vals.len())];
        if !outs.contains(&v) {
            outs.push(v);
        }
    }
    g.set_outputs(outs.iter().enumerate().map(|(i, &v)| (format!("y{i}"), v)).collect());
    let feeds = g
        .inputs()
        .iter()
        .map(|&v| {
            let t = g.values[v].ty.as_tensor().expect("inputs are tensors").clone();
            (g.values[v].name.clone().expect("inputs are named"), Arc::new(tensor_of(&mut rng, &t)))
        })
        .collect();
    let mut m = Module { graphs: vec![g], end_comments: vec![] };
    // A quarter of the graphs also return gradients of their first output's sum, expanded by
    // the autodiff lowering before either side runs: the JIT's gradients against the
    // interpreter's. (A separate stream, so the rest of each seed's graph stays as it was.)
    let mut grad_rng = Rng(seed ^ 0x6772_6164);
    if grad_rng.chance(25) {
        if let Some(lowered) = with_gradients(&m, &mut grad_rng) {
            m = lowered;
        }
    }
    let diags = verify_module(&m);
    assert!(diags.is_empty(), "seed {seed}: the generated graph does not verify: {diags:?}\n{}", print_module(&m));
    (m, feeds)
}

/// `m`'s graph with the gradients of the sum of its first output with respect to some of its
/// inputs as more outputs, `grad` expanded; `None` where the loss depends on an input through
/// something not differentiable (a variable's assign).
fn with_gradients(m: &Module, rng: &mut Rng) -> Option<Module> {
    let mut g = m.graphs[0].clone();
    let body = g.body;
    let y = g.output_values()[0];
    let rank = shape_of(&g, y).len() as i64;
    let sum = NodeSpec::new(Op::ReduceSum, vec![y]).attr("axes", Attr::Ints((0..rank).collect()));
    let loss = g.add(body, sum).ok()?[0];
    let inputs: Vec<Value> = g.inputs().iter().copied().filter(|_| rng.chance(60)).collect();
    let wrt = if inputs.is_empty() { vec![g.inputs()[0]] } else { inputs };
    let mut operands = vec![loss];
    operands.extend(&wrt);
    let grads = g.add(body, NodeSpec::new(Op::Grad, operands)).ok()?;
    let mut outputs: Vec<(String, Value)> =
        g.outputs.iter().map(|o| o.name.clone()).zip(g.output_values().to_vec()).collect();
    outputs.extend(grads.into_iter().enumerate().map(|(i, v)| (format!("d{i}"), v)));
    g.set_outputs(outputs);
    let mut out = Module { graphs: vec![g], end_comments: vec![] };
    PassManager::new(graphc::backend::LOWERINGS).ok()?.run(&mut out, &mut |_| {}).ok()?;
    Some(out)
}

/// Whether `got` is within what SPEC §12 allows of the interpreter's `want`: NaN where NaN,
/// infinities exactly, else 1e-4 relative with an absolute floor (1e-6, or 1e-4 when a matrix
/// product's terms may have cancelled: its bound is relative to the terms, not the result).
/// Looser than `common/close.rs`'s per-op bounds: it compares whole graphs and fusions.
fn close_spec(want: &Tensor, got: &Tensor, floor: f64) -> Result<(), String> {
    close_near(want, got, floor, &[], &|_, _| false)
}

/// `close_spec`, where the interpreter's results `nearby` (the same computation with its
/// inexact ops rounded otherwise, `rounded_differently`) show how far rounding alone moves
/// each element: within four times their scatter passes, and a NaN or an infinity on one side
/// only passes where they show the element at such a singularity (one of them, or a large
/// value of either sign around the interpreter's: a pole in between). Elements `allowed`
/// (their flat index, the compiled value) pass too.
fn close_near(
    want: &Tensor,
    got: &Tensor,
    floor: f64,
    nearby: &[Tensor],
    allowed: &dyn Fn(usize, f64) -> bool,
) -> Result<(), String> {
    if want.ty() != got.ty() {
        return Err(format!("interpreter gives {}, compiled {}", want.ty(), got.ty()));
    }
    let nearby: Vec<Vec<f64>> = nearby.iter().map(|t| t.to_f64_vec()).collect();
    let class = |x: f64| {
        if x.is_nan() {
            3
        } else if x.is_infinite() {
            1 + u8::from(x > 0.0)
        } else {
            0
        }
    };
    for (i, (a, b)) in want.to_f64_vec().into_iter().zip(got.to_f64_vec()).enumerate() {
        let near = nearby.iter().map(|n| n[i]);
        let ok = if class(a) != 0 || class(b) != 0 {
            let near: Vec<f64> = near.collect();
            // Rounding that flips a large result's sign straddles a pole (x / (tanh x - x)
            // near 0): the compiled side may have landed on it.
            let pole = class(a) == 0
                && (class(b) == 1 || class(b) == 2)
                && near.iter().any(|&x| x >= a.abs())
                && near.iter().any(|&x| x <= -a.abs());
            class(a) == class(b) || pole || near.iter().any(|&x| class(x) == class(b) || class(x) != class(a))
        } else {
            let spread = near.map(|x| if x.is_finite() { (x - a).abs() } else { f64::INFINITY }).fold(0.0, f64::max);
            (a - b).abs() <= (1e-4 * a.abs()).max(floor) + 4.0 * spread
        };
        if !ok && !allowed(i, b) {
            return Err(format!("element {i}: interpreter {a:e}, compiled {b:e}"));
        }
    }
    Ok(())
}

/// `m` with the result of every node SPEC §12 lets a kernel round otherwise (not exactly)
/// scaled by 1 ± 2^-24 to 1 ± 2^-21, half an ulp to four (signs drawn from `k`): what the interpreter computes if
/// those nodes rounded as a compiled kernel may.
fn rounded_differently(m: &Module, k: u64) -> Module {
    const ROUNDED: [Op; 8] =
        [Op::Exp, Op::Tanh, Op::Sigmoid, Op::Div, Op::MatMul, Op::ReduceSum, Op::ReduceMean, Op::Softmax];
    // Samples k and k + 4 scale each node by the same step the other way.
    let mut rng = Rng(0xf00d ^ (k % 4).wrapping_mul(0x9e37_79b9));
    let mut m = m.clone();
    for g in &mut m.graphs {
        let regions: Vec<Region> = g.regions.keys().collect();
        for r in regions {
            for n in g.regions[r].nodes.clone() {
                let nd = g.nodes[n].clone();
                if !ROUNDED.contains(&nd.op) || !nd.control_deps.is_empty() || nd.results.len() != 1 {
                    continue;
                }
                let at = g.regions[r].nodes.iter().position(|&x| x == n).expect("the node is in its region") + 1;
                let mut again = NodeSpec::new(nd.op, nd.operands.clone());
                again.attrs = nd.attrs.clone();
                // Half an ulp to four by sample (2^-24 to 2^-21), so that roundings land on
                // each neighbour.
                let step = (1u32 << (k % 4)) as f32 / (1u32 << 24) as f32;
                let factor = if rng.chance(50) != (k % 8 >= 4) { 1.0 + step } else { 1.0 - step };
                let (Ok(again), Ok(c)) = (g.insert_node(r, at, again), g.insert_node(r, at + 1, scalar(factor))) else {
                    continue;
                };
                let (again, c) = (g.nodes[again].results[0], g.nodes[c].results[0]);
                let Ok(scaled) = g.insert_node(r, at + 2, NodeSpec::new(Op::Mul, vec![again, c])) else { continue };
                let mut result = g.nodes[scaled].results[0];
                // A sum's bound is also absolute where its terms cancel: 2^-50 of the sum of
                // their magnitudes, so a sum near zero may come out with either sign, or as
                // zero.
                if matches!(nd.op, Op::ReduceSum | Op::ReduceMean) {
                    let shift = if factor > 1.0 { 1.0 } else { -1.0 } / (1u64 << 50) as f32;
                    let mut magnitude = NodeSpec::new(nd.op, vec![]);
                    magnitude.attrs = nd.attrs.clone();
                    let moved = (|| -> Result<Value, graphc_ir::ops::InferError> {
                        let abs = g.insert_node(r, at + 3, NodeSpec::new(Op::Abs, vec![nd.operands[0]]))?;
                        magnitude.operands = vec![g.nodes[abs].results[0]];
                        let sum = g.insert_node(r, at + 4, magnitude)?;
                        let c = g.insert_node(r, at + 5, scalar(shift))?;
                        let (sum, c) = (g.nodes[sum].results[0], g.nodes[c].results[0]);
                        let d = g.insert_node(r, at + 6, NodeSpec::new(Op::Mul, vec![sum, c]))?;
                        let d = g.nodes[d].results[0];
                        let moved = g.insert_node(r, at + 7, NodeSpec::new(Op::Add, vec![result, d]))?;
                        let moved = g.nodes[moved].results[0];
                        if k % 4 != 3 {
                            return Ok(moved);
                        }
                        // And every value in between: zero where the bound reaches it, which a
                        // later division or logarithm turns into its pole.
                        let mut at = at + 8;
                        let mut node = |g: &mut Graph, spec: NodeSpec| {
                            let n = g.insert_node(r, at, spec)?;
                            at += 1;
                            Ok::<Value, graphc_ir::ops::InferError>(g.nodes[n].results[0])
                        };
                        let size = node(g, NodeSpec::new(Op::Abs, vec![result]))?;
                        let reach = node(g, NodeSpec::new(Op::Abs, vec![d]))?;
                        let within = node(g, NodeSpec::new(Op::LessEqual, vec![size, reach]))?;
                        let nought = node(g, scalar(0.0))?;
                        let zero = node(g, NodeSpec::new(Op::Mul, vec![result, nought]))?;
                        node(g, NodeSpec::new(Op::Select, vec![within, zero, moved]))
                    })();
                    if let Ok(moved) = moved {
                        result = moved;
                    }
                }
                g.replace_all_uses(nd.results[0], result);
            }
        }
    }
    m
}

fn options() -> SessionOptions {
    SessionOptions { detect_deadlock: true, ..Default::default() }
}

/// Two runs of every graph in one session (state carries over), as tensors or an error.
fn run_twice(s: &Session, m: &Module, feeds: &[(String, Arc<Tensor>)]) -> Vec<Result<Vec<Tensor>, String>> {
    let mut out = Vec::new();
    for _ in 0..2 {
        for g in &m.graphs {
            let mut req = RunRequest::new(g.name.as_str());
            req.feeds = feeds.iter().filter(|(n, _)| g.value_named(n).is_some()).cloned().collect();
            out.push(
                s.run(req)
                    .map(|o| o.values.iter().map(|v| v.as_tensor().cloned().expect("outputs are tensors")).collect())
                    .map_err(|e| format!("{:?}", e.kind)),
            );
        }
    }
    out
}

/// How the compiled pipeline disagrees with the interpreter on `m`, if it does in a way the
/// fuzzer reports: not only by huge inputs (`magnitude_only`), or by the
/// differences SPEC §12 allows each node compounding through later ones (every compiled node
/// agreeing with the reference on its own operands, and the pipeline's module agreeing under
/// the interpreter). With `count`, tallies what it excuses.
fn disagreement(m: &Module, feeds: &[(String, Arc<Tensor>)], count: bool) -> Option<String> {
    let tally = |c: &std::sync::atomic::AtomicU64| {
        if count {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let e = compare(m, feeds).err()?;
    // Only values may differ within bounds: an error on one side only (a kernel's extents
    // check, a type check), a pipeline or a compilation that fails, is reported as it is.
    if !values_differ(&e) {
        return Some(e);
    }
    let strict = std::env::var("GRAPHC_FUZZ_STRICT").is_ok_and(|v| v == "1");
    if !strict && magnitude_only(m, feeds) {
        tally(&HUGE);
        return None;
    }
    let opt = optimized(m).ok()?;
    if let Some(node) = node_disagreement(&opt, feeds) {
        return Some(format!("{e}; {node}"));
    }
    let interp = |m: &Module| run_twice(&Session::new(m.clone(), options()).expect("a session"), m, feeds);
    if let Some(d) = first_difference(&interp(m), &interp(&opt), 1e-6) {
        return Some(format!("{e}; the interpreter on the pipeline's module differs too: {d}"));
    }
    tally(&AMPLIFIED);
    None
}

/// Whether `compare`'s complaint is about values (`run N, output K: ...`), the only kind the
/// excuses may cover.
fn values_differ(e: &str) -> bool {
    e.strip_prefix("run ").and_then(|r| r.split_once(", output ")).is_some_and(|(run, _)| run.parse::<u64>().is_ok())
}

/// Graphs whose compiled nodes each agree with the reference, differing only at the end.
static AMPLIFIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn optimized(m: &Module) -> Result<Module, String> {
    let mut opt = m.clone();
    PassManager::new(DEFAULT_PIPELINE)
        .unwrap()
        .run(&mut opt, &mut |_| {})
        .map_err(|e| format!("the default pipeline fails: {e}"))?;
    Ok(opt)
}

/// One run of a compiled node: its operands and the kernel's results.
#[derive(Debug)]
struct Call {
    graph: String,
    node: Node,
    inputs: Vec<Tensor>,
    got: Vec<Tensor>,
}

/// The CPU kernels with every call recorded, to check each against the reference.
#[derive(Debug)]
struct Recording {
    kernels: Arc<CpuKernels>,
    calls: std::sync::Mutex<Vec<Call>>,
}

impl CompiledKernels for Recording {
    fn run(&self, graph: &str, node: Node, operands: &mut Operands<'_>) -> Option<Result<Vec<Tensor>, String>> {
        let inputs: Vec<Tensor> = operands.all().into_iter().cloned().collect();
        let out = self.kernels.run(graph, node, operands)?;
        if let Ok(got) = &out {
            let call = Call { graph: graph.to_string(), node, inputs, got: got.clone() };
            self.calls.lock().unwrap().push(call);
        }
        Some(out)
    }

    fn device_kernel(&self, graph: &str, node: Node) -> Option<Arc<dyn graphc_runtime::DeviceKernel>> {
        self.kernels.device_kernel(graph, node)
    }
}

/// A module of one graph computing what node `n` of `g` does (a fusion's kernel, or the op),
/// from inputs `in0`, `in1`, ...
fn node_module(g: &Graph, n: Node) -> Option<Module> {
    let nd = &g.nodes[n];
    let (params, nodes, yields) = if nd.op == Op::Fusion {
        let r = &g.regions[nd.regions[0]];
        (r.params.clone(), r.nodes.clone(), r.yields.clone())
    } else {
        (nd.operands.clone(), vec![n], nd.results.clone())
    };
    let mut h = Graph::new("node");
    let mut map = std::collections::HashMap::new();
    for (i, &p) in params.iter().enumerate() {
        map.insert(p, h.add_input(&format!("in{i}"), g.values[p].ty.clone()));
    }
    for &m in &nodes {
        let md = &g.nodes[m];
        if !md.regions.is_empty() {
            return None;
        }
        let mut spec =
            NodeSpec::new(md.op, md.operands.iter().map(|v| map.get(v).copied()).collect::<Option<Vec<_>>>()?);
        spec.attrs = md.attrs.clone();
        let out = h.add(h.body, spec).ok()?;
        map.extend(md.results.iter().copied().zip(out));
    }
    let outs = yields.iter().enumerate().map(|(i, v)| Some((format!("out{i}"), *map.get(v)?))).collect::<Option<_>>();
    h.set_outputs(outs?);
    Some(Module { graphs: vec![h], end_comments: vec![] })
}

/// The first compiled node of `opt`'s JIT run whose results are not what the reference gives
/// on the same operands, described.
fn node_disagreement(opt: &Module, feeds: &[(String, Arc<Tensor>)]) -> Option<String> {
    let kernels = common::cpu_kernels(opt, &Default::default()).ok()?;
    let recording = Arc::new(Recording { kernels, calls: Default::default() });
    let session = Session::with_compiled(opt.clone(), options(), recording.clone()).ok()?;
    run_twice(&session, opt, feeds);
    let calls = std::mem::take(&mut *recording.calls.lock().unwrap());
    for call in calls {
        let g = opt.graphs.iter().find(|g| g.name == call.graph)?;
        let Some(one) = node_module(g, call.node) else { continue };
        let feeds: Vec<(String, Arc<Tensor>)> =
            call.inputs.iter().enumerate().map(|(i, t)| (format!("in{i}"), Arc::new(t.clone()))).collect();
        // A product sums in any order: its bound is relative to its terms' magnitudes.
        let floor =
            if one.graphs[0].nodes.values().any(|n| n.op == Op::MatMul) { product_scale(&call.inputs) } else { 1e-6 };
        let agrees = |m: &Module| {
            let want = run_twice(&Session::new(m.clone(), options()).expect("a session"), m, &feeds);
            first_difference(&want[..1], &[Ok(call.got.clone())], floor).is_none()
        };
        if agrees(&one) {
            continue;
        }
        // A fusion compounds its ops' allowed roundings (tanh one ulp short of 1, then a
        // difference that cancels): within what rounding them otherwise does, it agrees.
        let rounded: Vec<Tensor> = (0..8)
            .filter_map(|k| {
                let r = rounded_differently(&one, k);
                let out = run_twice(&Session::new(r.clone(), options()).expect("a session"), &r, &feeds);
                out.into_iter().next().and_then(Result::ok)
            })
            .flatten()
            .collect();
        // And what each member's bound allows on the intervals of the members before.
        let bounds = interval::allowed(&one, &call.inputs);
        let want = run_twice(&Session::new(one.clone(), options()).expect("a session"), &one, &feeds);
        if let Some(Ok(w)) = want.first() {
            let outs = w.len();
            let near_ok = w.iter().zip(&call.got).enumerate().all(|(o, (a, b))| {
                let near: Vec<Tensor> = rounded.iter().skip(o).step_by(outs.max(1)).cloned().collect();
                let bound = bounds.as_ref().and_then(|b| b.get(o));
                close_near(a, b, floor, &near, &|i, x| bound.is_some_and(|b| b.allows(i, x))).is_ok()
            });
            if near_ok {
                continue;
            }
        }
        // As for whole graphs (`magnitude_only`): the node again on its operands capped.
        let strict = std::env::var("GRAPHC_FUZZ_STRICT").is_ok_and(|v| v == "1");
        if !strict && node_agrees_capped(&recording.kernels, &call, &one, floor) {
            continue;
        }
        let want = run_twice(&Session::new(one.clone(), options()).expect("a session"), &one, &feeds);
        let d = first_difference(&want[..1], &[Ok(call.got.clone())], floor).unwrap_or_default();
        return Some(format!("compiled node {} disagrees on its own operands: {d}\n{}", call.node, print_module(&one)));
    }
    None
}

/// Whether the kernel of `call` agrees with the reference once its operands are capped at
/// `MAGNITUDE_CAP`.
fn node_agrees_capped(kernels: &CpuKernels, call: &Call, one: &Module, floor: f64) -> bool {
    let capped: Vec<Tensor> = call.inputs.iter().map(cap).collect();
    let pool = graphc_runtime::BufferPool::default();
    let mut operands = Operands::new(capped.iter().cloned().map(Arc::new).collect(), &pool);
    let Some(Ok(got)) = kernels.run(&call.graph, call.node, &mut operands) else { return false };
    let feeds: Vec<(String, Arc<Tensor>)> =
        capped.into_iter().enumerate().map(|(i, t)| (format!("in{i}"), Arc::new(t))).collect();
    let want = run_twice(&Session::new(one.clone(), options()).expect("a session"), one, &feeds);
    first_difference(&want[..1], &[Ok(got)], floor).is_none()
}

/// 1e-5 of a bound on a product's terms, `k max|a| max|b|`, from a node's two largest inputs
/// (k at most the longest of the inputs' last two axes).
fn product_scale(inputs: &[Tensor]) -> f64 {
    let largest = |t: &Tensor| t.to_f64_vec().into_iter().filter(|x| x.is_finite()).fold(1.0f64, |m, x| m.max(x.abs()));
    let mut maxes: Vec<f64> = inputs.iter().map(largest).collect();
    maxes.sort_by(|a, b| b.total_cmp(a));
    // The summed dim is one of each factor's last two (the second to last of a factor read
    // transposed, `transpose_a`): the largest of those bounds it.
    let last_two = |t: &Tensor| t.ty().shape.iter().rev().take(2).max().copied();
    let k = inputs.iter().filter_map(last_two).max().unwrap_or(1) as f64;
    1e-5 * k * maxes.first().unwrap_or(&1.0) * maxes.get(1).unwrap_or(&1.0)
}

/// Where two sets of run outcomes first differ beyond `close_spec`, described.
fn first_difference(
    want: &[Result<Vec<Tensor>, String>],
    got: &[Result<Vec<Tensor>, String>],
    floor: f64,
) -> Option<String> {
    for (run, (w, g)) in want.iter().zip(got).enumerate() {
        match (w, g) {
            (Ok(w), Ok(g)) => {
                for (k, (a, b)) in w.iter().zip(g).enumerate() {
                    if let Err(e) = close_spec(a, b, floor) {
                        return Some(format!("run {run}, output {k}: {e}"));
                    }
                }
            }
            (Err(a), Err(b)) if a == b => {}
            _ => return Some(format!("run {run}: reference {w:?}, compiled {g:?}")),
        }
    }
    None
}

/// Whether the disagreement goes away when no finite input exceeds `MAGNITUDE_CAP`: it comes
/// from huge terms, whose sums SPEC §12 bounds relative to the terms (a matrix product's
/// (|A||B|)_ij), not to the result they cancel to, and which any summation order may round
/// differently or overflow in f32 (1e30 * 1e30 = inf, then inf - inf = NaN where the
/// reference, summing in f64, has a finite or infinite sum). Excused unless
/// `GRAPHC_FUZZ_STRICT=1`.
fn magnitude_only(m: &Module, feeds: &[(String, Arc<Tensor>)]) -> bool {
    let capped: Vec<(String, Arc<Tensor>)> = feeds.iter().map(|(name, t)| (name.clone(), Arc::new(cap(t)))).collect();
    compare(m, &capped).is_ok()
}

const MAGNITUDE_CAP: f32 = 1e6;

/// `t` with its finite f32 elements clamped to ±`MAGNITUDE_CAP`.
fn cap(t: &Tensor) -> Tensor {
    match t {
        Tensor::F32(a) => {
            Tensor::F32(a.mapv(|x| if x.is_finite() { x.clamp(-MAGNITUDE_CAP, MAGNITUDE_CAP) } else { x }))
        }
        other => other.clone(),
    }
}

/// Graphs excused by `magnitude_only`.
static HUGE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Failures minimized and written in one run; later ones are only listed, so that a long run
/// on a frequent bug does not spend its time minimizing it.
const MAX_MINIMIZED: u64 = 50;

fn minimize_more() -> bool {
    static MINIMIZED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    MINIMIZED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < MAX_MINIMIZED
}

/// The compiled pipeline against the interpreter on `m`.
fn compare(m: &Module, feeds: &[(String, Arc<Tensor>)]) -> Result<(), String> {
    let interp = Session::new(m.clone(), options()).expect("a verified module makes a session");
    let want = run_twice(&interp, m, feeds);
    let mut opt = m.clone();
    if let Err(e) = PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut opt, &mut |_| {}) {
        return Err(format!("the default pipeline fails: {e}"));
    }
    let kernels = match common::cpu_kernels(&opt, &Default::default()) {
        Ok(k) => k,
        Err(e) => return Err(format!("compilation fails: {e}")),
    };
    let jit = Session::with_compiled(opt.clone(), options(), kernels).expect("a session");
    let got = run_twice(&jit, &opt, feeds);
    let floor = if m.graphs.iter().any(|g| g.nodes.values().any(|n| n.op == Op::MatMul)) { 1e-4 } else { 1e-6 };
    first_difference(&want, &got, floor).map_or(Ok(()), Err)
}

/// A smaller graph that still disagrees: one output, then each op bypassed (its uses given an
/// operand of its type) while the disagreement stays.
fn minimize(m: &Module, feeds: &[(String, Arc<Tensor>)]) -> Module {
    let dce = |m: &mut Module| PassManager::new("dce").unwrap().run(m, &mut |_| {}).is_ok();
    let mut best = m.clone();
    let outputs: Vec<(String, Value)> = {
        let g = &best.graphs[0];
        g.outputs.iter().map(|o| o.name.clone()).zip(g.regions[g.body].yields.clone()).collect()
    };
    for o in outputs.iter().filter(|_| outputs.len() > 1) {
        let mut t = best.clone();
        t.graphs[0].set_outputs(vec![o.clone()]);
        if dce(&mut t) && disagreement(&t, feeds, false).is_some() {
            best = t;
            break;
        }
    }
    loop {
        let mut shrunk = false;
        let nodes: Vec<Node> = best.graphs[0].regions[best.graphs[0].body].nodes.iter().rev().copied().collect();
        for n in nodes {
            let g = &best.graphs[0];
            let Some(nd) = g.nodes.get(n) else { continue };
            let Some(&r) = nd.results.first() else { continue };
            if nd.results.len() != 1 || nd.op.is_stateful() {
                continue;
            }
            for &o in nd.operands.iter().filter(|&&o| g.values[o].ty == g.values[r].ty) {
                let mut t = best.clone();
                t.graphs[0].replace_all_uses(r, o);
                if dce(&mut t) && verify_module(&t).is_empty() && disagreement(&t, feeds, false).is_some() {
                    best = t;
                    shrunk = true;
                    break;
                }
            }
        }
        if !shrunk {
            return best;
        }
    }
}

/// Minimizes a failure of `seed` and writes it with its inputs; returns the report line.
fn report(seed: u64, m: &Module, feeds: &[(String, Arc<Tensor>)], what: &str) -> String {
    let small = minimize(m, feeds);
    let mut why = disagreement(&small, feeds, false).unwrap_or_else(|| what.to_string());
    if magnitude_only(&small, feeds) {
        why = format!("{why} (gone with inputs capped at {MAGNITUDE_CAP:e})");
    }
    let dir = std::env::var_os("GRAPHC_FUZZ_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures"));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{seed}.gir"));
    let text = format!("// differential fuzzer, seed {seed}: {why}\n{}", print_module(&small));
    let written = std::fs::write(&path, &text).is_ok();
    let mut inputs = Vec::new();
    for (name, t) in feeds {
        let npy = dir.join(format!("{seed}.{name}.npy"));
        if small.graphs[0].value_named(name).is_some() && graphc_runtime::npy::write_npy(&npy, t).is_ok() {
            inputs.push(format!("--input {name}={}", npy.display()));
        }
    }
    let place = if written { path.display().to_string() } else { "(could not write it)".into() };
    format!("seed {seed}: {why}\n  minimized: {place}\n  replay: graphc run {place} {}\n{text}", inputs.join(" "))
}

fn check(seed: u64) -> Result<(), String> {
    let (m, feeds) = generate(seed);
    // The printed graph must parse back to a verifying module: a written failure replays.
    let text = print_module(&m);
    parse_module(&text).map_err(|e| format!("seed {seed}: the printed graph does not parse: {e:?}\n{text}"))?;
    let Some(what) = disagreement(&m, &feeds, true) else { return Ok(()) };
    if !minimize_more() {
        return Err(format!("seed {seed}: {what} (not minimized: {MAX_MINIMIZED} were)"));
    }
    Err(report(seed, &m, &feeds, &what))
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

#[test]
fn default_pipeline_agrees_with_the_interpreter_on_random_graphs() {
    let (secs, cases) = (env_number("GRAPHC_FUZZ_SECS"), env_number("GRAPHC_FUZZ_CASES"));
    if secs.is_none() && cases.is_none() {
        let mut runner = TestRunner::new(Config {
            cases: 600,
            max_shrink_iters: 0,
            rng_seed: RngSeed::Fixed(7),
            ..Config::default()
        });
        let result = runner.run(&proptest::num::u64::ANY, |seed| check(seed).map_err(TestCaseError::fail));
        if let Err(e) = result {
            panic!("{e}");
        }
        return;
    }
    let first = env_number("GRAPHC_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    if std::env::var_os(CHILD).is_some() {
        return child_run(first, secs, cases);
    }
    let start = Instant::now();
    let deadline = secs.map(|s| start + Duration::from_secs(s));
    let (mut failures, mut done, mut counts) = (Vec::new(), 0u64, [0u64; 2]);
    let mut seed = first;
    while cases.is_none_or(|c| done < c) && deadline.is_none_or(|d| Instant::now() < d) {
        let chunk = cases.map_or(CHUNK, |c| (c - done).min(CHUNK));
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_secs().max(1));
        let child = chunk_run(seed, chunk, left);
        failures.extend(child.failures);
        for (total, k) in counts.iter_mut().zip(child.counts) {
            *total += k;
        }
        // A child that died was checking the seed after the last it finished: that seed fails.
        let next = match child.died {
            Some(why) => {
                let at = seed.wrapping_add(child.done);
                eprintln!("seed {at}: the fuzzer's process died ({why}) checking it");
                failures.push(at);
                child.done + 1
            }
            None => child.done.max(1),
        };
        seed = seed.wrapping_add(next);
        done += next;
    }
    let [huge, amplified] = counts;
    eprintln!(
        "differential fuzzer: {done} graphs from seed {first}, {} failed: {failures:?}; excused: {huge} by huge \
         inputs, {amplified} by per-node differences compounding",
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {done} graphs disagree (seeds {failures:?})", failures.len());
}

/// Set in the processes a long run checks its seeds in: a crash in compiled code, or anything
/// a process accumulates over ten thousands of graphs, must not end the run.
const CHILD: &str = "GRAPHC_FUZZ_CHILD";
const CHUNK: u64 = 1000;

struct ChunkResult {
    done: u64,
    failures: Vec<u64>,
    counts: [u64; 2],
    died: Option<String>,
}

/// Checks `cases` seeds from `first` in a child process (this test again), reading its
/// progress lines.
fn chunk_run(first: u64, cases: u64, secs: Option<u64>) -> ChunkResult {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--exact", "default_pipeline_agrees_with_the_interpreter_on_random_graphs", "--nocapture"])
        .env(CHILD, "1")
        .env("GRAPHC_FUZZ_SEED", first.to_string())
        .env("GRAPHC_FUZZ_CASES", cases.to_string())
        .env_remove("GRAPHC_FUZZ_SECS")
        .stdout(std::process::Stdio::piped());
    if let Some(s) = secs {
        cmd.env("GRAPHC_FUZZ_SECS", s.to_string());
    }
    let mut child = cmd.spawn().expect("the test binary runs");
    let mut result = ChunkResult { done: 0, failures: Vec::new(), counts: [0; 2], died: None };
    for line in std::io::BufReader::new(child.stdout.take().expect("piped")).lines().map_while(Result::ok) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["fuzz-done", n] => result.done = n.parse().unwrap_or(result.done),
            ["fuzz-failed", n] => result.failures.extend(n.parse::<u64>()),
            ["fuzz-counts", a, b] => result.counts = [a, b].map(|x| x.parse().unwrap_or(0)),
            _ => {}
        }
    }
    let status = child.wait().expect("the child ends");
    if !status.success() {
        result.died = Some(status.to_string());
    }
    result
}

/// A long run's child: checks the seeds, printing each finished one and each failure on
/// standard output for the parent, the failures' reports on standard error.
fn child_run(first: u64, secs: Option<u64>, cases: Option<u64>) {
    use std::io::Write;
    let deadline = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let mut out = std::io::stdout();
    let mut done = 0u64;
    while cases.is_none_or(|c| done < c) && deadline.is_none_or(|d| Instant::now() < d) {
        let seed = first.wrapping_add(done);
        if let Err(e) = check(seed) {
            eprintln!("{e}");
            let _ = writeln!(out, "fuzz-failed {seed}");
        }
        done += 1;
        let _ = writeln!(out, "fuzz-done {done}");
        let _ = out.flush();
    }
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(out, "fuzz-counts {} {}", load(&HUGE), load(&AMPLIFIED));
}

/// A request that fetches part of a graph needs only what that part reads: after the default
/// pipeline and compiled, fetching `a` (from `x` alone) works without `y` fed, as in the
/// interpreter, since fusion does not tie `a` to `b`, which reads `y`.
#[test]
fn fetching_part_of_a_graph_needs_no_more_inputs_compiled() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/filetests/fuse_leaving_values_need_the_same_inputs.gir"
    ))
    .expect("the filetest");
    let m = parse_module(&text).expect("the filetest parses");
    let opt = optimized(&m).expect("the pipeline runs");
    let x = Arc::new(Tensor::F32(ndarray::Array::from_vec(vec![0.5f32, -1.0, 2.0, 0.0]).into_dyn()));
    let interp = Session::new(m.clone(), options()).unwrap();
    let jit = Session::with_compiled(opt.clone(), options(), common::cpu_kernels(&opt, &Default::default()).unwrap())
        .unwrap();
    let only_a = |s: &Session| {
        let mut r = RunRequest::new("g").fetch("a");
        r.feeds = vec![("x".to_string(), x.clone())];
        s.run(r).map(|o| o.values[0].as_tensor().cloned())
    };
    let (want, got) = (only_a(&interp).expect("the interpreter runs a"), only_a(&jit).expect("compiled runs a"));
    close_spec(want.as_ref().unwrap(), got.as_ref().unwrap(), 1e-6).unwrap();
}

/// Only value differences can be excused: an error on one side, or a pipeline or compilation
/// that fails, always fails the fuzzer.
#[test]
fn only_value_differences_are_excusable() {
    assert!(values_differ("run 1, output 0: element 3: interpreter 1e0, compiled 2e0"));
    assert!(!values_differ("run 0: interpreter Ok([..]), compiled Err(\"extents\")"));
    assert!(!values_differ("the default pipeline fails: fuse: cycle"));
    assert!(!values_differ("compilation fails: unsupported"));
}

/// A request runs only what its fetches need: a fusion must not tie a value that needs an
/// `assign` to one that does not, or the second run reads what the first should not have
/// written (found by this fuzzer: seeds whose variables the compiled runs changed).
#[test]
fn fusion_keeps_apart_what_needs_different_effects() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/filetests/fuse_keeps_effects_apart.gir"
    ))
    .expect("the filetest");
    let m = parse_module(&text).expect("the filetest parses");
    let t = |xs: [f32; 4]| Arc::new(Tensor::F32(ndarray::Array::from_vec(xs.to_vec()).into_dyn()));
    let feeds = vec![("x".to_string(), t([0.5, -1.0, 2.0, 0.0])), ("y".to_string(), t([-3.0, 4.0, -0.5, 7.0]))];
    compare(&m, &feeds).unwrap();
}

/// Graphs whose ops broadcast a matrix product, a reduction's rows or a loop's values wider,
/// or reduce a product: every fusion the default pipeline makes of them is one the CPU
/// backend plans (none left to the interpreter for its shapes), an output fusion's epilogue
/// keeps the product's shape and holds no reduction, and they compute what the interpreter
/// does.
#[test]
fn fusions_of_broadcasting_and_reducing_graphs_run_compiled_and_agree() {
    let graphs = [
        "graph @g(%x: f32[4,3], %w: f32[3,1], %b: f32[4,5]) -> (y: f32[4,5]) {\n  %m = matmul %x, %w : f32[4,1]\n  %y = add %m, %b : f32[4,5]\n  return %y\n}\n",
        "graph @g(%x: f32[1,3], %w: f32[3,64], %b: f32[64,64]) -> (y: f32[64,64]) {\n  %m = matmul %x, %w : f32[1,64]\n  %a = add %m, %b : f32[64,64]\n  %y = relu %a : f32[64,64]\n  return %y\n}\n",
        "graph @g(%x: f32[4,3], %w: f32[3,16], %b: f32[2,4,16]) -> (y: f32[2,4,16]) {\n  %m = matmul %x, %w : f32[4,16]\n  %e = exp %m : f32[4,16]\n  %y = add %e, %b : f32[2,4,16]\n  return %y\n}\n",
        "graph @g(%x: f32[64,32], %w: f32[32,10], %b: f32[10]) -> (y: f32[64,10]) {\n  %m = matmul %x, %w : f32[64,10]\n  %l = add %m, %b : f32[64,10]\n  %y = softmax %l : f32[64,10]\n  return %y\n}\n",
        "graph @g(%x: f32[5,3], %w: f32[3,7]) -> (y: f32[5,1], z: f32[5,7]) {\n  %m = matmul %x, %w : f32[5,7]\n  %y = reduce_sum %m {axes = [-1], keep_dims = true} : f32[5,1]\n  %z = sub %m, %y : f32[5,7]\n  return %y, %z\n}\n",
        "graph @g(%x: f32[4,1], %y: f32[4,5]) -> (a: f32[4,1], b: f32[4,5]) {\n  %a = exp %x : f32[4,1]\n  %b = add %a, %y : f32[4,5]\n  return %a, %b\n}\n",
        "graph @g(%x: f32[4,1], %y: f32[4,5]) -> (c: f32[4,5]) {\n  %a = exp %x : f32[4,1]\n  %b = add %a, %y : f32[4,5]\n  %c = mul %b, %a : f32[4,5]\n  return %c\n}\n",
        "graph @g(%x: f32[4,5], %y: f32[3,4,5]) -> (b: f32[3,4,5]) {\n  %s = reduce_sum %x {axes = [-1], keep_dims = true} : f32[4,1]\n  %t = exp %s : f32[4,1]\n  %b = add %t, %y : f32[3,4,5]\n  return %b\n}\n",
        "graph @g(%x: f32[4,5], %y: f32[3,4,5]) -> (b: f32[3,4,5], s: f32[4,1]) {\n  %a = exp %x : f32[4,5]\n  %b = add %a, %y : f32[3,4,5]\n  %s = reduce_sum %a {axes = [-1], keep_dims = true} : f32[4,1]\n  return %b, %s\n}\n",
    ];
    for (i, text) in graphs.iter().enumerate() {
        let m = parse_module(text).unwrap_or_else(|e| panic!("graph {i}: {e:?}"));
        let mut opt = m.clone();
        PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut opt, &mut |_| {}).unwrap();
        let g = &opt.graphs[0];
        for &n in &g.regions[g.body].nodes {
            let nd = &g.nodes[n];
            if nd.op != Op::Fusion {
                continue;
            }
            let what = format!("graph {i}:\n{}", print_module(&opt));
            let planned = graphc::lower::plan::plan(g, n).is_some() || graphc::lower::plan::matmul_plan(g, n).is_some();
            assert!(planned, "a fusion the CPU backend leaves to the interpreter: {what}");
            let kernel = &g.regions[nd.regions[0]];
            let (&head, epilogue) = kernel.nodes.split_first().unwrap();
            if g.nodes[head].op == Op::MatMul {
                let product = &g.values[g.nodes[head].results[0]].ty;
                for &e in epilogue {
                    let ed = &g.nodes[e];
                    assert!(ed.op.kind() == graphc_ir::OpKind::Elementwise, "a non-elementwise epilogue: {what}");
                    assert_eq!(
                        &g.values[ed.results[0]].ty.as_tensor().unwrap().shape,
                        &product.as_tensor().unwrap().shape,
                        "{what}"
                    );
                }
            }
        }
        for seed in 0..8 {
            let mut rng = Rng(seed);
            let feeds: Vec<(String, Arc<Tensor>)> = m.graphs[0]
                .inputs()
                .iter()
                .map(|&v| {
                    let t = m.graphs[0].values[v].ty.as_tensor().unwrap().clone();
                    (m.graphs[0].values[v].name.clone().unwrap(), Arc::new(tensor_of(&mut rng, &t)))
                })
                .collect();
            if let Some(e) = disagreement(&m, &feeds, false) {
                panic!("graph {i}, seed {seed}: {e}\n{text}");
            }
        }
    }
}

#[test]
fn a_quarter_of_the_graphs_return_gradients() {
    let with = (0..400u64).filter(|&seed| generate(seed).0.graphs[0].outputs.iter().any(|o| o.name == "d0")).count();
    assert!((60..=140).contains(&with), "{with} of 400 graphs return gradients");
}
