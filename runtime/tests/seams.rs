//! The runtime's seams, used from outside the crate as a later backend or transport would: a
//! rendezvous of one's own, an executor for one graph, kernels replaced while sessions run.

mod common;
use common::*;
use graphc_runtime::{
    ErrorKind, LocalRendezvous, Rendezvous, RendezvousFactory, RtValue, RunError, RunRequest, Session, WaitCtx,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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
