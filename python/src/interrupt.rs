//! Work that takes a while (a step, a training, a compilation) runs with the GIL released,
//! so other Python threads go on, and stays interruptible: Python runs its signal handlers
//! only on the main thread, between bytecodes, so the main thread hands the work to another
//! thread and checks for signals (`PyErr_CheckSignals`) every few milliseconds while it
//! waits. When a handler raises (Ctrl-C's KeyboardInterrupt), the work is told to stop, is
//! waited for, and the handler's exception is raised.
//!
//! Steps go to one helper thread kept for the process ([`run`]): a thread made and ended per
//! step cost more than a small step itself. Work that borrows from its caller (a training)
//! gets a scoped thread of its own ([`run_to_end`]).

use pyo3::prelude::*;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// How often the waiting thread looks for a signal.
const POLL: Duration = Duration::from_millis(20);

/// Where the work's result (or its panic) lands, and the waiter's wake-up.
type Slot<T> = (Mutex<Option<std::thread::Result<T>>>, Condvar);

type Job = Box<dyn FnOnce() + Send>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work` and puts what it returned, or its panic, in `slot`.
fn fill<T>(slot: &Slot<T>, work: impl FnOnce() -> T) {
    let out = std::panic::catch_unwind(AssertUnwindSafe(work));
    *lock(&slot.0) = Some(out);
    slot.1.notify_all();
}

/// Waits for `slot` with the GIL released, checking for signals between waits; each time a
/// handler raises, `stop` is called. What the work returned, and the first exception raised.
fn wait<T: Send>(py: Python<'_>, stop: impl Fn(), slot: &Slot<T>) -> (PyResult<T>, Option<PyErr>) {
    let mut raised: Option<PyErr> = None;
    loop {
        let out = py.detach(|| {
            let (mut out, _) =
                slot.1.wait_timeout_while(lock(&slot.0), POLL, |o| o.is_none()).unwrap_or_else(|e| e.into_inner());
            out.take()
        });
        if let Some(out) = out {
            let out = out
                .map_err(|_| crate::errors::error("internal error: graphc's work panicked (a bug; please report it)"));
            return (out, raised);
        }
        if let Err(e) = py.check_signals() {
            stop();
            raised.get_or_insert(e);
        }
    }
}

/// The helper thread's queue (started on first use).
fn helper() -> PyResult<&'static Sender<Job>> {
    static HELPER: OnceLock<Sender<Job>> = OnceLock::new();
    if let Some(h) = HELPER.get() {
        return Ok(h);
    }
    let (send, receive) = std::sync::mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("graphc-python".into())
        // A main thread's stack, as the step pool's: the interpreter recurses once per nested
        // region, and a small graph's step runs on this thread rather than on the pool.
        .stack_size(8 << 20)
        .spawn(move || {
            for job in receive {
                job();
            }
        })
        .map_err(|e| crate::errors::error(format!("cannot start a thread to run the step on: {e}")))?;
    // Two threads starting it at once: the one that lost keeps its helper idle.
    Ok(HELPER.get_or_init(|| send))
}

/// Runs `work` with the GIL released. On the main thread it runs on the helper thread while
/// this one checks for signals: each time a handler raises (a Ctrl-C), `stop` is called (it
/// must make the work end soon), and the first such exception is raised once the work has
/// ended. Elsewhere (no signal handler runs there) it runs on this thread.
pub fn run<T: Send + 'static>(
    py: Python<'_>,
    stop: impl Fn(),
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    if !is_main_thread(py) {
        return Ok(py.detach(work));
    }
    let slot: Arc<Slot<T>> = Arc::new((Mutex::new(None), Condvar::new()));
    let filled = slot.clone();
    helper()?
        .send(Box::new(move || fill(&filled, work)))
        .map_err(|_| crate::errors::error("internal error: the thread that runs steps has ended"))?;
    let (out, raised) = wait(py, stop, &slot);
    match raised {
        Some(e) => Err(e),
        None => out,
    }
}

/// [`run`] for work that borrows from its caller, on a thread of its own, returning what the
/// work returned (an error only if it panicked) even when a handler raised, with the handler's
/// exception beside it: for work whose end, stopped or not, has to be dealt with (a training's
/// checkpoint). A second Ctrl-C calls `stop` again.
pub fn run_to_end<T: Send>(
    py: Python<'_>,
    stop: impl Fn(),
    work: impl FnOnce() -> T + Send,
) -> (PyResult<T>, Option<PyErr>) {
    if !is_main_thread(py) {
        return (Ok(py.detach(work)), None);
    }
    let slot: Slot<T> = (Mutex::new(None), Condvar::new());
    std::thread::scope(|s| {
        s.spawn(|| fill(&slot, work));
        wait(py, stop, &slot)
    })
}

fn is_main_thread(py: Python<'_>) -> bool {
    let threads =
        py.import("threading").and_then(|t| Ok((t.call_method0("current_thread")?, t.call_method0("main_thread")?)));
    threads.is_ok_and(|(current, main)| current.is(&main))
}
