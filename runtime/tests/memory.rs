//! The session's memory budget: live tensors and queue contents are counted against it, a
//! node whose results would not fit fails with `ResourceExhausted` naming the node and what
//! is live, and nothing stays counted after a run, however it ended.

use graphc_ir::parse_module;
use graphc_runtime::{ErrorKind, RunRequest, Session, SessionOptions, Tensor};

const MIB: u64 = 1 << 20;

fn session(text: &str, limit: u64) -> Session {
    let m = parse_module(text).unwrap_or_else(|d| panic!("{d:?}"));
    Session::new(m, SessionOptions { memory_limit: Some(limit), detect_deadlock: true, ..Default::default() }).unwrap()
}

/// Four 1 MiB values, all live until the last add.
const FOUR_LIVE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/four_live.gir"));

fn run(s: &Session) -> Result<Vec<Tensor>, graphc_runtime::RunError> {
    let out = s.run(RunRequest::new("g").feed("x", Tensor::scalar_f32(0.5)))?;
    Ok(out.values.iter().filter_map(|v| v.as_tensor().cloned()).collect())
}

#[test]
fn a_live_set_over_the_budget_fails_at_the_node_that_would_exceed_it() {
    let s = session(FOUR_LIVE, 3 * MIB + MIB / 2);
    let e = run(&s).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    assert_eq!(e.node.as_deref(), Some("node 'abs %d'"), "{e}");
    assert!(e.message.contains("memory budget of 3.5 MiB (3.0 MiB is live)"), "{e}");
    assert!(e.message.contains("this run holds"), "{e}");
    assert!(e.message.contains("%a (1.0 MiB)"), "{e}");
    // Nothing stays counted after the failed run.
    assert_eq!(s.memory_in_use().0, 0);

    // With room for the four, it runs; and it runs again (the first run gave everything back).
    let s = session(FOUR_LIVE, 5 * MIB);
    for _ in 0..3 {
        let y = run(&s).unwrap();
        assert_eq!(y[0].len(), 262144);
        assert_eq!(s.memory_in_use().0, 0);
    }
}

#[test]
fn values_that_died_do_not_count() {
    // A chain: each value dies when the next is made, so two are live at most.
    let chain = "graph @g(%x: f32[]) -> (y: f32[262144]) {
  %a = broadcast %x {shape = [262144]} : f32[262144]
  %b = exp %a : f32[262144]
  %c = neg %b : f32[262144]
  %d = abs %c : f32[262144]
  %y = exp %d : f32[262144]
  return %y
}";
    run(&session(chain, 2 * MIB + 16)).unwrap();
}

#[test]
fn a_queue_filled_in_a_long_loop_fails_cleanly_on_a_small_budget() {
    let text = "graph @g(%x: f32[]) -> (n: i64[]) {
  %q = queue {name = \"q\", capacity = 9223372036854775807} : queue<f32[1024]>
  %zero = constant {value = dense<0> : i64[]} : i64[]
  %n, %qq = while %zero, %q : i64[], queue<f32[1024]>
    cond(%i: i64[], %cq: queue<f32[1024]>) {
      %lim = constant {value = dense<20000> : i64[]} : i64[]
      %go = less %i, %lim : bool[]
      yield %go
    }
    body(%j: i64[], %bq: queue<f32[1024]>) {
      %one = constant {value = dense<1> : i64[]} : i64[]
      %k = add %j, %one : i64[]
      %f = cast %j {to = f32} : f32[]
      %v = broadcast %f {shape = [1024]} : f32[1024]
      %t = enqueue %bq, %v : token
      yield %k, %bq
    }
  return %n
}";
    let s = session(text, MIB);
    let e = run(&s).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    // The queue holds 255 items; the next item's broadcast would exceed the budget.
    assert_eq!(e.node.as_deref(), Some("node 'broadcast %v'"), "{e}");
    assert!(e.message.contains("queues and other runs hold 1020.0 KiB"), "{e}");
    // The queue's contents stay counted: they are still held. An enqueue of one more fails.
    let (live, limit) = s.memory_in_use();
    assert!(live <= limit && live > limit - 8192, "{live} of {limit}");
}

#[test]
fn dequeued_items_leave_the_count() {
    let text = "graph @put(%x: f32[1024]) -> (t: token) {
  %q = queue {name = \"q\", capacity = 100} : queue<f32[1024]>
  %t = enqueue %q, %x : token
  return %t
}

graph @take() -> (y: f32[1024]) {
  %q = queue {name = \"q\", capacity = 100} : queue<f32[1024]>
  %y = dequeue %q : f32[1024]
  return %y
}";
    let s = session(text, MIB);
    let x = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1024])));
    for _ in 0..3 {
        s.run(RunRequest::new("put").feed("x", x.clone())).unwrap();
    }
    assert_eq!(s.memory_in_use().0, 3 * 4096);
    for _ in 0..3 {
        s.run(RunRequest::new("take")).unwrap();
    }
    assert_eq!(s.memory_in_use().0, 0);

    // Room for three items (a fed item is the one buffer, in the run and then in the queue):
    // the fourth enqueue is refused, and leaves the count as it was.
    let s = session(text, 3 * 4096);
    for _ in 0..3 {
        s.run(RunRequest::new("put").feed("x", x.clone())).unwrap();
    }
    let e = s.run(RunRequest::new("put").feed("x", x.clone())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    assert_eq!(e.node.as_deref(), Some("node 'enqueue %t'"), "{e}");
    assert!(e.message.contains("enqueue to queue \"q\" (3 held): 4.0 KiB more would exceed"), "{e}");
    assert_eq!(s.memory_in_use().0, 3 * 4096);
}

#[test]
fn a_traced_long_loop_keeps_a_bounded_record_and_counts_the_rest() {
    let text = "graph @g(%x: f32[]) -> (n: i64[]) {
  %zero = constant {value = dense<0> : i64[]} : i64[]
  %n = while %zero : i64[]
    cond(%i: i64[]) {
      %lim = constant {value = dense<500> : i64[]} : i64[]
      %go = less %i, %lim : bool[]
      yield %go
    }
    body(%j: i64[]) {
      %one = constant {value = dense<1> : i64[]} : i64[]
      %k = add %j, %one : i64[]
      yield %k
    }
  return %n
}";
    let m = parse_module(text).unwrap_or_else(|d| panic!("{d:?}"));
    let options = SessionOptions { trace: true, max_trace_events: Some(100), ..Default::default() };
    let s = Session::new(m, options).unwrap();
    let out = s.run(RunRequest::new("g").feed("x", Tensor::scalar_f32(0.0))).unwrap();
    assert_eq!(out.events.len(), 100);
    assert_eq!(out.events.len() as u64 + out.events_dropped, out.nodes_executed as u64);
    assert!(out.events_dropped > 1000, "{}", out.events_dropped);
}

#[test]
fn variables_whose_initial_values_exceed_the_budget_are_refused_before_they_are_built() {
    // 1 GiB of splat: tiny text, and a session would build it at once.
    let text = "graph @g() -> (y: f32[268435456]) {
  %w = variable {name = \"w\", init = dense<1.0> : f32[268435456]} : var<f32[268435456]>
  %y = read %w : f32[268435456]
  return %y
}";
    let m = parse_module(text).unwrap_or_else(|d| panic!("{d:?}"));
    let e = Session::new(m, SessionOptions { memory_limit: Some(64 * MIB), ..Default::default() }).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ResourceExhausted, "{e}");
    assert!(e.message.contains("the variables' initial values: 1.0 GiB more would exceed"), "{e}");
}
