//! Parse (with type checking) and print a generated 100k-node graph.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use graphc_benches::large_graph;
use graphc_ir::{parse_module, print_module, verify_module};

fn parse_print(c: &mut Criterion) {
    let m = large_graph(100_000);
    let text = print_module(&m);
    let mut group = c.benchmark_group("ir_100k_nodes");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("parse", |b| b.iter(|| parse_module(&text).expect("valid")));
    group.bench_function("print", |b| b.iter(|| print_module(&m)));
    group.bench_function("verify", |b| b.iter(|| verify_module(&m)));
    group.finish();
}

criterion_group!(benches, parse_print);
criterion_main!(benches);
