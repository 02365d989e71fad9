//! Each pass, and the default pipeline, on a generated 100k-node graph; and fusion alone on
//! the shapes that once made it quadratic: long chains of one group (20k and 160k relus) and
//! a wide DAG whose branches merge (400 values a layer, each reading two of the layer before,
//! 100 layers, summed at the end).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_benches::large_graph;
use graphc_ir::{DType, Graph, Module, NodeSpec, Op, Type, Value};

fn passes(c: &mut Criterion) {
    let m = large_graph(100_000);
    let mut group = c.benchmark_group("passes_100k_nodes");
    group.sample_size(10);
    for pipeline in ["canonicalize", "fold", "cse", "dce", "fuse", DEFAULT_PIPELINE] {
        let pm = PassManager::new(pipeline).expect("known passes");
        group.bench_function(pipeline, |b| {
            b.iter_batched(
                || m.clone(),
                |mut m| pm.run(&mut m, &mut |_| {}).expect("passes succeed"),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

/// `n` relus in a chain.
fn relu_chain(n: usize) -> Module {
    let mut g = Graph::new("chain");
    let mut x = g.add_input("x", Type::tensor(DType::F32, [16]));
    for _ in 0..n {
        x = g.add(g.body, NodeSpec::new(Op::Relu, vec![x])).expect("valid")[0];
    }
    g.set_outputs(vec![("y".into(), x)]);
    Module { graphs: vec![g], end_comments: vec![] }
}

/// `layers` layers of `width` binary ops, op `i` of a layer reading value `i` and a
/// pseudo-random one of the layer before; then an add tree down to one value.
fn wide_dag(width: usize, layers: usize) -> Module {
    let mut g = Graph::new("wide");
    let x = g.add_input("x", Type::tensor(DType::F32, [16]));
    let ops = [Op::Add, Op::Mul, Op::Max, Op::Sub];
    let mut prev: Vec<Value> = vec![x; width];
    let mut state = 1u64;
    for _ in 0..layers {
        let mut cur = Vec::with_capacity(width);
        for i in 0..width {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = (state >> 33) as usize % width;
            let op = ops[(state >> 20) as usize % ops.len()];
            cur.push(g.add(g.body, NodeSpec::new(op, vec![prev[i], prev[j]])).expect("valid")[0]);
        }
        prev = cur;
    }
    while prev.len() > 1 {
        let mut next: Vec<Value> = prev
            .chunks_exact(2)
            .map(|p| g.add(g.body, NodeSpec::new(Op::Add, vec![p[0], p[1]])).expect("valid")[0])
            .collect();
        if prev.len() % 2 == 1 {
            next.push(prev[prev.len() - 1]);
        }
        prev = next;
    }
    g.set_outputs(vec![("y".into(), prev[0])]);
    Module { graphs: vec![g], end_comments: vec![] }
}

fn fuse(c: &mut Criterion) {
    let mut group = c.benchmark_group("fuse");
    group.sample_size(10);
    let pm = PassManager::new("fuse").expect("known pass");
    for (name, m) in [
        ("relu_chain_20k", relu_chain(20_000)),
        ("relu_chain_160k", relu_chain(160_000)),
        ("wide_dag_400x100", wide_dag(400, 100)),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || m.clone(),
                |mut m| pm.run(&mut m, &mut |_| {}).expect("fusion succeeds"),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, passes, fuse);
criterion_main!(benches);
