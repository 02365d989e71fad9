//! Each pass, and the default pipeline, on a generated 100k-node graph.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_benches::large_graph;

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

criterion_group!(benches, passes);
criterion_main!(benches);
