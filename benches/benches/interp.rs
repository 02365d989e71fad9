//! The reference interpreter on the bundled examples: the baseline that fusion and the
//! compiled backends are measured against.

use criterion::{criterion_group, criterion_main, Criterion};
use graphc_benches::example_session;

fn interp(c: &mut Criterion) {
    let mut group = c.benchmark_group("interp");
    for (file, graph) in [("mlp.gir", "mlp"), ("layernorm.gir", "layernorm"), ("attention.gir", "attention")] {
        let (session, req) = example_session(file, graph);
        group.bench_function(graph, |b| b.iter(|| session.run(req.clone()).expect("runs")));
    }
    group.finish();
}

criterion_group!(benches, interp);
criterion_main!(benches);
