//! A faster tier compiling in the background: kernels that replace a backend's, one by one in
//! its kernel table, while sessions already run on the first tier's. Dropping it waits for
//! the compilation to end, so no compiler runs while the process exits.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a tier compiled.
#[derive(Clone, Debug)]
pub struct TierDone {
    /// How many kernels it put in the table.
    pub count: usize,
    pub compile_time: Duration,
}

type Slot = (Mutex<Option<Result<TierDone, String>>>, Condvar);

/// A tier compiling on a thread of its own.
#[derive(Debug)]
pub struct Background {
    /// The tier's name (`llvm`).
    pub tier: &'static str,
    done: Arc<Slot>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Runs `compile` on a new thread; its result is kept for [`Background::poll`] and
    /// [`Background::wait`]. A panic in it is kept as an error.
    pub fn spawn(
        tier: &'static str,
        compile: impl FnOnce() -> Result<TierDone, String> + Send + 'static,
    ) -> Background {
        let done: Arc<Slot> = Arc::new((Mutex::new(None), Condvar::new()));
        let slot = done.clone();
        let thread = std::thread::Builder::new().name(format!("graphc-{tier}-tier")).spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(compile))
                .unwrap_or_else(|_| Err(format!("the {tier} tier panicked")));
            *slot.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            slot.1.notify_all();
        });
        match thread {
            Ok(t) => Background { tier, done, thread: Some(t) },
            Err(e) => {
                *done.0.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Err(format!("no thread for the {tier} tier: {e}")));
                Background { tier, done, thread: None }
            }
        }
    }

    /// The result, once the tier has finished.
    pub fn poll(&self) -> Option<Result<TierDone, String>> {
        self.done.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits for the tier to finish.
    pub fn wait(&self) -> Result<TierDone, String> {
        let mut slot = self.done.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = slot.as_ref() {
                return r.clone();
            }
            slot = self.done.1.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
