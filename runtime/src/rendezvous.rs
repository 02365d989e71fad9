//! The rendezvous of one step: sends publish values under keys, recvs take them. Keys inside
//! loops carry the iteration path ([`rendezvous_key`]), so each iteration's transfer is its
//! own.
//!
//! [`Rendezvous`] is the seam: a session makes one per step through its
//! [`RendezvousFactory`] (by default [`LocalRendezvousFactory`], the in-process table
//! [`LocalRendezvous`]), and executors use it at send and recv only. A rendezvous that reaches
//! other processes lives in a crate above this one and plugs in through
//! [`crate::Session::set_rendezvous`]; the runtime never depends on it.

use crate::error::RunError;
use crate::value::RtValue;
use crate::wait::{lock, WaitCtx};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Condvar, Mutex};

/// Where one step's sends meet its recvs. One instance serves one step (every graph of it, on
/// several threads); keys are unique within the step.
pub trait Rendezvous: Send + Sync + Debug {
    /// Publishes `value` under `key`. Returns without waiting for a receiver. Sending a key
    /// twice in one step is an error.
    fn send(&self, key: String, value: RtValue) -> Result<(), RunError>;

    /// Takes the value sent under `key`, waiting for it through `wait` (so that the wait ends
    /// when the step is cancelled, passes its deadline or the session's wait timeout).
    fn recv(&self, wait: &WaitCtx<'_>, key: &str) -> Result<RtValue, RunError>;

    /// A graph of the step failed with `error`; the rest of the step is being cancelled. A
    /// rendezvous that reaches other processes tells them here. Called on the failing graph's
    /// thread, once per failed graph, so possibly more than once. Does nothing by default:
    /// local waiters see the cancellation through their [`WaitCtx`].
    fn abort(&self, error: &RunError) {
        let _ = error;
    }
}

/// Makes each step's rendezvous. `step` counts the session's steps from 0 (a step that failed
/// its checks before running anything gets no number), so sessions in several processes that
/// run the same steps in the same order agree on it.
pub trait RendezvousFactory: Send + Sync + Debug {
    fn rendezvous(&self, step: u64) -> Arc<dyn Rendezvous>;
}

/// The default factory: a fresh [`LocalRendezvous`] per step.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalRendezvousFactory;

impl RendezvousFactory for LocalRendezvousFactory {
    fn rendezvous(&self, _step: u64) -> Arc<dyn Rendezvous> {
        Arc::new(LocalRendezvous::default())
    }
}

/// The in-process rendezvous: a table of sent values, and a condition variable for recvs.
#[derive(Debug, Default)]
pub struct LocalRendezvous {
    table: Mutex<HashMap<String, RtValue>>,
    arrived: Condvar,
}

impl Rendezvous for LocalRendezvous {
    /// Publishes a value; never blocks.
    fn send(&self, key: String, value: RtValue) -> Result<(), RunError> {
        let mut t = lock(&self.table);
        if t.contains_key(&key) {
            return Err(RunError::internal(format!("rendezvous key \"{key}\" was sent twice in one step")));
        }
        t.insert(key, value);
        self.arrived.notify_all();
        Ok(())
    }

    /// Takes the value sent under `key`, waiting for it.
    fn recv(&self, ctx: &WaitCtx<'_>, key: &str) -> Result<RtValue, RunError> {
        ctx.block(
            &self.table,
            &self.arrived,
            |_| format!("recv of rendezvous key \"{key}\" is blocked: nothing was sent under that key yet"),
            |t| t.remove(key).map(Ok),
        )
    }
}

/// The key a send or recv with attribute `key` uses inside while loops whose iteration
/// numbers (from 0, outermost first) are `iterations`: `key` itself outside loops, else
/// `key@i.j...`. Every executor keys its transfers this way, so partitions on different
/// executors meet.
pub fn rendezvous_key(key: &str, iterations: &[u64]) -> String {
    if iterations.is_empty() {
        key.to_string()
    } else {
        let path: Vec<String> = iterations.iter().map(|i| i.to_string()).collect();
        format!("{key}@{}", path.join("."))
    }
}
