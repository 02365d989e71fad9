//! `graphc opt` on a long chain: 160k relus go through parsing, verification, the default
//! pipeline (which verifies after every pass in debug builds) and printing on a thread with a
//! small stack, so nothing recurses along the chain; and in near-linear time: 8x the nodes of
//! a 20k chain take under 20x its time (about 10x measured; a quadratic part would take 64x,
//! and one that took a fifth of the 20k chain's time would make it 20x). Timings of the
//! release build: `benches/opt_scaling.py`.

use graphc::passes::{kernel_count, PassManager, DEFAULT_PIPELINE};
use graphc_ir::{parse_module, print_module, verify_module};
use std::time::{Duration, Instant};

/// `n` relus in a chain, `%x0 = relu %in` to `%x{n-1}`, as `benches/opt_scaling.py` writes them.
fn relu_chain(n: usize) -> String {
    let mut text = String::from("graph @chain(%in: f32[16]) -> (y: f32[16]) {\n");
    let mut prev = "%in".to_string();
    for i in 0..n {
        text.push_str(&format!("  %x{i} = relu {prev} : f32[16]\n"));
        prev = format!("%x{i}");
    }
    text.push_str(&format!("  return {prev}\n}}\n"));
    text
}

/// What `graphc opt` does: parse, verify, the lowerings and the default pipeline, print.
fn opt(text: &str) -> String {
    let mut m = parse_module(text).expect("the chain parses");
    assert!(verify_module(&m).is_empty());
    let pipeline = format!("{},{DEFAULT_PIPELINE}", graphc::backend::LOWERINGS);
    PassManager::new(&pipeline).expect("known passes").run(&mut m, &mut |_| {}).expect("the pipeline runs");
    assert_eq!(kernel_count(&m.graphs[0]), 1, "the chain is one kernel");
    print_module(&m)
}

fn timed_opt(n: usize) -> (Duration, String) {
    let text = relu_chain(n);
    let start = Instant::now();
    let out = opt(&text);
    (start.elapsed(), out)
}

#[test]
fn a_160k_relu_chain_goes_through_opt_on_a_small_stack_in_near_linear_time() {
    // Half the stack of a test thread: a walk recursing once per node would need megabytes.
    let worker = std::thread::Builder::new().stack_size(1 << 20).spawn(|| {
        let small = (0..3).map(|_| timed_opt(20_000).0).min().expect("three runs");
        let (large, out) = timed_opt(160_000);
        (small, large, out)
    });
    let (small, large, out) = worker.expect("a thread").join().expect("opt finishes on a 1 MiB stack");
    assert!(out.contains("%x159999 = fusion %in {kind = \"loop\"} : f32[16]"), "{}", &out[..out.len().min(400)]);
    assert_eq!(out.matches(" = relu ").count(), 160_000);
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    assert!(ratio < 20.0, "20k nodes: {small:?}, 160k nodes: {large:?}: {ratio:.1}x for 8x the nodes");
}
