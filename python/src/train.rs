//! `graphc.train`: what `graphc train` does on one machine, through the same driver (plan the
//! input pipeline, optimize, place, run the steps with periodic checkpoints), returning the
//! losses and the trained variables instead of printing them.
//!
//! Ctrl-C stops after the step in flight: the checkpoint (when one is asked for) is saved at
//! that step with its data position, the log gets that step's line, and KeyboardInterrupt is
//! raised; `restore=` the checkpoint takes up there. A second Ctrl-C stops the step itself
//! (no checkpoint: a step cut short leaves the variables half updated). An exception raised
//! by `callback` stops training the same way as the first Ctrl-C, and is raised.

use crate::arrays;
use crate::errors::{error, OrRaise};
use crate::interrupt;
use crate::options::{Options, Size};
use graphc::driver::{self, Ended, Files, Periodic, Resume, StepDone, Steps, TrainLog, TrainSpec};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a training did.
#[pyclass(frozen, get_all, module = "graphc")]
#[derive(Debug)]
pub struct TrainResult {
    /// The step graph.
    graph: String,
    /// The first step this call ran (numbered over the whole training: after a restored
    /// checkpoint's step) and the last (`steps`).
    first_step: u64,
    last_step: u64,
    /// Each step's loss, from `first_step` on (float64).
    losses: Py<PyArray1<f64>>,
    seconds: f64,
    steps_per_second: f64,
    /// The checkpoint saved at the last step, and the log written, if asked for.
    checkpoint: Option<PathBuf>,
    log: Option<PathBuf>,
    log_lines: u64,
    /// The step of the checkpoint restored, if one was.
    restored_step: Option<u64>,
    /// The trained variables by name (numpy arrays; None for one never initialized).
    variables: Py<PyDict>,
    backend: String,
}

#[pymethods]
impl TrainResult {
    fn __repr__(&self, py: Python<'_>) -> String {
        let losses = self.losses.bind(py).to_vec().unwrap_or_default();
        let (first, last) = (losses.first().copied().unwrap_or(f64::NAN), losses.last().copied().unwrap_or(f64::NAN));
        format!(
            "<graphc.TrainResult @{}: steps {}..={} in {:.3} s ({:.1} steps/s, backend {}); loss {first:.4} at step {}, {last:.4} at step {}>",
            self.graph, self.first_step, self.last_step, self.seconds, self.steps_per_second, self.backend, self.first_step, self.last_step
        )
    }
}

/// A count parameter: a whole number of at least `min`.
fn count(name: &str, v: Option<i64>, min: i64) -> PyResult<Option<u64>> {
    match v {
        Some(n) if n < min => Err(error(format!("{name}={n}: expected a whole number of at least {min}"))),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

/// `train(path, *, steps, graph=None, data=None, batch=None, seed=None, log=None,
/// log_every=None, checkpoint=None, checkpoint_every=None, restore=None, callback=None,
/// backend=None, devices=None, profile=None, timeout=None, memory_limit=None, isa="native")`.
#[pyfunction]
#[pyo3(signature = (path, *, steps, graph=None, data=None, batch=None, seed=None, log=None, log_every=None, checkpoint=None, checkpoint_every=None, restore=None, callback=None, backend=None, devices=None, profile=None, timeout=None, memory_limit=None, isa="native"))]
#[allow(clippy::too_many_arguments)]
pub fn train(
    py: Python<'_>,
    path: PathBuf,
    steps: i64,
    graph: Option<String>,
    data: Option<PathBuf>,
    batch: Option<i64>,
    seed: Option<u64>,
    log: Option<PathBuf>,
    log_every: Option<i64>,
    checkpoint: Option<PathBuf>,
    checkpoint_every: Option<i64>,
    restore: Option<PathBuf>,
    callback: Option<Py<PyAny>>,
    backend: Option<&str>,
    devices: Option<PathBuf>,
    profile: Option<PathBuf>,
    timeout: Option<f64>,
    memory_limit: Option<Size>,
    isa: &str,
) -> PyResult<TrainResult> {
    let steps = count("steps", Some(steps), 1)?.expect("given");
    let batch = count("batch", batch, 1)?;
    let log_every = count("log_every", log_every, 1)?.unwrap_or(1);
    let checkpoint_every = count("checkpoint_every", checkpoint_every, 1)?;
    if checkpoint_every.is_some() && checkpoint.is_none() {
        return Err(error("checkpoint_every= saves to checkpoint=, which is not given"));
    }
    if log_every > 1 && log.is_none() {
        return Err(error("log_every= thins the log=, which is not given"));
    }
    if let Some(cb) = &callback {
        if !cb.bind(py).is_callable() {
            return Err(error("callback= is called with (step, loss) after each step; it is not callable"));
        }
    }
    let options = Options::new(backend, isa, devices, profile, timeout, memory_limit)?;
    let a =
        Args { path, steps, graph, data, batch, seed, log, log_every, checkpoint, checkpoint_every, restore, options };
    let prepared = py.detach(|| prepare(&a)).or_raise()?;
    a.go(py, prepared, callback)
}

#[derive(Debug)]
struct Args {
    path: PathBuf,
    steps: u64,
    graph: Option<String>,
    data: Option<PathBuf>,
    batch: Option<u64>,
    seed: Option<u64>,
    log: Option<PathBuf>,
    log_every: u64,
    checkpoint: Option<PathBuf>,
    checkpoint_every: Option<u64>,
    restore: Option<PathBuf>,
    options: Options,
}

/// A training ready to run its steps.
struct Prepared {
    training: driver::Training,
    job: driver::TrainJob,
    file: graphc_ir::SourceFile,
    session: graphc_runtime::Session,
    /// Stops the step in flight (a second Ctrl-C).
    hard_stop: Arc<AtomicBool>,
    /// Kept while the session runs (the auto backend's background tier).
    _compiled: graphc::backend::Compiled,
    from: u64,
    position: Option<driver::Position>,
    restored: Option<u64>,
}

/// Everything before the first step, as `graphc train` does it: the checkpoint read first
/// (its seed decides the data), the files checked, the module loaded and checked against the
/// checkpoint, the pipeline planned, optimized, placed, compiled, and the variables restored.
fn prepare(a: &Args) -> anyhow::Result<Prepared> {
    let resume = a.restore.as_deref().map(Resume::read).transpose()?;
    files(a).check()?;
    let (file, module) = driver::load(&a.path, &driver::import_options_for(&a.path, &[], &[])?)?;
    if let Some(r) = &resume {
        r.check(&module)?;
        if r.step > a.steps {
            anyhow::bail!(
                "restore={}: the checkpoint is at step {}, past steps={} (the steps in all, the checkpoint's included)",
                r.path.display(),
                r.step,
                a.steps
            );
        }
    }
    let seed = Resume::seed(resume.as_ref(), a.seed)?;
    let spec = TrainSpec {
        graph: a.graph.as_deref(),
        data: a.data.as_deref(),
        batch: a.batch,
        seed,
        memory_limit: a.options.memory_limit,
    };
    let (module, training) = driver::plan_training(&spec, &file, module)?;
    let (from, position) = training.start(resume.as_ref())?;
    let backend = a.options.backend;
    let module = driver::optimize(backend, module, false, &file)?;
    let (module, job) = training.prepare(&a.options.devices, &file, module)?;
    let hard_stop = Arc::new(AtomicBool::new(false));
    // The producer thread blocks on the queue between steps, which deadlock detection would
    // take for a deadlock (see the driver's train.rs).
    let mut options = a.options.session(training.pipeline.is_none(), hard_stop.clone());
    options.memory_limit = training.memory_left.or(a.options.memory_limit);
    let (session, compiled, warning) = driver::session(backend, module, options, &a.options.compile)?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    if let Some(r) = &resume {
        r.apply(&session)?;
    }
    Ok(Prepared {
        training,
        job,
        file,
        session,
        hard_stop,
        _compiled: compiled,
        from,
        position,
        restored: resume.map(|r| r.step),
    })
}

/// What training reads (the model, the data set's arrays, the device spec and profile; the
/// restored checkpoint, which `checkpoint=` alone may replace) and writes.
fn files(a: &Args) -> Files {
    let mut files = Files::reading(&a.path, &[]);
    let data = a.data.as_deref().and_then(|d| std::fs::read_dir(d).ok());
    for entry in data.into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().ends_with(".npy") {
            files.read("a data file", &entry.path());
        }
    }
    for (what, path) in a.options.reads() {
        files.read(what, path);
    }
    files
        .updated("the restored checkpoint", a.restore.as_deref(), "checkpoint=")
        .write("log=", a.log.as_deref())
        .write("checkpoint=", a.checkpoint.as_deref());
    files
}

impl Args {
    /// Runs the steps (interruptible), then saves, and returns what the training did.
    fn go(&self, py: Python<'_>, p: Prepared, callback: Option<Py<PyAny>>) -> PyResult<TrainResult> {
        // A run restored from a checkpoint goes on with the log of the run it takes up from.
        let mut log =
            self.log.as_deref().map(|path| TrainLog::open(path, "log=", p.from > 0)).transpose().or_raise()?;
        let stop = AtomicUsize::new(0);
        let raised_by_callback: Mutex<Option<PyErr>> = Mutex::new(None);
        let mut losses: Vec<f64> = Vec::with_capacity((self.steps - p.from).min(1 << 20) as usize);
        // The last step run, and whether the log has its line.
        let mut last: Option<(StepDone, bool)> = None;
        let periodic = self.checkpoint.as_deref().map(Periodic::File).zip(self.checkpoint_every);
        let steps = Steps { from: p.from, to: self.steps, position: p.position, periodic, stop: Some(&stop) };
        let started = Instant::now();
        let (ran, interrupted) = interrupt::run_to_end(
            py,
            // The first Ctrl-C ends the training after the step in flight; a second one stops
            // the step itself.
            || {
                if stop.fetch_add(1, Ordering::SeqCst) > 0 {
                    p.hard_stop.store(true, Ordering::SeqCst);
                }
            },
            || -> anyhow::Result<Ended> {
                if p.from >= self.steps {
                    return Ok(Ended { step: p.from, position: p.position });
                }
                p.training.run(&p.session, &p.job, &p.file, &steps, |d: &StepDone| {
                    let logged = d.step.is_multiple_of(self.log_every) || d.step == self.steps;
                    if let Some(l) = log.as_mut().filter(|_| logged) {
                        l.write(d)?;
                    }
                    last = Some((*d, logged));
                    losses.push(d.loss);
                    if let Some(cb) = &callback {
                        if let Err(e) = Python::attach(|py| cb.call1(py, (d.step, d.loss)).map(drop)) {
                            *raised_by_callback.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                            stop.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Ok(())
                })
            },
        );
        let seconds = started.elapsed().as_secs_f64();
        let raised = interrupted.or_else(|| raised_by_callback.into_inner().unwrap_or_else(|e| e.into_inner()));
        let ended = match (ran, &raised) {
            (Ok(Ok(end)), _) => end,
            // A step cut short (a second Ctrl-C): nothing to keep.
            (Ok(Err(_)), Some(_)) => return Err(raised.expect("matched")),
            (Ok(Err(e)), None) => return Err(crate::errors::driver(e)),
            (Err(e), _) => return Err(e),
        };
        let at = if ended.step < self.steps { ended.step } else { self.steps };
        // The work so far is kept: the checkpoint at the last step run, and the log's line for
        // it; a stopped run's log says where and why it stopped, as `graphc train`'s does.
        if let Some(path) = &self.checkpoint {
            py.detach(|| p.training.save(&p.session, path, at, ended.position)).or_raise()?;
        }
        let mut log_lines = 0;
        if let Some(mut l) = log {
            if let Some((d, false)) = &last {
                l.write(d).or_raise()?;
            }
            log_lines = l.lines as u64;
            if let Some(e) = &raised {
                let why = match e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                    true => "SIGINT".to_string(),
                    false => e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "exception".into()),
                };
                let checkpoint = self.checkpoint.as_ref().map(|c| c.display().to_string());
                l.stopped(at, &why, checkpoint.as_deref()).or_raise()?;
            }
            l.finish().or_raise()?;
        }
        if let Some(e) = raised {
            return Err(e);
        }
        let variables = PyDict::new(py);
        for (name, value) in p.session.snapshot() {
            let v = match value {
                Some(t) => arrays::to_numpy(py, Arc::new((*t).clone()), &format!("variable '{name}'"))?,
                None => py.None().into_bound(py),
            };
            variables.set_item(name, v)?;
        }
        let ran_steps = losses.len();
        Ok(TrainResult {
            graph: p.training.graph.clone(),
            first_step: p.from + 1,
            last_step: self.steps,
            losses: PyArray1::from_vec(py, losses).unbind(),
            seconds,
            steps_per_second: ran_steps as f64 / seconds.max(1e-9),
            checkpoint: self.checkpoint.clone(),
            log: self.log.clone(),
            log_lines,
            restored_step: p.restored,
            variables: variables.unbind(),
            backend: self.options.backend.name().to_string(),
        })
    }
}
