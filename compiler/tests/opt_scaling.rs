//! `graphc opt` on a long chain: 160k relus go through parsing, verification, the default
//! pipeline (which verifies after every pass in debug builds) and printing on a thread with a
//! small stack, so nothing recurses along the chain. How its time grows with the chain is
//! measured, not asserted here: `benches/opt_scaling.py` (release build, 20k to 160k nodes;
//! `--check` fails past 10x for 8x the nodes).

use graphc::passes::{kernel_count, PassManager, DEFAULT_PIPELINE};
use graphc_ir::{parse_module, print_module, verify_module};

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

#[test]
fn a_160k_relu_chain_goes_through_opt_on_a_small_stack() {
    // Half the stack of a test thread: a walk recursing once per node would need megabytes.
    let worker = std::thread::Builder::new().stack_size(1 << 20).spawn(|| opt(&relu_chain(160_000)));
    let out = worker.expect("a thread").join().expect("opt finishes on a 1 MiB stack");
    assert!(out.contains("%x159999 = fusion %in {kind = \"loop\"} : f32[16]"), "{}", &out[..out.len().min(400)]);
    assert_eq!(out.matches(" = relu ").count(), 160_000);
}
