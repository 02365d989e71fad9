//! Blocking with timeouts, cancellation and deadlock detection, shared by queues and the
//! rendezvous.
//!
//! A blocked op sleeps on its object's condition variable in short slices; between slices it
//! looks at what could end the wait: the step being cancelled (another graph of the step
//! failed), the step's deadline, the session's wait timeout, and — when the session asks for
//! it — a deadlock, which is every active run of the session being blocked at once (no one is
//! left to wake anyone). The interpreter asks the same [`WaitCtx::check_stop`] between nodes
//! and loop iterations, so a step that never blocks still ends at its deadline.
//!
//! [`WaitCtx`] is public so that executors and rendezvous implementations outside this crate
//! wait the same way; its fields stay private, and only sessions make one.

use crate::error::{ErrorKind, RunError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const SLICE: Duration = Duration::from_millis(20);

/// Locks a mutex, ignoring poisoning: no lock in the runtime is held across user code that
/// could leave its data half-updated.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many runs of a session are active, which of them are blocked, and a count of the
/// events that can unblock a run (a send, an enqueue, a dequeue, a close).
///
/// A deadlock is every active run blocked *and* each having looked at its object again since
/// the last such event. Counting blocked runs alone is not enough: a run whose tensor has just
/// arrived is still counted until it wakes, and another run checking in that moment would
/// see everyone blocked.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    runs: Mutex<Runs>,
    progress: AtomicU64,
}

#[derive(Debug, Default)]
struct Runs {
    active: usize,
    /// Blocked waiters: the progress count when each last found its object unready.
    blocked: HashMap<u64, u64>,
    next_id: u64,
}

impl Activity {
    pub fn enter(&self, runs: usize) {
        lock(&self.runs).active += runs;
    }

    pub fn leave(&self) {
        lock(&self.runs).active -= 1;
    }

    /// Notes an event that may unblock a waiter; call after the change is made.
    pub fn progress(&self) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }

    fn is_deadlocked(&self) -> bool {
        let now = self.progress.load(Ordering::SeqCst);
        let r = lock(&self.runs);
        r.blocked.len() >= r.active && r.blocked.values().all(|&seen| seen == now)
    }
}

/// Counts one blocked waiter for as long as it lives.
struct Blocked<'a> {
    activity: &'a Activity,
    id: u64,
}

impl<'a> Blocked<'a> {
    fn new(a: &'a Activity) -> Self {
        let mut r = lock(&a.runs);
        let id = r.next_id;
        r.next_id += 1;
        r.blocked.insert(id, u64::MAX);
        Blocked { activity: a, id }
    }

    /// Records that the waiter found its object unready with everything up to now seen;
    /// called while holding the object's lock, so no change to it can slip in between.
    fn still_stuck(&self) {
        let now = self.activity.progress.load(Ordering::SeqCst);
        lock(&self.activity.runs).blocked.insert(self.id, now);
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        lock(&self.activity.runs).blocked.remove(&self.id);
    }
}

/// What a blocking op needs to know about the run it belongs to: whether the step was
/// cancelled (another of its graphs failed), its deadline, the session's wait timeout, and
/// whether to detect deadlocks. Executors and rendezvous implementations get one per run and
/// wait only through it ([`WaitCtx::block`]), or, waiting some other way, call
/// [`WaitCtx::check_stop`] at least every few milliseconds and fail as it says.
#[derive(Clone, Debug)]
pub struct WaitCtx<'a> {
    activity: &'a Activity,
    cancelled: &'a AtomicBool,
    timeout: Option<Duration>,
    detect_deadlock: bool,
    /// When the step must be over, and the limit it came from (for messages).
    deadline: Option<(Instant, Duration)>,
    /// The session's stop flag ([`crate::SessionOptions::stop`]).
    stop: Option<&'a AtomicBool>,
}

impl<'a> WaitCtx<'a> {
    pub(crate) fn new(
        activity: &'a Activity,
        cancelled: &'a AtomicBool,
        timeout: Option<Duration>,
        detect_deadlock: bool,
        deadline: Option<(Instant, Duration)>,
        stop: Option<&'a AtomicBool>,
    ) -> Self {
        WaitCtx { activity, cancelled, timeout, detect_deadlock, deadline, stop }
    }
}

impl WaitCtx<'_> {
    /// Fails when the step was cancelled or stopped, or has run past its deadline; cheap
    /// enough to call before every node (two atomic loads and a clock read).
    pub fn check_stop(&self) -> Result<(), RunError> {
        if self.cancelled.load(Ordering::Relaxed) {
            return Err(RunError::new(ErrorKind::Cancelled, "cancelled: another graph of this step failed"));
        }
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Err(RunError::new(ErrorKind::Cancelled, "interrupted: the step was stopped before it ended"));
        }
        match self.deadline {
            Some((at, limit)) if Instant::now() >= at => Err(RunError::new(
                ErrorKind::Timeout,
                format!("the step ran longer than its time limit of {}", secs(limit)),
            )),
            _ => Ok(()),
        }
    }

    /// Whether another graph of the step failed, or the step was stopped, so this one should
    /// stop.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// When the step must be over, if it has a time limit.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline.map(|(at, _)| at)
    }

    /// The longest one blocking op may wait ([`crate::SessionOptions::wait_timeout`]).
    pub fn wait_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Notes an event that may unblock a waiter of this session (a send, an enqueue, a
    /// dequeue, a close); call after the change is made. Deadlock detection counts on it, so an
    /// executor calls it after each send, enqueue, dequeue and close it makes.
    pub fn progress(&self) {
        self.activity.progress();
    }

    /// Waits on `cv` until `attempt` returns `Some`. `what` describes the wait for messages
    /// ("dequeue from queue \"q\", which is empty").
    ///
    /// `attempt` runs under `m`'s lock, first at once, then whenever `cv` is notified and at
    /// least every 20 ms; whoever changes what it looks at does so under `m` and then notifies
    /// `cv`. Between attempts the wait fails when the step is
    /// cancelled, passes its deadline, waits longer than the session's wait timeout, or — with
    /// deadlock detection — when every run of the session is blocked and none can wake another.
    /// A wait that something outside this process will end should not count on deadlock
    /// detection, which sees only this session's runs.
    pub fn block<S, T>(
        &self,
        m: &Mutex<S>,
        cv: &Condvar,
        what: impl Fn(&S) -> String,
        mut attempt: impl FnMut(&mut S) -> Option<Result<T, RunError>>,
    ) -> Result<T, RunError> {
        let mut guard = lock(m);
        if let Some(r) = attempt(&mut guard) {
            return r;
        }
        let blocked = Blocked::new(self.activity);
        blocked.still_stuck();
        let start = Instant::now();
        loop {
            guard = cv.wait_timeout(guard, SLICE).unwrap_or_else(|e| e.into_inner()).0;
            if let Some(r) = attempt(&mut guard) {
                return r;
            }
            blocked.still_stuck();
            self.check_stop().map_err(|e| match e.kind {
                ErrorKind::Timeout => RunError { message: format!("{}; {}", what(&guard), e.message), ..e },
                _ => e,
            })?;
            if let Some(t) = self.timeout {
                if start.elapsed() >= t {
                    return Err(RunError::new(
                        ErrorKind::Timeout,
                        format!("{} and waited {}, the session's wait timeout", what(&guard), secs(t)),
                    ));
                }
            }
            // Checked while holding `m`, so a run about to change it is still counted active.
            if self.detect_deadlock && self.activity.is_deadlocked() {
                return Err(RunError::new(
                    ErrorKind::Deadlock,
                    format!(
                        "{}, and no other run of this session can change that: it would wait forever",
                        what(&guard)
                    ),
                ));
            }
        }
    }
}

/// A limit for messages: `0.5s`, `20s`; sub-second limits keep their digits.
fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}
