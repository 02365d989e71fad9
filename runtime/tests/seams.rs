//! The runtime's seams, used from outside the crate as a later backend or transport would: a
//! rendezvous of one's own, an executor for one graph, kernels replaced while sessions run
//! (tiered compilation).

mod common;
use common::*;
use graphc_ir::{Op, TensorType, Value};
use graphc_runtime::{
    kernels, rendezvous_key, ErrorKind, ExecContext, ExecOutput, Executor, InterpExecutor, Kernel, KernelTable,
    LocalRendezvous, Operands, Rendezvous, RendezvousFactory, RtValue, RunError, RunRequest, Session, SessionOptions,
    Tensor, WaitCtx,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn partitioned() -> Session {
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../ir-spec/examples/partitioned.gir")).unwrap();
    session(&src)
}

fn partitioned_step(s: &Session) -> Result<Vec<graphc_runtime::RunOutput>, RunError> {
    let x = f32t(&[8, 16], &(0..128).map(|i| (i as f32 - 64.0) / 32.0).collect::<Vec<_>>());
    let w = f32t(&[16, 4], &(0..64).map(|i| ((i * 7) % 11) as f32 / 5.0 - 1.0).collect::<Vec<_>>());
    s.run_step(vec![RunRequest::new("part_cpu0").feed("x", x).feed("w", w), RunRequest::new("part_cpu1")])
}

/// What a counting rendezvous saw, shared by every step's instance.
#[derive(Debug, Default)]
struct Seen {
    steps: Mutex<Vec<u64>>,
    sends: Mutex<Vec<String>>,
    recvs: Mutex<Vec<String>>,
    aborts: AtomicUsize,
}

/// The in-process table, counting what passes through it.
#[derive(Debug)]
struct Counting {
    inner: LocalRendezvous,
    seen: Arc<Seen>,
}

impl Rendezvous for Counting {
    fn send(&self, key: String, value: RtValue) -> Result<(), RunError> {
        self.seen.sends.lock().unwrap().push(key.clone());
        self.inner.send(key, value)
    }

    fn recv(&self, wait: &WaitCtx<'_>, key: &str) -> Result<RtValue, RunError> {
        let v = self.inner.recv(wait, key)?;
        self.seen.recvs.lock().unwrap().push(key.to_string());
        Ok(v)
    }

    fn abort(&self, _error: &RunError) {
        self.seen.aborts.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct CountingFactory(Arc<Seen>);

impl RendezvousFactory for CountingFactory {
    fn rendezvous(&self, step: u64) -> Arc<dyn Rendezvous> {
        self.0.steps.lock().unwrap().push(step);
        Arc::new(Counting { inner: LocalRendezvous::default(), seen: self.0.clone() })
    }
}

#[test]
fn a_rendezvous_of_ones_own_carries_a_partitioned_step() {
    let reference = partitioned_step(&partitioned()).unwrap();
    let mut s = partitioned();
    let seen = Arc::new(Seen::default());
    s.set_rendezvous(Arc::new(CountingFactory(seen.clone())));
    for _ in 0..3 {
        let out = partitioned_step(&s).unwrap();
        assert_eq!(out[0].get("y").unwrap(), reference[0].get("y").unwrap());
    }
    assert_eq!(*seen.steps.lock().unwrap(), [0, 1, 2], "one rendezvous per step, numbered by the session");
    assert_eq!(s.steps(), 3);
    let mut sends = seen.sends.lock().unwrap().clone();
    let mut recvs = seen.recvs.lock().unwrap().clone();
    sends.sort();
    recvs.sort();
    assert_eq!(sends.len(), 6, "two transfers a step: {sends:?}");
    assert_eq!(sends, recvs);
    assert_eq!(seen.aborts.load(Ordering::SeqCst), 0);
}

#[test]
fn a_failed_step_aborts_its_rendezvous_and_a_rejected_one_gets_no_number() {
    let mut s = session(
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
    let seen = Arc::new(Seen::default());
    s.set_rendezvous(Arc::new(CountingFactory(seen.clone())));
    // A request that fails its checks runs nothing and takes no step number.
    assert!(s.run(RunRequest::new("nope")).is_err());
    assert_eq!(s.steps(), 0);
    let e =
        s.run_step(vec![RunRequest::new("bad").feed("x", i32t(&[], &[1])), RunRequest::new("waiting")]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Kernel);
    assert_eq!(*seen.steps.lock().unwrap(), [0]);
    // The failing graph aborts; the cancelled one may too.
    assert!(seen.aborts.load(Ordering::SeqCst) >= 1);
    assert!(seen.sends.lock().unwrap().is_empty());
}

/// An executor of its own for graphs of pure ops, sends and recvs: what a device executor
/// does at its simplest, through the context alone.
#[derive(Debug, Default)]
struct HandWritten {
    runs: AtomicUsize,
}

impl Executor for HandWritten {
    fn run(&self, mut cx: ExecContext<'_>) -> Result<ExecOutput, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let g = cx.graph();
        let mut env: HashMap<Value, RtValue> =
            cx.take_feeds().into_iter().map(|(v, t)| (v, RtValue::Tensor(t))).collect();
        let mut executed = 0;
        for &n in &g.regions[g.body].nodes {
            if !cx.is_needed(n) {
                continue;
            }
            cx.wait().check_stop()?;
            let nd = &g.nodes[n];
            let at = |e: RunError| e.at_node(&g.name, format!("node {}", g.describe(n)), nd.span);
            let key = || rendezvous_key(nd.attrs.str("key").unwrap_or_default(), &[]);
            let operand = |i: usize| env.get(&nd.operands[i]).cloned().ok_or_else(|| RunError::internal("unbound"));
            let results = match nd.op {
                Op::Recv => vec![cx.rendezvous().recv(cx.wait(), &key()).map_err(at)?],
                Op::Send => {
                    cx.rendezvous().send(key(), operand(0)?).map_err(at)?;
                    cx.wait().progress();
                    vec![RtValue::Token]
                }
                op if kernels::is_kernel(op) => {
                    let args = (0..nd.operands.len()).map(operand).collect::<Result<Vec<_>, _>>()?;
                    let inputs: Vec<&Tensor> = args.iter().filter_map(RtValue::as_tensor).collect();
                    let types: Vec<TensorType> =
                        nd.results.iter().filter_map(|&v| g.values[v].ty.as_tensor().cloned()).collect();
                    let out = kernels::eval(op, &nd.attrs, &inputs, &types)
                        .map_err(|e| at(RunError::new(ErrorKind::Kernel, e.0)))?;
                    out.into_iter().map(RtValue::tensor).collect()
                }
                op => return Err(at(RunError::invalid(format!("this executor cannot run '{}'", op.name())))),
            };
            for (&v, r) in nd.results.iter().zip(results) {
                if r.ty() != g.values[v].ty {
                    return Err(at(RunError::internal("a result of the wrong type")));
                }
                env.insert(v, r);
            }
            executed += 1;
        }
        let values = cx
            .fetches()
            .iter()
            .map(|v| env.get(v).cloned().ok_or_else(|| RunError::internal("a fetch was not computed")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ExecOutput { values, nodes_executed: executed, ..ExecOutput::default() })
    }
}

/// Another executor, counting the graphs it runs.
#[derive(Debug)]
struct Counted {
    inner: Arc<dyn Executor>,
    runs: AtomicUsize,
}

impl Executor for Counted {
    fn run(&self, cx: ExecContext<'_>) -> Result<ExecOutput, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.inner.run(cx)
    }
}

#[test]
fn one_graph_of_a_step_runs_on_an_executor_of_its_own() {
    let reference = partitioned_step(&partitioned()).unwrap();
    let mut s = partitioned();
    let own = Arc::new(HandWritten::default());
    s.set_executor("part_cpu1", own.clone()).unwrap();
    // The other graph keeps the default, seen through a wrapper.
    let counted = Arc::new(Counted { inner: s.executor("part_cpu0").clone(), runs: AtomicUsize::new(0) });
    s.set_executor("part_cpu0", counted.clone()).unwrap();
    for _ in 0..2 {
        let out = partitioned_step(&s).unwrap();
        assert_eq!(out[0].get("y").unwrap(), reference[0].get("y").unwrap());
        assert_eq!(out[1].nodes_executed, 3, "recv, relu, send");
    }
    assert_eq!(own.runs.load(Ordering::SeqCst), 2);
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
    assert!(s.run(RunRequest::new("part_cpu0").feed("x", f32t(&[8, 16], &[0.0; 128]))).is_err(), "w is not fed");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2, "a rejected request reaches no executor");
}

#[test]
fn an_executor_is_set_for_a_graph_the_module_has() {
    let mut s = partitioned();
    let e = s.set_executor("part_cpu9", Arc::new(HandWritten::default())).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("@part_cpu9"), "{e}");
}

/// Returns a token for every fetch.
#[derive(Debug)]
struct Tokens;

impl Executor for Tokens {
    fn run(&self, cx: ExecContext<'_>) -> Result<ExecOutput, RunError> {
        Ok(ExecOutput { values: cx.fetches().iter().map(|_| RtValue::Token).collect(), ..ExecOutput::default() })
    }
}

#[test]
fn what_an_executor_returns_is_checked_against_the_graph() {
    let mut s = session("graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %y = neg %x : f32[2]\n  return %y\n}\n");
    s.set_default_executor(Arc::new(Tokens));
    let e = s.run(RunRequest::new("g").feed("x", f32t(&[2], &[1.0, 2.0]))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert_eq!(e.graph.as_deref(), Some("g"));
    assert!(e.message.contains("token") && e.message.contains("f32[2]"), "{e}");
    // Back on the interpreter.
    s.set_default_executor(Arc::new(InterpExecutor::new()));
    let out = s.run(RunRequest::new("g").feed("x", f32t(&[2], &[1.0, 2.0]))).unwrap();
    assert_eq!(out.get("y").unwrap(), &f32t(&[2], &[-1.0, -2.0]));
}

/// An executor with a bug.
#[derive(Debug)]
struct Panicking;

impl Executor for Panicking {
    fn run(&self, _: ExecContext<'_>) -> Result<ExecOutput, RunError> {
        panic!("an executor's bug")
    }
}

#[test]
fn an_executor_that_panics_fails_its_step_and_the_session_goes_on() {
    // With deadlock detection on: a panic that left the session counting a run as active
    // would leave every later blocked step waiting out its timeout instead of failing at once.
    let opts =
        SessionOptions { detect_deadlock: true, wait_timeout: Some(Duration::from_secs(30)), ..Default::default() };
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../ir-spec/examples/partitioned.gir")).unwrap();
    let mut s = Session::new(graphc_ir::parse_module(&src).unwrap(), opts).unwrap();
    s.set_executor("part_cpu1", Arc::new(Panicking)).unwrap();
    let e = partitioned_step(&s).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    assert!(e.message.contains("panicked"), "{e}");
    // One graph alone, on the calling thread.
    let e = s.run(RunRequest::new("part_cpu1")).unwrap_err();
    assert!(e.message.contains("panicked"), "{e}");
    // The receiving partition alone blocks in its recv: a deadlock, reported at once.
    s.set_executor("part_cpu1", Arc::new(InterpExecutor::new())).unwrap();
    let start = Instant::now();
    let e = s.run(RunRequest::new("part_cpu1")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
    assert!(start.elapsed() < Duration::from_secs(10));
    partitioned_step(&s).unwrap();
}

/// `x + x` for a node `add %x, %x`, counting its runs: through the reference kernel (a quick
/// first tier), or by hand (a later one).
#[derive(Debug, Default)]
struct Doubling {
    by_hand: bool,
    runs: AtomicUsize,
}

impl Kernel for Doubling {
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let x = operands.get(0).ok_or("no operand")?;
        if self.by_hand {
            let Tensor::F32(a) = x else { return Err("not f32".into()) };
            return Ok(vec![Tensor::F32(a.mapv(|v| v + v))]);
        }
        kernels::eval(Op::Add, &Default::default(), &[x, x], &[x.ty()]).map_err(|e| e.0)
    }
}

#[test]
fn kernels_are_replaced_while_a_session_runs_them() {
    let m = graphc_ir::parse_module(
        "graph @g(%x: f32[64]) -> (y: f32[64]) {\n  %d = add %x, %x : f32[64]\n  %y = neg %d : f32[64]\n  return %y\n}\n",
    )
    .unwrap();
    let g = m.graph("g").unwrap();
    let add = g.producer(g.value_named("d").unwrap()).unwrap();
    let table = Arc::new(KernelTable::new());
    let first = Arc::new(Doubling { by_hand: false, runs: AtomicUsize::new(0) });
    let second = Arc::new(Doubling { by_hand: true, runs: AtomicUsize::new(0) });
    assert!(table.replace("g", add, first.clone()).is_none());
    let s = Session::with_compiled(m, SessionOptions::default(), table.clone()).unwrap();
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.25 - 3.0).collect();
    let want = f32t(&[64], &x.iter().map(|v| -(v + v)).collect::<Vec<_>>());
    let step = || {
        let out = s.run(RunRequest::new("g").feed("x", f32t(&[64], &x))).unwrap();
        assert_eq!(out.get("y").unwrap(), &want);
    };
    let done = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(20);
    let wait_for = |what: &str, f: &dyn Fn() -> bool| {
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    };
    let steps = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // Two threads run steps throughout.
        for _ in 0..2 {
            scope.spawn(|| {
                while !done.load(Ordering::SeqCst) {
                    step();
                    steps.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Another moves the node from tier to tier: the first, the second, the interpreter,
        // the second again.
        wait_for("the first tier", &|| first.runs.load(Ordering::SeqCst) >= 5);
        let old = table.replace("g", add, second.clone()).unwrap();
        assert!(Arc::ptr_eq(&(old as Arc<dyn Kernel>), &(first.clone() as Arc<dyn Kernel>)));
        let first_runs = first.runs.load(Ordering::SeqCst);
        wait_for("the second tier", &|| second.runs.load(Ordering::SeqCst) >= 5);
        // Runs that had looked the first tier up before the replacement may finish with it.
        assert!(first.runs.load(Ordering::SeqCst) <= first_runs + 2);
        assert!(table.remove("g", add).is_some());
        assert!(table.is_empty());
        let (second_runs, at) = (second.runs.load(Ordering::SeqCst), steps.load(Ordering::SeqCst));
        wait_for("steps on the interpreter", &|| steps.load(Ordering::SeqCst) >= at + 5);
        assert!(second.runs.load(Ordering::SeqCst) <= second_runs + 2);
        table.replace("g", add, second.clone());
        let second_runs = second.runs.load(Ordering::SeqCst);
        wait_for("the second tier again", &|| second.runs.load(Ordering::SeqCst) >= second_runs + 5);
        done.store(true, Ordering::SeqCst);
    });
    // Once the replacement has returned, every step runs the new kernel.
    let (a, b) = (first.runs.load(Ordering::SeqCst), second.runs.load(Ordering::SeqCst));
    step();
    assert_eq!((first.runs.load(Ordering::SeqCst), second.runs.load(Ordering::SeqCst)), (a, b + 1));
    assert_eq!(table.len(), 1);
    assert!(table.get("g", add).is_some() && table.get("h", add).is_none());
}
