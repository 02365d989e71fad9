//! SIGINT and SIGTERM during `graphc train` (and `graphc run --steps N --checkpoint`): the
//! first asks the command to stop after the step in flight, keep its work (a checkpoint where
//! one is configured) and exit with 128 + the signal's number, the status a shell gives a
//! process the signal ended (130, 143). A second ends the process at once, with 128 + its number:
//! the way out of a step that does not end. Files are written atomically, so a checkpoint
//! being written then keeps what it held, and the next write removes the temporary file left.

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The handlers installed: the number of the first signal caught, 0 before one is.
#[derive(Debug)]
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Installs the handlers for the rest of the process: from now on SIGINT and SIGTERM no
    /// longer end it at once but ask it to stop.
    pub fn install() -> anyhow::Result<Interrupt> {
        let signal = Arc::new(AtomicUsize::new(0));
        let armed = Arc::new(AtomicBool::new(false));
        let failed = |e: std::io::Error| anyhow::anyhow!("cannot install the SIGINT and SIGTERM handlers: {e}");
        for sig in [SIGINT, SIGTERM] {
            // The handlers run in this order: a signal that finds `armed` set (a second one)
            // ends the process; the first only records itself and arms.
            flag::register_conditional_shutdown(sig, 128 + sig, armed.clone()).map_err(failed)?;
            flag::register_usize(sig, signal.clone(), sig as usize).map_err(failed)?;
            flag::register(sig, armed.clone()).map_err(failed)?;
        }
        Ok(Interrupt { signal })
    }

    /// Set (non-zero) once a signal has come: what the driver's step loops watch.
    pub fn flag(&self) -> &AtomicUsize {
        &self.signal
    }

    /// The signal that asked to stop, if one has.
    pub fn received(&self) -> Option<Signal> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            n => Some(Signal(n as i32)),
        }
    }
}

/// A signal that stopped a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signal(i32);

impl Signal {
    pub fn name(self) -> &'static str {
        match self.0 {
            SIGINT => "SIGINT",
            SIGTERM => "SIGTERM",
            _ => "a signal",
        }
    }

    /// 128 + the signal's number, as shells report a process a signal ended.
    pub fn status(self) -> i32 {
        128 + self.0
    }

    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(u8::try_from(self.status()).unwrap_or(1))
    }
}
