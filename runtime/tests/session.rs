//! Sessions: partial execution, feeds and fetches, variables, control flow, send/recv steps.

mod common;
use common::*;
use graphc_runtime::{ErrorKind, RunRequest, SessionOptions};
use std::time::{Duration, Instant};

const CHAIN: &str = "graph @g(%x: f32[2], %y: f32[2]) -> (out: f32[2], side: f32[2]) {
  %a = exp %x : f32[2]
  %b = neg %a : f32[2]
  %c = add %b, %x : f32[2]
  %d = mul %c, %c : f32[2]
  %s = abs %y : f32[2]
  return %d, %s
}
";

#[test]
fn fetching_an_intermediate_runs_only_its_ancestors() {
    let s = session(CHAIN);
    let x = f32t(&[2], &[0.0, 1.0]);
    let all = s.run(RunRequest::new("g").feed("x", x.clone()).feed("y", x.clone())).unwrap();
    assert_eq!(all.nodes_executed, 5);
    let b = s.run(RunRequest::new("g").feed("x", x.clone()).fetch("b")).unwrap();
    assert_eq!(b.nodes_executed, 2, "exp and neg only");
    assert_eq!(b.get("b").unwrap(), &f32t(&[2], &[-1.0, -std::f32::consts::E]));
    // Only the inputs the needed nodes read must be fed: %y is not.
    let side = s.run(RunRequest::new("g").feed("y", x.clone()).fetch("side")).unwrap();
    assert_eq!(side.nodes_executed, 1);
}

#[test]
fn feeding_an_intermediate_cuts_its_ancestors() {
    let s = session(CHAIN);
    let out = s
        .run(RunRequest::new("g").feed("x", f32t(&[2], &[0.0, 0.0])).feed("b", f32t(&[2], &[3.0, 4.0])).fetch("%d"))
        .unwrap();
    assert_eq!(out.nodes_executed, 2, "add and mul; exp and neg are cut off by the feed");
    assert_eq!(out.tensor(0).unwrap(), &f32t(&[2], &[9.0, 16.0]));
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let s = session(CHAIN);
    let err = |r: RunRequest| s.run(r).unwrap_err();
    let e = err(RunRequest::new("g").fetch("out"));
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("needs input 'x' (f32[2])"), "{e}");
    let e = err(RunRequest::new("g").feed("x", f32t(&[3], &[0.0; 3])).fetch("out"));
    assert!(e.message.contains("expected f32[2], got f32[3]"), "{e}");
    let e = err(RunRequest::new("g").feed("x", i32t(&[2], &[0; 2])).fetch("out"));
    assert!(e.message.contains("expected f32[2], got i32[2]"), "{e}");
    let e = err(RunRequest::new("g").fetch("outt"));
    assert!(e.message.contains("did you mean 'out'"), "{e}");
    let e = err(RunRequest::new("h"));
    assert!(e.message.contains("no graph @h") && e.message.contains("@g"), "{e}");
}

#[test]
fn variables_persist_across_runs() {
    let s = session(
        "graph @inc(%d: f32[2]) -> (v: f32[2]) {
  %w = variable {name = \"w\", init = dense<1.0> : f32[2]} : var<f32[2]>
  %0 = assign_add %w, %d : f32[2]
  return %0
}

graph @get() -> (v: f32[2]) {
  %w = variable {name = \"w\", init = dense<1.0> : f32[2]} : var<f32[2]>
  %0 = read %w : f32[2]
  return %0
}

graph @set(%x: f32[2]) -> (v: f32[2]) {
  %w = variable {name = \"w\", init = dense<1.0> : f32[2]} : var<f32[2]>
  %0 = assign %w, %x : f32[2]
  return %0
}
",
    );
    let d = f32t(&[2], &[0.5, -1.0]);
    for _ in 0..3 {
        s.run(RunRequest::new("inc").feed("d", d.clone())).unwrap();
    }
    let v = s.run(RunRequest::new("get")).unwrap();
    assert_eq!(v.tensor(0).unwrap(), &f32t(&[2], &[2.5, -2.0]));
    s.run(RunRequest::new("set").feed("x", f32t(&[2], &[7.0, 8.0]))).unwrap();
    assert_eq!(s.run(RunRequest::new("get")).unwrap().tensor(0).unwrap(), &f32t(&[2], &[7.0, 8.0]));
}

#[test]
fn concurrent_assign_adds_lose_nothing() {
    let s = session(
        "graph @inc() -> (v: i64[]) {
  %w = variable {name = \"n\", init = dense<0> : i64[]} : var<i64[]>
  %one = constant {value = dense<1> : i64[]} : i64[]
  %0 = assign_add %w, %one : i64[]
  return %0
}
",
    );
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                for _ in 0..250 {
                    s.run(RunRequest::new("inc")).unwrap();
                }
            });
        }
    });
    let n = s.state().variable("n").unwrap().read().unwrap();
    assert_eq!(*n, i64t(&[], &[1000]));
}

#[test]
fn reading_an_uninitialized_variable_is_a_clear_error() {
    let s = session(
        "graph @g() -> (v: f32[2]) {
  %w = variable {name = \"w\"} : var<f32[2]>
  %0 = read %w : f32[2]
  return %0
}
",
    );
    let e = s.run(RunRequest::new("g")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Uninitialized);
    assert!(e.message.contains("variable \"w\" (f32[2]) is read before it has a value"), "{e}");
    assert_eq!(e.node.as_deref(), Some("node 'read'"));
    assert!(e.span.is_some());
}

#[test]
fn conditionals_run_only_the_chosen_branch() {
    let s = session(
        "graph @g(%p: bool[], %x: f32[2]) -> (y: f32[2], n: i64[]) {
  %w = variable {name = \"count\", init = dense<0> : i64[]} : var<i64[]>
  %y, %n = cond %p, %x, %w : f32[2], i64[]
    then(%a: f32[2], %v: var<i64[]>) {
      %one = constant {value = dense<1> : i64[]} : i64[]
      %c = assign_add %v, %one : i64[]
      %e = exp %a : f32[2]
      yield %e, %c
    }
    else(%b: f32[2], %u: var<i64[]>) {
      %m = neg %b : f32[2]
      %r = read %u : i64[]
      yield %m, %r
    }
  return %y, %n
}
",
    );
    let x = f32t(&[2], &[0.0, 1.0]);
    let run = |p: bool| s.run(RunRequest::new("g").feed("p", boolt(&[], &[p])).feed("x", x.clone())).unwrap();
    let t = run(true);
    assert_eq!(t.tensor(0).unwrap(), &f32t(&[2], &[1.0, std::f32::consts::E]));
    assert_eq!(t.tensor(1).unwrap(), &i64t(&[], &[1]));
    let f = run(false);
    assert_eq!(f.tensor(0).unwrap(), &f32t(&[2], &[-0.0, -1.0]));
    assert_eq!(f.tensor(1).unwrap(), &i64t(&[], &[1]), "the else branch did not increment");
}

#[test]
fn loops_iterate_and_update_variables() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../ir-spec/examples/loop.gir")).unwrap();
    let s = session(&src);
    let x = f32t(&[3], &[2.0, -1.0, 0.5]);
    let p = s.run(RunRequest::new("power").feed("x", x.clone()).feed("n", i32t(&[], &[3]))).unwrap();
    assert_eq!(p.tensor(0).unwrap(), &f32t(&[3], &[8.0, -1.0, 0.125]));
    let zero = s.run(RunRequest::new("power").feed("x", x.clone()).feed("n", i32t(&[], &[0]))).unwrap();
    assert_eq!(zero.tensor(0).unwrap(), &f32t(&[3], &[1.0, 1.0, 1.0]));
    let acc = s.run(RunRequest::new("accumulate").feed("x", x.clone()).feed("n", i32t(&[], &[4]))).unwrap();
    assert_eq!(acc.tensor(0).unwrap(), &f32t(&[3], &[8.0, -4.0, 2.0]));
    // The variable persists: four more.
    let acc = s.run(RunRequest::new("accumulate").feed("x", x).feed("n", i32t(&[], &[4]))).unwrap();
    assert_eq!(acc.tensor(0).unwrap(), &f32t(&[3], &[16.0, -8.0, 4.0]));
}

#[test]
fn partitions_run_as_one_step_through_the_rendezvous() {
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../ir-spec/examples/partitioned.gir")).unwrap();
    let s = session(&src);
    let x = f32t(&[8, 16], &(0..128).map(|i| (i as f32 - 64.0) / 32.0).collect::<Vec<_>>());
    let w = f32t(&[16, 4], &(0..64).map(|i| ((i * 7) % 11) as f32 / 5.0 - 1.0).collect::<Vec<_>>());
    let out = s
        .run_step(vec![
            RunRequest::new("part_cpu0").feed("x", x.clone()).feed("w", w.clone()),
            RunRequest::new("part_cpu1"),
        ])
        .unwrap();
    // The same computation on one device: y = h + relu(h).
    let single = run(
        "(%x: f32[8,16], %w: f32[16,4]) -> (y: f32[8,4])",
        "  %h = matmul %x, %w : f32[8,4]\n  %r = relu %h : f32[8,4]\n  %y = add %h, %r : f32[8,4]\n  return %y",
        &[("x", x), ("w", w)],
    );
    assert_eq!(out[0].get("y").unwrap(), &single[0]);
}

#[test]
fn sends_inside_loops_are_keyed_by_iteration() {
    let s = session(
        "graph @a(%n: i32[]) -> (i: i32[]) {
  %i0 = constant {value = dense<0> : i32[]} : i32[]
  %i, %m = while %i0, %n : i32[], i32[]
    cond(%ci: i32[], %cn: i32[]) {
      %more = less %ci, %cn : bool[]
      yield %more
    }
    body(%bi: i32[], %bn: i32[]) {
      %t = send %bi {key = \"i\", to = \"/device:cpu:1\"} : token
      %one = constant {value = dense<1> : i32[]} : i32[]
      %next = add %bi, %one after(%t) : i32[]
      yield %next, %bn
    }
  return %i
}

graph @b(%n: i32[]) -> (sum: i32[]) {
  %i0 = constant {value = dense<0> : i32[]} : i32[]
  %s0 = constant {value = dense<0> : i32[]} : i32[]
  %i, %s, %m = while %i0, %s0, %n : i32[], i32[], i32[]
    cond(%ci: i32[], %cs: i32[], %cn: i32[]) {
      %more = less %ci, %cn : bool[]
      yield %more
    }
    body(%bi: i32[], %bs: i32[], %bn: i32[]) {
      %got = recv {key = \"i\", from = \"/device:cpu:0\"} : i32[]
      %s2 = add %bs, %got : i32[]
      %one = constant {value = dense<1> : i32[]} : i32[]
      %next = add %bi, %one : i32[]
      yield %next, %s2, %bn
    }
  return %s
}
",
    );
    let n = i32t(&[], &[5]);
    let out = s.run_step(vec![RunRequest::new("a").feed("n", n.clone()), RunRequest::new("b").feed("n", n)]).unwrap();
    assert_eq!(out[1].get("sum").unwrap(), &i32t(&[], &[10]), "0+1+2+3+4, each iteration's value once");
}

#[test]
fn a_failure_cancels_the_whole_step_with_the_original_error() {
    let s = session(
        "graph @bad(%x: i32[]) -> (t: token) {
  %z = constant {value = dense<0> : i32[]} : i32[]
  %q = div %x, %z : i32[]
  %t = send %q {key = \"q\", to = \"/device:cpu:1\"} : token
  return %t
}

graph @waiting() -> (y: i32[]) {
  %y = recv {key = \"q\", from = \"/device:cpu:0\"} : i32[]
  return %y
}
",
    );
    let start = Instant::now();
    let e =
        s.run_step(vec![RunRequest::new("bad").feed("x", i32t(&[], &[1])), RunRequest::new("waiting")]).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(1), "the waiting recv was cancelled promptly");
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert!(e.message.contains("division by zero"), "{e}");
    assert_eq!(e.graph.as_deref(), Some("bad"));
    // The session is still usable.
    let e = s.run(RunRequest::new("bad").feed("x", i32t(&[], &[1]))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
}

#[test]
fn a_lone_recv_is_a_deadlock_when_detection_is_on_and_a_timeout_otherwise() {
    let src = "graph @waiting() -> (y: i32[]) {
  %y = recv {key = \"q\", from = \"/device:cpu:0\"} : i32[]
  return %y
}
";
    let s = session_with(src, SessionOptions { detect_deadlock: true, ..Default::default() });
    let e = s.run(RunRequest::new("waiting")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deadlock);
    assert!(e.message.contains("rendezvous key \"q\""), "{e}");
    let s = session_with(src, SessionOptions { wait_timeout: Some(Duration::from_millis(100)), ..Default::default() });
    let e = s.run(RunRequest::new("waiting")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
}

const SPIN: &str = "graph @spin(%x: f32[3]) -> (y: f32[3]) {
  %r = while %x : f32[3]
    cond(%c: f32[3]) {
      %t = constant {value = dense<true> : bool[]} : bool[]
      yield %t
    }
    body(%b: f32[3]) {
      %n = neg %b : f32[3]
      yield %n
    }
  return %r
}

graph @bad(%x: i32[]) -> (q: i32[]) {
  %z = constant {value = dense<0> : i32[]} : i32[]
  %q = div %x, %z : i32[]
  return %q
}
";

#[test]
fn a_loop_that_never_ends_stops_at_the_step_timeout_and_names_the_loop() {
    let options = SessionOptions { step_timeout: Some(Duration::from_millis(200)), ..Default::default() };
    let s = session_with(SPIN, options);
    let start = Instant::now();
    let e = s.run(RunRequest::new("spin").feed("x", f32t(&[3], &[1.0, 2.0, 3.0]))).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "stopped near its deadline: {:?}", start.elapsed());
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert_eq!(e.node.as_deref(), Some("node 'while %r'"), "{e}");
    assert!(e.span.is_some_and(|s| SPIN[s.start as usize..].starts_with("%r = while")), "{e:?}");
    assert!(e.message.contains("time limit of 0.2s") && e.message.contains("iteration"), "{e}");
    // The deadline is per step: the next step gets a fresh one.
    let e = s.run(RunRequest::new("spin").feed("x", f32t(&[3], &[1.0, 2.0, 3.0]))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert!(s.run(RunRequest::new("bad").feed("x", i32t(&[], &[1]))).is_err_and(|e| e.kind == ErrorKind::Kernel));
}

#[test]
fn the_stop_flag_interrupts_a_loop_that_never_ends_and_the_session_goes_on_once_cleared() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = session_with(SPIN, SessionOptions { stop: Some(stop.clone()), ..Default::default() });
    let setter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let start = Instant::now();
    let e = s.run(RunRequest::new("spin").feed("x", f32t(&[3], &[1.0, 2.0, 3.0]))).unwrap_err();
    setter.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(5), "stopped soon after the flag: {:?}", start.elapsed());
    assert_eq!(e.kind, ErrorKind::Cancelled, "{e}");
    assert!(e.message.starts_with("interrupted"), "{e}");
    assert_eq!(e.node.as_deref(), Some("node 'while %r'"), "{e}");
    // While it is set, every step stops; cleared, the session runs again.
    assert!(s.run(RunRequest::new("bad").feed("x", i32t(&[], &[1]))).is_err_and(|e| e.kind == ErrorKind::Cancelled));
    stop.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(s.run(RunRequest::new("bad").feed("x", i32t(&[], &[1]))).is_err_and(|e| e.kind == ErrorKind::Kernel));
}

#[test]
fn a_failing_graph_cancels_a_concurrent_loop_that_never_ends() {
    let s = session(SPIN);
    let start = Instant::now();
    let e = s
        .run_step(vec![
            RunRequest::new("spin").feed("x", f32t(&[3], &[1.0, 2.0, 3.0])),
            RunRequest::new("bad").feed("x", i32t(&[], &[1])),
        ])
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "the loop was cancelled: {:?}", start.elapsed());
    assert_eq!(e.kind, ErrorKind::Kernel, "the original error, not the cancellation: {e}");
}

#[test]
fn a_value_inside_a_loop_body_cannot_be_fetched_or_targeted() {
    let s = session(SPIN);
    for r in [RunRequest::new("spin").fetch("n"), RunRequest::new("spin").target("%c")] {
        let e = s.run(r.feed("x", f32t(&[3], &[1.0, 2.0, 3.0]))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        assert!(e.message.contains("region of node 'while %r' of @spin") && e.span.is_some(), "{e}");
    }
}

const INVARIANT: &str = "graph @g(%x: f32[2,3]) -> (y: f32[2,3], w: f32[2,3]) {
  %c = constant {value = dense<[1.0, 2.0, 3.0]> : f32[3]} : f32[3]
  %w = broadcast %c {shape = [2, 3]} : f32[2,3]
  %y = add %w, %x : f32[2,3]
  return %y, %w
}
";

#[test]
fn values_of_constants_alone_are_computed_once_per_session() {
    let s = session(INVARIANT);
    let x = f32t(&[2, 3], &[0.0; 6]);
    let first = s.run(RunRequest::new("g").feed("x", x.clone())).unwrap();
    let second = s.run(RunRequest::new("g").feed("x", x.clone())).unwrap();
    let w = |o: &graphc_runtime::RunOutput| match &o.values[1] {
        graphc_runtime::RtValue::Tensor(t) => t.clone(),
        v => panic!("{v:?}"),
    };
    assert!(std::sync::Arc::ptr_eq(&w(&first), &w(&second)), "the broadcast of a constant is kept, not redone");
    assert_eq!(second.tensor(0).unwrap(), &f32t(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
}

#[test]
fn a_fed_constant_is_not_overruled_by_what_was_kept() {
    let s = session(INVARIANT);
    let x = f32t(&[2, 3], &[0.0; 6]);
    s.run(RunRequest::new("g").feed("x", x.clone())).unwrap();
    let fed = s.run(RunRequest::new("g").feed("x", x.clone()).feed("c", f32t(&[3], &[5.0, 6.0, 7.0]))).unwrap();
    assert_eq!(fed.tensor(0).unwrap(), &f32t(&[2, 3], &[5.0, 6.0, 7.0, 5.0, 6.0, 7.0]));
    let again = s.run(RunRequest::new("g").feed("x", x)).unwrap();
    assert_eq!(again.tensor(1).unwrap(), &f32t(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]));
}
