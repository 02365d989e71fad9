//! The buffer plan: values die after their last use, a compiled kernel writes its result over
//! an operand it reads last (and over nothing anyone else holds: feeds, fetches), and a step
//! after the first takes every kernel output from the session's pool.

mod common;

use graphc::lower::cpu::CpuKernels;
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_ir::{parse_module, Module};
use graphc_runtime::random::random_request;
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::sync::Arc;

const TRANSPOSE_THEN_TANH: &str = "graph @g(%x: f32[64,48]) -> (y: f32[48,64]) {
  %t = transpose %x {perm = [1, 0]} : f32[48,64]
  %y = tanh %t : f32[48,64]
  return %y
}
";

fn module(text: &str) -> Module {
    parse_module(text).unwrap_or_else(|d| panic!("{d:?}"))
}

fn sessions(m: &Module) -> (Session, Session) {
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), CpuKernels::compile(m).unwrap()).unwrap();
    (interp, jit)
}

fn f32s(t: &Tensor) -> Vec<f32> {
    match t {
        Tensor::F32(a) => a.iter().copied().collect(),
        t => panic!("expected f32, got {}", t.dtype()),
    }
}

/// The interpreter's `want` against the JIT's `got`, as SPEC §12 bounds a chain of nodes.
fn assert_close(want: &Tensor, got: &Tensor, what: &str) {
    common::close::assert_close_spec(&format!("graph: {what}"), got, want)
}

#[test]
fn a_kernel_writes_its_result_over_an_operand_it_reads_last() {
    let m = module(TRANSPOSE_THEN_TANH);
    let (interp, jit) = sessions(&m);
    let req = random_request(&m.graphs[0], 3).expect("small random inputs");
    let want = interp.run(req.clone()).unwrap();
    let got = jit.run(req).unwrap();
    assert_close(want.tensor(0).unwrap(), got.tensor(0).unwrap(), "y");
    // The transpose's result (the one buffer taken) died at the tanh, which wrote over it.
    assert_eq!(jit.buffer_stats().allocated, 1, "{:?}", jit.buffer_stats());
}

#[test]
fn fetched_and_fed_values_are_never_overwritten() {
    let m = module(TRANSPOSE_THEN_TANH);
    let (interp, jit) = sessions(&m);
    let mut req = random_request(&m.graphs[0], 4).expect("small random inputs");
    req.fetches = vec!["y".into(), "t".into()];
    let fed = f32s(&req.feeds[0].1);
    let want = interp.run(req.clone()).unwrap();
    let got = jit.run(req.clone()).unwrap();
    for (i, name) in ["y", "t"].iter().enumerate() {
        assert_close(want.tensor(i).unwrap(), got.tensor(i).unwrap(), name);
    }
    assert_eq!(jit.buffer_stats().allocated, 2, "the fetched %t keeps its buffer: the tanh takes another");
    assert_eq!(f32s(&req.feeds[0].1), fed, "the feed is unchanged");

    // A feed the caller gives up (moved into the request) is still the caller's: the request
    // keeps it until the run returns, so a kernel reading it never writes over it.
    let m = module("graph @g(%x: f32[300]) -> (y: f32[300]) {\n  %y = exp %x : f32[300]\n  return %y\n}\n");
    let (_, jit) = sessions(&m);
    let x: Vec<f32> = (0..300).map(|i| i as f32 / 100.0).collect();
    let feed = Arc::new(Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![300], x.clone()).unwrap()));
    let out = jit.run(RunRequest::new("g").feed("x", feed.clone())).unwrap();
    assert_eq!(f32s(&feed), x);
    assert_close(
        &Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![300], x.iter().map(|v| v.exp()).collect()).unwrap()),
        out.tensor(0).unwrap(),
        "exp",
    );
}

#[test]
fn steps_after_the_first_allocate_no_kernel_buffers() {
    let text = std::fs::read_to_string(common::example("mlp.gir")).unwrap();
    let mut m = module(&text);
    PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut m, &mut |_| {}).unwrap();
    let (interp, jit) = sessions(&m);
    let g = &m.graphs[0];
    let want = interp.run(random_request(g, 5).expect("small random inputs")).unwrap();
    let first = jit.run(random_request(g, 5).expect("small random inputs")).unwrap();
    // End to end through two products summed in another order: SPEC §12's bound compounds.
    let end_to_end = common::close::Bound::Rel(1e-4, 1e-4);
    common::close::assert_close_within("probs", first.tensor(0).unwrap(), want.tensor(0).unwrap(), end_to_end);
    let first = f32s(first.tensor(0).unwrap());
    let mut after_first = None;
    for step in 0..4 {
        let out = jit.run(random_request(g, 5).expect("small random inputs")).unwrap();
        // Recycled buffers change nothing.
        assert_eq!(f32s(out.tensor(0).unwrap()), first, "step {step}");
        jit.recycle([out]);
        let stats = jit.buffer_stats();
        match after_first {
            None => {
                assert!(stats.allocated > 0, "the first step allocates its buffers");
                after_first = Some(stats.allocated);
            }
            Some(n) => {
                assert_eq!(stats.allocated, n, "step {step} allocated: {stats:?}");
                assert!(stats.reused > 0);
            }
        }
    }
}

#[test]
fn loop_carried_values_update_in_place_and_match() {
    // The body's product dies there and is yielded: the next iteration's multiply reads the
    // carried value last and may write over it.
    let m = module(
        "graph @p(%x: f32[1000]) -> (y: f32[1000]) {
  %i0 = constant {value = dense<0> : i32[]} : i32[]
  %n = constant {value = dense<5> : i32[]} : i32[]
  %i, %acc, %ns = while %i0, %x, %n : i32[], f32[1000], i32[]
    cond(%ci: i32[], %cacc: f32[1000], %cn: i32[]) {
      %more = less %ci, %cn : bool[]
      yield %more
    }
    body(%bi: i32[], %bacc: f32[1000], %bn: i32[]) {
      %step = constant {value = dense<1> : i32[]} : i32[]
      %next = add %bi, %step : i32[]
      %half = constant {value = dense<0.5> : f32[1000]} : f32[1000]
      %prod = mul %bacc, %half : f32[1000]
      %t = tanh %prod : f32[1000]
      yield %next, %t, %bn
    }
  return %acc
}
",
    );
    let (interp, jit) = sessions(&m);
    let req = random_request(&m.graphs[0], 6).expect("small random inputs");
    let fed = f32s(&req.feeds[0].1);
    let want = interp.run(req.clone()).unwrap();
    let got = jit.run(req.clone()).unwrap();
    assert_close(want.tensor(0).unwrap(), got.tensor(0).unwrap(), "acc");
    assert_eq!(f32s(&req.feeds[0].1), fed, "the feed is unchanged");
    // One buffer for the whole loop: the first multiply reads the fed %x (never written
    // over) and the body's constant (made once per session and kept, so never written over
    // either); every later multiply writes over the carried value it reads last, each tanh
    // over its product.
    assert_eq!(jit.buffer_stats().allocated, 1, "{:?}", jit.buffer_stats());
}
