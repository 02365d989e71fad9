//! Checkpoints: every variable of a session in one safetensors file.
//!
//! Files are written atomically (`fsutil::write_atomically`), so a crash mid-save leaves the
//! previous checkpoint whole. Restoring checks the whole file against the session first and
//! changes nothing unless every variable matches. Uninitialized variables are listed in the
//! metadata (`graphc.uninitialized.NAME`) rather than stored.
//!
//! Every field of the metadata under `graphc.` is checked when a checkpoint is read, by every
//! reader alike ([`decode`]): the step and `graphc train`'s counts ([`meta`]) must be whole
//! numbers, an uninitialized variable's entry must be empty, and a field graphc does not know
//! is refused; the error names the field, what was expected and what came.
//!
//! [`Checkpointer`] saves in the background: a step hands it a snapshot (pointer copies; see
//! `state.rs`) and goes on; a writer thread serializes and writes the latest snapshot, and
//! keeps each failure for the caller to collect ([`Checkpointer::take_failures`]) between
//! steps, so a path that cannot be written is known after the first attempt, not at the end.

use crate::error::{ErrorKind, RunError};
use crate::fsutil::write_atomically;
use crate::state::State;
use crate::tensor::Tensor;
use crate::wait::lock;
use graphc_ir::{DType, Module, Op, TensorType, Type};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

const UNINIT_PREFIX: &str = "graphc.uninitialized.";

/// The metadata's fields that hold counts: the step, and `graphc train`'s shuffling seed and
/// data position (which its driver reads; the runtime checks them as every reader does).
pub mod meta {
    /// Steps done when the checkpoint was taken.
    pub const STEP: &str = "graphc.step";
    pub const SEED: &str = "graphc.train.seed";
    pub const EPOCH: &str = "graphc.train.epoch";
    pub const BATCH: &str = "graphc.train.batch";
    pub const BATCH_SIZE: &str = "graphc.train.batch_size";
    pub const EXAMPLES: &str = "graphc.train.examples";

    /// `graphc train`'s fields, with what each counts.
    pub const TRAIN: [(&str, &str); 5] = [
        (SEED, "the shuffling seed"),
        (EPOCH, "the epoch of the next batch"),
        (BATCH, "the next batch's place in its epoch"),
        (BATCH_SIZE, "the examples in a batch"),
        (EXAMPLES, "the examples in the data"),
    ];
}

/// Every variable's value at one moment (`None`: uninitialized), by name.
pub type Snapshot = Vec<(String, Option<Arc<Tensor>>)>;

fn error(message: impl Into<String>) -> RunError {
    RunError::new(ErrorKind::Checkpoint, message)
}

/// The safetensors bytes of a snapshot.
pub fn encode(snapshot: &Snapshot, step: Option<u64>) -> Result<Vec<u8>, RunError> {
    let mut bytes: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), "graphc".into());
    if let Some(s) = step {
        meta.insert(meta::STEP.into(), s.to_string());
    }
    for (name, value) in snapshot {
        match value {
            Some(t) => bytes.push((name.clone(), st_dtype(t.dtype()), t.shape().to_vec(), t.to_le_bytes())),
            None => {
                meta.insert(format!("{UNINIT_PREFIX}{name}"), String::new());
            }
        }
    }
    let views = bytes
        .iter()
        .map(|(name, dt, shape, data)| {
            TensorView::new(*dt, shape.clone(), data).map(|v| (name.as_str(), v)).map_err(|e| error(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, Some(meta)).map_err(|e| error(format!("cannot encode the checkpoint: {e}")))
}

/// Saves a snapshot to `path` atomically.
pub fn save(snapshot: &Snapshot, step: Option<u64>, path: &Path) -> Result<(), RunError> {
    let bytes = encode(snapshot, step)?;
    write_atomically(path, |f| f.write_all(&bytes))
        .map_err(|e| error(format!("cannot write checkpoint {}: {e}", path.display())))
}

/// A checkpoint read back: values by name, the uninitialized names, the step it was taken
/// at, and `graphc train`'s fields ([`meta::TRAIN`]) that it has.
#[derive(Debug)]
pub struct Loaded {
    pub values: BTreeMap<String, Tensor>,
    pub uninitialized: Vec<String>,
    pub step: Option<u64>,
    pub train: BTreeMap<String, u64>,
}

pub fn load(path: &Path) -> Result<Loaded, RunError> {
    let read = |e: String| error(e.replacen("cannot read ", "cannot read checkpoint ", 1));
    let bytes = crate::fsutil::read_regular(path, "a safetensors checkpoint").map_err(read)?;
    decode(&bytes).map_err(|e| error(format!("{} is not a valid checkpoint: {}", path.display(), e.message)))
}

/// A checkpoint's bytes read back, its metadata checked (see the module's header).
pub fn decode(bytes: &[u8]) -> Result<Loaded, RunError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| error(e.to_string()))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| error(e.to_string()))?;
    let fields = header.metadata().clone().unwrap_or_default();
    let mut values = BTreeMap::new();
    for (name, view) in st.tensors() {
        let t = from_le_bytes(view.dtype(), view.shape(), view.data()).ok_or_else(|| {
            error(format!("tensor \"{name}\" has dtype {:?}, which graphc has no dtype for", view.dtype()))
        })?;
        values.insert(name, t);
    }
    let mut loaded = Loaded { values, uninitialized: Vec::new(), step: None, train: BTreeMap::new() };
    // In key order, so the first bad field named is the same every time.
    for (key, value) in fields.iter().collect::<BTreeMap<_, _>>() {
        if let Some(name) = key.strip_prefix(UNINIT_PREFIX) {
            if name.is_empty() {
                return Err(error(format!("its metadata has a field {key} that names no variable")));
            }
            if !value.is_empty() {
                return Err(bad_field(key, value, "\"\" (the field says the variable is uninitialized)"));
            }
            if loaded.values.contains_key(name) {
                return Err(error(format!(
                    "variable \"{name}\" is both stored and listed as uninitialized (its metadata's {key})"
                )));
            }
            loaded.uninitialized.push(name.to_string());
        } else if key == meta::STEP {
            loaded.step = Some(count(key, value, "the steps done")?);
        } else if let Some(&(_, what)) = meta::TRAIN.iter().find(|(k, _)| k == key) {
            loaded.train.insert(key.clone(), count(key, value, what)?);
        } else if key.starts_with("graphc.") {
            return Err(error(format!(
                "its metadata has a field {key}, which graphc does not know (a checkpoint of a newer graphc?)"
            )));
        }
    }
    Ok(loaded)
}

/// A metadata field's value as a count: decimal digits, 0 to 2^64 - 1, nothing else.
fn count(key: &str, value: &str, what: &str) -> Result<u64, RunError> {
    match value.parse::<u64>() {
        Ok(n) if value.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(bad_field(key, value, &format!("{what}, a whole number from 0 to {}", u64::MAX))),
    }
}

/// The error for metadata field `key`, which holds `value` where `expected` should be.
fn bad_field(key: &str, value: &str, expected: &str) -> RunError {
    error(format!("its metadata {key} is {}; expected {expected}", shown(value)))
}

/// A value as an error shows it: quoted, escaped (one line), its first 40 characters.
pub fn shown(value: &str) -> String {
    match value.char_indices().nth(40) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &value[..cut], value.len()),
    }
}

/// Every variable the module declares, by name, with its type (the first declaration of a
/// name: the verifier has checked that they agree), as a session of it holds them.
pub fn module_variables(m: &Module) -> BTreeMap<String, TensorType> {
    let mut out = BTreeMap::new();
    for g in &m.graphs {
        for n in g.walk() {
            let nd = &g.nodes[n];
            let (Some(name), Some(&res)) = (nd.attrs.str("name"), nd.results.first()) else { continue };
            if let (Op::Variable, Type::Var(ty)) = (nd.op, &g.values[res].ty) {
                out.entry(name.to_string()).or_insert_with(|| ty.clone());
            }
        }
    }
    out
}

/// The most differences [`check_variables`] names; it counts the rest.
const LISTED: usize = 12;

/// Checks a loaded checkpoint against the variables `ours` (of `whose`: "the session", "the
/// module"): names, dtypes and shapes. The error names the differences: variables of another
/// type, ours the checkpoint lacks, the checkpoint's that are none of ours (the first dozen,
/// and how many of each kind in all).
pub fn check_variables(ours: &BTreeMap<String, TensorType>, loaded: &Loaded, whose: &str) -> Result<(), RunError> {
    let (mut retyped, mut missing, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    for (name, ty) in ours {
        match loaded.values.get(name) {
            Some(t) if t.ty() != *ty => {
                retyped.push(format!("\"{name}\": {whose} has {ty}, the checkpoint {}", t.ty()))
            }
            Some(_) => {}
            None if loaded.uninitialized.contains(name) => {}
            None => missing.push(format!("\"{name}\" ({ty}) is missing from the checkpoint")),
        }
    }
    let theirs: Vec<&String> = loaded.values.keys().chain(&loaded.uninitialized).collect();
    for name in theirs.iter().filter(|n| !ours.contains_key(**n)) {
        extra.push(format!("\"{name}\" is in the checkpoint but is no variable of {whose}"));
    }
    let counts = [(retyped.len(), "of another type"), (missing.len(), "missing"), (extra.len(), "extra")];
    let mut problems: Vec<String> = [retyped, missing, extra].concat();
    if problems.is_empty() {
        return Ok(());
    }
    if problems.len() > LISTED {
        let more = problems.len() - LISTED;
        let all: Vec<String> = counts.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect();
        problems.truncate(LISTED);
        problems.push(format!(
            "and {more} more difference{} (in all: {})",
            if more == 1 { "" } else { "s" },
            all.join(", ")
        ));
    }
    let shared = theirs.iter().filter(|n| ours.contains_key(**n)).count();
    let stranger = if shared == 0 && !ours.is_empty() && !theirs.is_empty() {
        " (it has none of them: another model's checkpoint?)"
    } else {
        ""
    };
    Err(error(format!("the checkpoint does not match {whose}'s variables{stranger}: {}", problems.join("; "))))
}

/// Applies a loaded checkpoint to the session's variables: all of them or none. The error
/// lists the differences (missing, extra, wrong dtype or shape; see [`check_variables`]).
pub fn restore(state: &State, loaded: &Loaded) -> Result<(), RunError> {
    let ours = state.variables.iter().map(|(name, var)| (name.clone(), var.ty.clone())).collect();
    check_variables(&ours, loaded, "the session")?;
    for (name, var) in &state.variables {
        var.assign(loaded.values.get(name).map(|t| Arc::new(t.clone())))?;
    }
    Ok(())
}

/// Makes a loaded checkpoint the module's variables' initial values (their `init`; none for
/// one the checkpoint lists as uninitialized), in every graph that declares them: a program
/// compiled from the module starts where the run that saved it stopped. All of them or none,
/// as [`restore`].
pub fn into_module(m: &mut Module, loaded: &Loaded) -> Result<(), RunError> {
    check_variables(&module_variables(m), loaded, "the module")?;
    for g in &mut m.graphs {
        for (_, nd) in g.nodes.iter_mut() {
            if nd.op != Op::Variable {
                continue;
            }
            let Some(name) = nd.attrs.str("name").map(str::to_string) else { continue };
            match loaded.values.get(&name) {
                Some(t) => nd.attrs.set("init", graphc_ir::Attr::Tensor(t.to_literal())),
                None => _ = nd.attrs.remove("init"),
            }
        }
    }
    Ok(())
}

/// The safetensors name of each dtype.
const ST_DTYPES: [(DType, Dtype); 13] = [
    (DType::F32, Dtype::F32),
    (DType::F64, Dtype::F64),
    (DType::F16, Dtype::F16),
    (DType::BF16, Dtype::BF16),
    (DType::I8, Dtype::I8),
    (DType::I16, Dtype::I16),
    (DType::I32, Dtype::I32),
    (DType::I64, Dtype::I64),
    (DType::U8, Dtype::U8),
    (DType::U16, Dtype::U16),
    (DType::U32, Dtype::U32),
    (DType::U64, Dtype::U64),
    (DType::Bool, Dtype::BOOL),
];

fn st_dtype(d: DType) -> Dtype {
    ST_DTYPES.iter().find(|(g, _)| *g == d).expect("every dtype has a safetensors name").1
}

fn from_le_bytes(dt: Dtype, shape: &[usize], data: &[u8]) -> Option<Tensor> {
    let dtype = ST_DTYPES.iter().find(|(_, s)| *s == dt)?.0;
    Tensor::from_le_bytes(dtype, shape, data)
}

/// Saves snapshots to one path in the background. `submit` never blocks: if the writer is
/// still busy with an older snapshot, the newest one waiting replaces any not yet started.
#[derive(Debug)]
pub struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    inner: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    next: Option<(Snapshot, Option<u64>)>,
    done: bool,
    saved: usize,
    /// Failed saves the caller has not collected yet, oldest first.
    failures: Vec<RunError>,
}

impl Checkpointer {
    pub fn start(path: PathBuf) -> Self {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::spawn(move || loop {
            let job = {
                let mut p = lock(&s.inner);
                while p.next.is_none() && !p.done {
                    p = s.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                match p.next.take() {
                    Some(job) => job,
                    None => return,
                }
            };
            let result = save(&job.0, job.1, &path);
            let mut p = lock(&s.inner);
            match result {
                Ok(()) => p.saved += 1,
                Err(e) => {
                    let at = job.1.map(|s| format!("saving step {s}: ")).unwrap_or_default();
                    p.failures.push(RunError { message: format!("{at}{}", e.message), ..e });
                }
            }
            s.wake.notify_all();
        });
        Checkpointer { shared, thread: Some(thread) }
    }

    /// Queues a snapshot for writing and returns at once.
    pub fn submit(&self, snapshot: Snapshot, step: Option<u64>) {
        lock(&self.shared.inner).next = Some((snapshot, step));
        self.shared.wake.notify_all();
    }

    /// The saves that failed since the last call, oldest first; never blocks.
    pub fn take_failures(&self) -> Vec<RunError> {
        std::mem::take(&mut lock(&self.shared.inner).failures)
    }

    /// Writes what is pending, stops the writer, and reports how many checkpoints were saved
    /// and the failures not collected yet.
    pub fn close(mut self) -> (usize, Vec<RunError>) {
        lock(&self.shared.inner).done = true;
        self.shared.wake.notify_all();
        let panicked = self.thread.take().is_some_and(|t| t.join().is_err());
        let mut p = lock(&self.shared.inner);
        let mut failures = std::mem::take(&mut p.failures);
        if panicked {
            failures.push(RunError::internal("the checkpoint writer panicked"));
        }
        (p.saved, failures)
    }

    /// [`Checkpointer::close`], failing with the first failure not collected yet.
    pub fn finish(self) -> Result<usize, RunError> {
        match self.close() {
            (_, failures) if !failures.is_empty() => Err(failures.into_iter().next().expect("not empty")),
            (saved, _) => Ok(saved),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        lock(&self.shared.inner).done = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
