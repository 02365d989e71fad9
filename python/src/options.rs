//! What `load` and `train` take as the CLI's session flags take it: the backend, the
//! instruction set, the devices and profile, the time and memory limits.

use crate::errors::error;
use graphc::backend::{Backend, CompileOptions, Isa};
use graphc::driver::Devices;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::time::Duration;

/// A memory limit: bytes, or a size as `--memory-limit` reads it ("2GiB").
#[derive(Debug, FromPyObject)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

/// The session flags of `graphc run`, checked.
#[derive(Debug, Clone)]
pub struct Options {
    pub backend: &'static dyn Backend,
    pub compile: CompileOptions,
    pub devices: Devices,
    /// `--timeout`: each step, and each blocking wait.
    pub timeout: Option<Duration>,
    pub memory_limit: Option<u64>,
}

impl Options {
    pub fn new(
        backend: Option<&str>,
        isa: &str,
        devices: Option<PathBuf>,
        profile: Option<PathBuf>,
        timeout: Option<f64>,
        memory_limit: Option<Size>,
    ) -> PyResult<Options> {
        let name = backend.unwrap_or(graphc::backend::DEFAULT_BACKEND);
        let backend = graphc::backend::backend(name).map_err(|e| error(format!("backend='{name}': {e}")))?;
        let isa: Isa = isa.parse().map_err(|e| error(format!("isa='{isa}': {e}")))?;
        let timeout = match timeout {
            None => None,
            Some(t) => {
                graphc_runtime::limits::parse_timeout(&t.to_string()).map_err(|e| error(format!("timeout={t}: {e}")))?.0
            }
        };
        let memory_limit = match memory_limit {
            None => None,
            Some(Size::Bytes(0)) => {
                return Err(error("memory_limit=0: give a number of bytes (at least 1) or a size such as '2GiB'"))
            }
            Some(Size::Bytes(n)) => Some(n),
            Some(Size::Text(s)) => {
                Some(graphc_runtime::budget::parse_bytes(&s).map_err(|e| error(format!("memory_limit='{s}': {e}")))?)
            }
        };
        Ok(Options {
            backend,
            compile: CompileOptions { isa, ..Default::default() },
            devices: Devices { spec: devices, profile },
            timeout,
            memory_limit,
        })
    }

    /// The session options `graphc run` gives for these flags, with `stop` for Ctrl-C.
    /// `detect_deadlock` is for a caller no other thread will come along for.
    pub fn session(
        &self,
        detect_deadlock: bool,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> graphc_runtime::SessionOptions {
        graphc_runtime::SessionOptions {
            wait_timeout: self.timeout,
            step_timeout: self.timeout,
            detect_deadlock,
            memory_limit: self.memory_limit,
            stop: Some(stop),
            ..Default::default()
        }
    }

    /// The files these options read, with what each is (no output may replace them).
    pub fn reads(&self) -> Vec<(&'static str, &std::path::Path)> {
        [("the devices spec", self.devices.spec.as_deref()), ("the profile", self.devices.profile.as_deref())]
            .into_iter()
            .filter_map(|(w, p)| Some((w, p?)))
            .collect()
    }
}

/// The backends of this build, each with its description; the first is the default.
#[pyfunction]
pub fn backends() -> Vec<(String, String)> {
    graphc::backend::BACKENDS.iter().map(|b| (b.name().to_string(), b.description().to_string())).collect()
}
