//! Blocking with timeouts, cancellation and deadlock detection, shared by queues and the
//! rendezvous.
//!
//! A blocked op sleeps on its object's condition variable in short slices; between slices it
//! looks at what could end the wait: the step being cancelled (another graph of the step
//! failed), the session's wait timeout, and — when the session asks for it — a deadlock, which
//! is every active run of the session being blocked at once (no one is left to wake anyone).

use crate::error::{ErrorKind, RunError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const SLICE: Duration = Duration::from_millis(20);

/// Locks a mutex, ignoring poisoning: no lock in the runtime is held across user code that
/// could leave its data half-updated.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many runs of a session are active and how many of them are blocked.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    counts: Mutex<(usize, usize)>,
}

impl Activity {
    pub fn enter(&self, runs: usize) {
        lock(&self.counts).0 += runs;
    }

    pub fn leave(&self) {
        lock(&self.counts).0 -= 1;
    }

    fn all_blocked(&self) -> bool {
        let c = lock(&self.counts);
        c.1 >= c.0
    }
}

/// Counts one blocked run for as long as it lives.
struct Blocked<'a>(&'a Activity);

impl<'a> Blocked<'a> {
    fn new(a: &'a Activity) -> Self {
        lock(&a.counts).1 += 1;
        Blocked(a)
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        lock(&self.0.counts).1 -= 1;
    }
}

/// What a blocking op needs to know about the run it belongs to.
#[derive(Debug)]
pub(crate) struct WaitCtx<'a> {
    pub activity: &'a Activity,
    pub cancelled: &'a AtomicBool,
    pub timeout: Option<Duration>,
    pub detect_deadlock: bool,
}

impl WaitCtx<'_> {
    pub fn check_cancelled(&self) -> Result<(), RunError> {
        if self.cancelled.load(Ordering::Relaxed) {
            Err(RunError::new(ErrorKind::Cancelled, "cancelled: another graph of this step failed"))
        } else {
            Ok(())
        }
    }

    /// Waits on `cv` until `attempt` returns `Some`. `what` describes the wait for messages
    /// ("dequeue from queue \"q\", which is empty").
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
        let _blocked = Blocked::new(self.activity);
        let start = Instant::now();
        loop {
            guard = cv.wait_timeout(guard, SLICE).unwrap_or_else(|e| e.into_inner()).0;
            if let Some(r) = attempt(&mut guard) {
                return r;
            }
            self.check_cancelled()?;
            if let Some(t) = self.timeout {
                if start.elapsed() >= t {
                    return Err(RunError::new(
                        ErrorKind::Timeout,
                        format!("{} and waited {:.1}s, the session's wait timeout", what(&guard), t.as_secs_f64()),
                    ));
                }
            }
            // Checked while holding `m`, so a run about to change it is still counted active.
            if self.detect_deadlock && self.activity.all_blocked() {
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
