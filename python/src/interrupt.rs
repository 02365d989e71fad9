//! Work that takes a while (a step, a training, a compilation) runs with the GIL released,
//! so other Python threads go on, and stays interruptible: Python runs its signal handlers
//! only on the main thread, between bytecodes, so the main thread hands the work to another
//! thread and checks for signals (`PyErr_CheckSignals`) every few milliseconds while it
//! waits. When a handler raises (Ctrl-C's KeyboardInterrupt), the work is told to stop, is
//! waited for, and the handler's exception is raised.

use pyo3::prelude::*;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How often the waiting thread looks for a signal.
const POLL: Duration = Duration::from_millis(20);

/// Runs `work` with the GIL released. On the main thread it runs on a thread of its own
/// while this one checks for signals: each time a handler raises (a Ctrl-C), `stop` is called
/// (it must make the work end soon; a second Ctrl-C calls it again), and the first such
/// exception is returned once the work has ended. Elsewhere (no signal handler can run there)
/// it runs on this thread.
pub fn run<T: Send>(py: Python<'_>, stop: impl Fn(), work: impl FnOnce() -> T + Send) -> PyResult<T> {
    let (out, raised) = run_to_end(py, stop, work);
    match raised {
        Some(e) => Err(e),
        None => out,
    }
}

/// [`run`], returning what the work returned (an error only if it panicked) even when a
/// handler raised, with the handler's exception beside it: for work whose end, stopped or
/// not, still has to be dealt with (a training's checkpoint).
pub fn run_to_end<T: Send>(
    py: Python<'_>,
    stop: impl Fn(),
    work: impl FnOnce() -> T + Send,
) -> (PyResult<T>, Option<PyErr>) {
    if !is_main_thread(py) {
        return (Ok(py.detach(work)), None);
    }
    let done: (Mutex<Option<T>>, Condvar) = (Mutex::new(None), Condvar::new());
    let take = || done.0.lock().unwrap_or_else(|e| e.into_inner()).take();
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let out = work();
            *done.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
            done.1.notify_all();
        });
        let mut raised: Option<PyErr> = None;
        loop {
            let ready = py.detach(|| {
                let slot = done.0.lock().unwrap_or_else(|e| e.into_inner());
                let (slot, _) =
                    done.1.wait_timeout_while(slot, POLL, |o| o.is_none()).unwrap_or_else(|e| e.into_inner());
                slot.is_some()
            });
            if ready || worker.is_finished() {
                // Joined here (it has ended, or is about to), so that a panic is an error
                // rather than the scope's panic.
                let out = worker.join().ok().and_then(|()| take()).ok_or_else(|| {
                    crate::errors::error("internal error: graphc's work panicked (a bug; please report it)")
                });
                return (out, raised);
            }
            if let Err(e) = py.check_signals() {
                stop();
                raised.get_or_insert(e);
            }
        }
    })
}

fn is_main_thread(py: Python<'_>) -> bool {
    let threads =
        py.import("threading").and_then(|t| Ok((t.call_method0("current_thread")?, t.call_method0("main_thread")?)));
    threads.is_ok_and(|(current, main)| current.is(&main))
}
