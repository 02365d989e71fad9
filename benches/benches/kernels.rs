//! The CPU backend's kernels against the interpreter on the same graphs: elementwise
//! (W0/W1 shapes at 2^20 elements), row reductions (softmax, layernorm rows of 1024) and
//! matmul with a bias+relu epilogue, each after the default pipeline; and what a step pays
//! per node: chains of 1 and 201 tiny products (`[1,8] x [8,8]`, whose arithmetic is a few
//! nanoseconds), so that (chain_201 - chain_1) / 200 is the cost of running one compiled node
//! (operand lookup, kernel dispatch, result allocation and binding), the cost a static
//! execution plan would remove. The full-size comparison with XLA and ONNX Runtime is
//! benches/peers/compare.py.

use criterion::{criterion_group, criterion_main, Criterion};
use graphc::lower::cpu::CpuKernels;
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_runtime::random::random_request;
use graphc_runtime::{Session, SessionOptions};

const GRAPHS: &[(&str, &str)] = &[
    (
        "axpb_2e20",
        "graph @g(%x: f32[1048576], %a: f32[], %b: f32[]) -> (y: f32[1048576]) {\n  %ax = mul %a, %x : f32[1048576]\n  %y = add %ax, %b : f32[1048576]\n  return %y\n}\n",
    ),
    (
        "activation_2e20",
        "graph @g(%x: f32[1048576], %a: f32[], %b: f32[]) -> (y: f32[1048576]) {\n  %xa = mul %x, %a : f32[1048576]\n  %xab = add %xa, %b : f32[1048576]\n  %r = relu %xab : f32[1048576]\n  %s = sigmoid %x : f32[1048576]\n  %rs = mul %r, %s : f32[1048576]\n  %t = tanh %x : f32[1048576]\n  %y = sub %rs, %t : f32[1048576]\n  return %y\n}\n",
    ),
    (
        "softmax_256x1024",
        "graph @g(%x: f32[256,1024]) -> (y: f32[256,1024]) {\n  %y = softmax %x {axis = -1} : f32[256,1024]\n  return %y\n}\n",
    ),
    (
        "matmul_bias_relu_256",
        "graph @g(%a: f32[256,256], %b: f32[256,256], %bias: f32[256]) -> (y: f32[256,256]) {\n  %p = matmul %a, %b : f32[256,256]\n  %h = add %p, %bias : f32[256,256]\n  %y = relu %h : f32[256,256]\n  return %y\n}\n",
    ),
];

/// A chain of `n` products of an `f32[1,8]` row by one `f32[8,8]` matrix, each its own node
/// (a product's result feeds the next product: nothing fuses).
fn product_chain(n: usize) -> String {
    let mut text = String::from("graph @g(%x: f32[1,8], %w: f32[8,8]) -> (y: f32[1,8]) {\n");
    let mut last = "x".to_string();
    for i in 0..n {
        text += &format!("  %p{i} = matmul %{last}, %w : f32[1,8]\n");
        last = format!("p{i}");
    }
    text + &format!("  return %{last}\n}}\n")
}

fn step_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("step_overhead");
    for n in [1, 201] {
        let m = graphc_ir::parse_module(&product_chain(n)).expect("the chain parses");
        let req = random_request(&m.graphs[0], 0).expect("small random inputs");
        let compiled = CpuKernels::compile(&m).expect("compiles");
        let jit = Session::with_compiled(m, SessionOptions::default(), compiled).expect("verifies");
        group.bench_function(format!("chain_{n}/jit"), |b| b.iter(|| jit.run(req.clone()).expect("runs")));
    }
    group.finish();
}

fn kernels(c: &mut Criterion) {
    let mut group = c.benchmark_group("kernels");
    group.sample_size(20);
    for (name, text) in GRAPHS {
        let mut m = graphc_ir::parse_module(text).expect("the benchmark graphs parse");
        PassManager::new(DEFAULT_PIPELINE).expect("the default pipeline").run(&mut m, &mut |_| {}).expect("passes");
        let req = random_request(&m.graphs[0], 0).expect("small random inputs");
        let interp = Session::new(m.clone(), SessionOptions::default()).expect("verifies");
        let compiled = CpuKernels::compile(&m).expect("compiles");
        let jit = Session::with_compiled(m, SessionOptions::default(), compiled).expect("verifies");
        group.bench_function(format!("{name}/jit"), |b| b.iter(|| jit.run(req.clone()).expect("runs")));
        group.bench_function(format!("{name}/interp"), |b| b.iter(|| interp.run(req.clone()).expect("runs")));
    }
    group.finish();
}

criterion_group!(benches, kernels, step_overhead);
criterion_main!(benches);
