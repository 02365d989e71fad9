//! `graphc.load`, `Model` and `Session`: a model loaded, optimized, placed and compiled as
//! `graphc run` does it, then run on numpy arrays.
//!
//! A module is compiled into a [`Program`] once per input shapes: an ONNX model whose inputs
//! have dims that no `shapes=` sizes (a symbolic batch) is imported with the fed arrays'
//! shapes, as `graphc run` imports it with its `--input` files', and each shape's program is
//! kept in a small cache ([`CACHE`] programs, the least recently used dropped first). Every
//! other model is compiled at `load`, once.
//!
//! `Model.run` starts from the module's initial state at each call: a module without
//! variables or queues runs on one session shared by every call, one with state on a new
//! session of the same compiled kernels. `Model.session()` gives a session whose variables
//! are kept from step to step, saved and restored.

use crate::arrays::{self, Fed};
use crate::errors::{self, error, OrRaise};
use crate::interrupt;
use crate::options::{Options, Size};
use graphc::backend::Compiled;
use graphc::driver::{self, Job};
use graphc::placement::partition::Partitioned;
use graphc_ir::{SourceFile, TensorType};
use graphc_onnx::{Declared, Dim, ImportOptions};
use graphc_runtime::{RtValue, Session as RtSession, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Programs a model keeps, one per input shapes.
const CACHE: usize = 8;

/// Fed arrays this small are given to an import that needs inputs' values, as `graphc run`
/// gives its `--input` files' (see `driver::import_options_for`).
const KNOWN_VALUE_ELEMENTS: usize = 1 << 16;

/// An input or output of a model: its name, numpy dtype, and shape, whose dims are sizes,
/// symbolic names (str) or None (unknown); a shape of None is unknown altogether.
#[pyclass(frozen, module = "graphc")]
#[derive(Debug)]
pub struct TensorInfo(Declared);

#[pymethods]
impl TensorInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.0.name
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        arrays::dtype_name(self.0.dtype)
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(dims) = &self.0.dims else { return Ok(None) };
        let items: Vec<Bound<'py, PyAny>> = dims
            .iter()
            .map(|d| -> PyResult<Bound<'py, PyAny>> {
                Ok(match d {
                    Dim::Fixed(n) => n.into_pyobject(py)?.into_any(),
                    Dim::Symbolic(s) => s.into_pyobject(py)?.into_any(),
                    Dim::Unknown => py.None().into_bound(py),
                })
            })
            .collect::<PyResult<_>>()?;
        PyTuple::new(py, items).map(Some)
    }

    fn __repr__(&self) -> String {
        // As Python writes a str whose quotes need no escape.
        let name = self.0.name.replace('\\', "\\\\").replace('\'', "\\'");
        format!("TensorInfo(name='{name}', dtype='{}', shape={})", arrays::dtype_name(self.0.dtype), shape_of(&self.0))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<TensorInfo>().is_ok_and(|o| o.get().0 == self.0)
    }
}

fn dim_text(d: &Dim) -> String {
    match d {
        Dim::Fixed(n) => n.to_string(),
        Dim::Symbolic(s) => format!("'{s}'"),
        Dim::Unknown => "None".into(),
    }
}

/// `(4, 'N', None)`, or `None` for an unknown shape.
fn shape_of(d: &Declared) -> String {
    match &d.dims {
        Some(dims) => arrays::shape_text(dims.iter().map(dim_text)),
        None => "None".into(),
    }
}

/// `float32 array of shape ('N', 1, 28, 28)`.
fn describe(d: &Declared) -> String {
    match &d.dims {
        Some(_) => format!("{} array of shape {}", arrays::dtype_name(d.dtype), shape_of(d)),
        None => format!("{} array", arrays::dtype_name(d.dtype)),
    }
}

fn declared(name: &str, ty: &TensorType) -> Declared {
    Declared { name: name.to_string(), dtype: ty.dtype, dims: Some(ty.shape.iter().map(|&n| Dim::Fixed(n)).collect()) }
}

/// A module compiled for one set of input shapes.
#[derive(Debug)]
struct Program {
    file: SourceFile,
    graphs: Vec<String>,
    groups: Vec<Partitioned>,
    output_names: Vec<Vec<String>>,
    /// Each selected graph's inputs, by name.
    inputs: Vec<Vec<(String, TensorType)>>,
    /// The outputs as a run returns them (`graph.output` when several graphs run).
    outputs: Vec<Declared>,
    /// Kept for the sessions made from it (and, for the auto backend, its background tier).
    compiled: Compiled,
    interpreted: bool,
    /// The module has variables or queues.
    stateful: bool,
    /// The first session: every `Model.run`'s when the module has no state; else the module
    /// and kernels other sessions are made of.
    template: Arc<RtSession>,
    template_stop: Arc<AtomicBool>,
    /// The fed shapes it was made for (empty: compiled at load).
    shapes: Vec<(String, Vec<usize>)>,
}

/// What a program is looked up by: whether it is compiled as written (for fetches of values
/// fusion may absorb), the fed shapes of a model compiled per shape, and the small fed
/// arrays' bytes of one whose import needs inputs' values.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    as_written: bool,
    shapes: Vec<(String, Vec<usize>)>,
    values: Vec<(String, Vec<u8>)>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    wanted: Vec<String>,
    options: Options,
    /// `shapes=`: sizes of symbolic dims.
    dims: HashMap<String, u64>,
    inputs: Vec<Declared>,
    outputs: Vec<Declared>,
    /// Compiled per fed shape: an ONNX model that could not be imported without what is fed
    /// (a symbolic dim no `shapes=` sizes, or an input whose value the import needs). The
    /// load's error.
    per_shape: Option<String>,
    /// Its import needs some inputs' values, so they are part of the key.
    needs_values: AtomicBool,
    /// Most recently used last.
    cache: Mutex<Vec<(Key, Arc<Program>)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Imports (or parses), optimizes, places and compiles the module for `import`.
    fn build(
        &self,
        import: &ImportOptions,
        as_written: bool,
        shapes: Vec<(String, Vec<usize>)>,
    ) -> anyhow::Result<Program> {
        let (file, module) = driver::load(&self.path, import)?;
        let backend = self.options.backend;
        let module = driver::optimize(backend, module, as_written, &file)?;
        let graphs = driver::select_graphs(&self.wanted, &file, &module)?;
        let several = graphs.len() > 1;
        let mut inputs = Vec::new();
        let mut output_names = Vec::new();
        let mut outputs = Vec::new();
        for name in &graphs {
            let g = module.graph(name).expect("selected graphs exist");
            let named = g
                .inputs()
                .iter()
                .filter_map(|&v| Some((g.values[v].name.clone()?, g.values[v].ty.as_tensor()?.clone())));
            inputs.push(named.collect());
            output_names.push(g.outputs.iter().map(|o| o.name.clone()).collect());
            for (o, &v) in g.outputs.iter().zip(g.output_values()) {
                let shown = if several { format!("{name}.{}", o.name) } else { o.name.clone() };
                if let Some(t) = g.values[v].ty.as_tensor() {
                    outputs.push(declared(&shown, t));
                }
            }
        }
        let (module, groups, _placements) = driver::place_graphs(&self.options.devices, &file, module, &graphs)?;
        let (compiled, warning) = driver::compile_kernels(backend, &module, &self.options.compile)?;
        if let Some(w) = &warning {
            eprintln!("warning: {w}");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let template = driver::session_for(
            backend,
            module,
            self.options.session(true, stop.clone()),
            &compiled,
            warning.is_some(),
        )?;
        let stateful = !template.state().variables.is_empty() || !template.state().queues.is_empty();
        let template = Arc::new(template);
        Ok(Program {
            file,
            graphs,
            groups,
            output_names,
            inputs,
            outputs,
            compiled,
            interpreted: warning.is_some(),
            stateful,
            template,
            template_stop: stop,
            shapes,
        })
    }

    fn import_options(&self) -> ImportOptions {
        ImportOptions { dims: self.dims.clone(), ..Default::default() }
    }

    /// A session of the program with its own state.
    fn session(&self, p: &Program, detect_deadlock: bool) -> PyResult<(RtSession, Arc<AtomicBool>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let options = self.options.session(detect_deadlock, stop.clone());
        let s =
            driver::session_for(self.options.backend, p.template.module().clone(), options, &p.compiled, p.interpreted)
                .or_raise()?;
        Ok((s, stop))
    }

    /// The program for these feeds: from the cache, else compiled (with the GIL released).
    fn program(&self, py: Python<'_>, fed: &[(String, Fed<'_>)], as_written: bool) -> PyResult<Arc<Program>> {
        let mut key = Key { as_written, shapes: Vec::new(), values: Vec::new() };
        // The small arrays' values, read only where the import may need them.
        let small = || -> PyResult<HashMap<String, Tensor>> {
            let mut known = HashMap::new();
            for (name, f) in fed {
                let Some(ty) = self.inputs.iter().find(|d| &d.name == name).and_then(|d| fed_type(d, f)) else {
                    continue;
                };
                if ty.num_elements().is_some_and(|n| n as usize <= KNOWN_VALUE_ELEMENTS) {
                    known.insert(name.clone(), f.tensor(name, &ty)?);
                }
            }
            Ok(known)
        };
        let values = |known: &HashMap<String, Tensor>| {
            let mut v: Vec<(String, Vec<u8>)> = known.iter().map(|(n, t)| (n.clone(), t.to_le_bytes())).collect();
            v.sort();
            v
        };
        let mut known = HashMap::new();
        if self.per_shape.is_some() {
            key.shapes = fed.iter().map(|(n, f)| (n.clone(), f.shape.clone())).collect();
            key.shapes.sort();
            if self.needs_values.load(Ordering::Relaxed) {
                known = small()?;
                key.values = values(&known);
            }
        }
        {
            let mut cache = lock(&self.cache);
            if let Some(i) = cache.iter().position(|(k, _)| *k == key) {
                let hit = cache.remove(i);
                let p = hit.1.clone();
                cache.push(hit);
                return Ok(p);
            }
        }
        if self.per_shape.is_some() && known.is_empty() {
            known = small()?;
        }
        let shapes = key.shapes.clone();
        let built = py.detach(|| -> anyhow::Result<(Program, bool)> {
            let mut import = self.import_options();
            import.input_shapes =
                shapes.iter().map(|(n, s)| (n.clone(), s.iter().map(|&d| d as u64).collect())).collect();
            if self.per_shape.is_none() || self.needs_values.load(Ordering::Relaxed) {
                import.known_inputs = known.clone();
                return Ok((self.build(&import, as_written, shapes.clone())?, !known.is_empty()));
            }
            match self.build(&import, as_written, shapes.clone()) {
                Ok(p) => Ok((p, false)),
                // The import may need an input's value (a shape, axes), as `graphc run` gives it
                // from its --input files; what it says then is what run would say.
                Err(_) if !known.is_empty() => {
                    import.known_inputs = known.clone();
                    Ok((self.build(&import, as_written, shapes.clone())?, true))
                }
                Err(e) => Err(e),
            }
        });
        let (program, used_values) = built.or_raise()?;
        if used_values && !self.needs_values.swap(true, Ordering::Relaxed) {
            key.values = values(&known);
        }
        let program = Arc::new(program);
        let mut cache = lock(&self.cache);
        if cache.len() >= CACHE {
            cache.remove(0);
        }
        cache.push((key, program.clone()));
        Ok(program)
    }

    /// Checks what is fed against the model's inputs before anything is compiled or read:
    /// names, dtypes, ranks, sizes, the sizes of one symbolic dim across inputs, and (without
    /// fetches, which may need fewer) that every input is fed.
    fn check_feeds(&self, fed: &[(String, Fed<'_>)], every: bool) -> PyResult<()> {
        let listing = || {
            let all: Vec<String> = self.inputs.iter().map(|d| format!("{} ({})", d.name, describe(d))).collect();
            if all.is_empty() {
                "it has none".to_string()
            } else {
                all.join(", ")
            }
        };
        let mut sizes: HashMap<&str, (usize, &str)> = HashMap::new();
        for (name, f) in fed {
            let Some(d) = self.inputs.iter().find(|d| &d.name == name) else {
                let hint = graphc_ir::suggest::closest(name, self.inputs.iter().map(|d| d.name.as_str()))
                    .map(|s| format!("did you mean '{s}'? "))
                    .unwrap_or_default();
                return Err(error(format!("no input named '{name}'; {hint}the model's inputs are: {}", listing())));
            };
            let wrong = || {
                error(format!("input '{name}': expected {}, got {}", arrays::a(&describe(d)), arrays::a(&f.describe())))
            };
            if f.dtype != Some(d.dtype) {
                return Err(wrong());
            }
            let Some(dims) = &d.dims else { continue };
            if dims.len() != f.shape.len() {
                return Err(wrong());
            }
            for (dim, &n) in dims.iter().zip(&f.shape) {
                match dim {
                    Dim::Fixed(m) if *m != n as u64 => return Err(wrong()),
                    Dim::Symbolic(s) => match sizes.get(s.as_str()) {
                        Some(&(m, other)) if m != n => {
                            return Err(error(format!(
                                "input '{name}': its dim '{s}' is {n}, but input '{other}' has '{s}' = {m} ({} for '{name}', got {})",
                                arrays::a(&describe(d)),
                                arrays::a(&f.describe())
                            )))
                        }
                        Some(_) => {}
                        None => {
                            sizes.insert(s, (n, name));
                        }
                    },
                    _ => {}
                }
            }
        }
        if every {
            let missing: Vec<String> = self
                .inputs
                .iter()
                .filter(|d| !fed.iter().any(|(n, _)| *n == d.name))
                .map(|d| format!("'{}' ({})", d.name, describe(d)))
                .collect();
            if !missing.is_empty() {
                return Err(error(format!(
                    "missing input{} {}; the model's inputs are: {}",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    listing()
                )));
            }
        }
        Ok(())
    }
}

/// The type an input declared as `d` has when `f` is fed to it (its symbolic dims sized by
/// the array); `None` when they disagree (reported by the checks).
fn fed_type(d: &Declared, f: &Fed<'_>) -> Option<TensorType> {
    if f.dtype != Some(d.dtype) {
        return None;
    }
    Some(TensorType::new(d.dtype, f.shape.iter().map(|&n| n as u64).collect::<Vec<u64>>()))
}

/// The dict of feeds: names (str) to arrays.
fn collect<'py>(feeds: Option<&Bound<'py, PyDict>>) -> PyResult<Vec<(String, Fed<'py>)>> {
    let Some(feeds) = feeds else { return Ok(Vec::new()) };
    feeds
        .iter()
        .map(|(k, v)| {
            let name: String = k.extract().map_err(|_| {
                error(format!(
                    "the feeds are a dict of input names (str) to numpy arrays; a key is {}",
                    k.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            let f = Fed::new(&name, &v)?;
            Ok((name, f))
        })
        .collect()
}

/// Each selected graph's feeds, from the arrays fed (each read once, in one copy), checked
/// against the program's input types.
fn tensors(p: &Program, fed: &[(String, Fed<'_>)]) -> PyResult<Vec<BTreeMap<String, Arc<Tensor>>>> {
    let mut read: HashMap<&str, Arc<Tensor>> = HashMap::new();
    let mut per_graph = Vec::new();
    for inputs in &p.inputs {
        let mut feeds = BTreeMap::new();
        for (name, ty) in inputs {
            let Some((_, f)) = fed.iter().find(|(n, _)| n == name) else { continue };
            if f.dtype != Some(ty.dtype) || f.shape.iter().map(|&n| n as u64).ne(ty.shape.iter().copied()) {
                return Err(error(format!(
                    "input '{name}': expected {}, got {}",
                    arrays::a(&arrays::describe(ty)),
                    arrays::a(&f.describe())
                )));
            }
            let t = match read.get(name.as_str()) {
                Some(t) => t.clone(),
                None => {
                    let t = Arc::new(f.tensor(name, ty)?);
                    read.insert(name, t.clone());
                    t
                }
            };
            feeds.insert(name.clone(), t);
        }
        per_graph.push(feeds);
    }
    Ok(per_graph)
}

/// Runs one step of `p` on `session` (interruptible, the GIL released) and returns its outputs
/// by name, each a numpy array (None for a token).
fn step<'py>(
    py: Python<'py>,
    p: &Program,
    session: Arc<RtSession>,
    stop: &AtomicBool,
    inputs: &[BTreeMap<String, Arc<Tensor>>],
    fetch: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let job = Job::new(session.module(), &p.graphs, &p.groups, inputs, &p.output_names, fetch);
    let requests = job.requests.clone();
    let ran = interrupt::run(py, || stop.store(true, Ordering::SeqCst), move || session.run_step(requests));
    // The flag stopped this step; the session's next ones run.
    stop.store(false, Ordering::SeqCst);
    let mut outs = ran?.map_err(|e| errors::step(&e, &p.file))?;
    let dict = PyDict::new(py);
    for (shown, req, name) in &job.outputs {
        let Some(o) = outs.get_mut(*req) else { continue };
        let Some(i) = o.names.iter().position(|n| n == name) else { continue };
        match std::mem::replace(&mut o.values[i], RtValue::Token) {
            RtValue::Tensor(t) => dict.set_item(shown, arrays::to_numpy(py, t, &format!("output '{shown}'"))?)?,
            _ => dict.set_item(shown, py.None())?,
        }
    }
    Ok(dict)
}

/// A model loaded and compiled, ready to run on numpy arrays.
#[pyclass(frozen, module = "graphc")]
#[derive(Debug)]
pub struct Model {
    inner: Arc<Inner>,
}

/// `load(path, *, graph=None, backend=None, devices=None, profile=None, shapes=None,
/// timeout=None, memory_limit=None, isa="native")`: reads a `.gir` file or an ONNX model and
/// compiles it as `graphc run` does (see the module's header).
#[pyfunction]
#[pyo3(signature = (path, *, graph=None, backend=None, devices=None, profile=None, shapes=None, timeout=None, memory_limit=None, isa="native"))]
#[allow(clippy::too_many_arguments)]
pub fn load(
    py: Python<'_>,
    path: PathBuf,
    graph: Option<Graphs>,
    backend: Option<&str>,
    devices: Option<PathBuf>,
    profile: Option<PathBuf>,
    shapes: Option<HashMap<String, u64>>,
    timeout: Option<f64>,
    memory_limit: Option<Size>,
    isa: &str,
) -> PyResult<Model> {
    let options = Options::new(backend, isa, devices, profile, timeout, memory_limit)?;
    let dims = shapes.unwrap_or_default();
    let onnx = driver::is_onnx(&path);
    if !onnx && !dims.is_empty() {
        return Err(error(format!(
            "shapes=: only an ONNX model's inputs have symbolic dims; {} is graphc IR, whose shapes are fixed",
            path.display()
        )));
    }
    let mut inner = Inner {
        path,
        wanted: graph.map(Graphs::names).unwrap_or_default(),
        options,
        dims,
        inputs: Vec::new(),
        outputs: Vec::new(),
        per_shape: None,
        needs_values: AtomicBool::new(false),
        cache: Mutex::new(Vec::new()),
    };
    if onnx {
        let (inputs, outputs) = graphc_onnx::signature(&inner.path).map_err(error)?;
        check_dims(&inner.path, &inner.dims, &inputs)?;
        inner.inputs = inputs.into_iter().map(|d| bind(d, &inner.dims)).collect();
        inner.outputs = outputs.into_iter().map(|d| bind(d, &inner.dims)).collect();
    }
    let import = inner.import_options();
    match py.detach(|| inner.build(&import, false, Vec::new())) {
        Ok(p) => {
            inner.inputs = dedup(p.inputs.iter().flatten().map(|(n, t)| declared(n, t)));
            inner.outputs = p.outputs.clone();
            let key = Key { as_written: false, shapes: Vec::new(), values: Vec::new() };
            inner.cache = Mutex::new(vec![(key, Arc::new(p))]);
        }
        // A model whose import needs what is fed (a symbolic dim's size, an input's value)
        // is compiled at its runs, for each shape fed.
        Err(e) if onnx && !inner.inputs.is_empty() => inner.per_shape = Some(format!("{e:#}")),
        Err(e) => return Err(errors::driver(e)),
    }
    Ok(Model { inner: Arc::new(inner) })
}

/// `graph=`: one graph's name, or several (run as one step).
#[derive(Debug, FromPyObject)]
pub enum Graphs {
    One(String),
    Several(Vec<String>),
}

impl Graphs {
    fn names(self) -> Vec<String> {
        match self {
            Graphs::One(g) => vec![g],
            Graphs::Several(v) => v,
        }
    }
}

/// Each name once, the first kept.
fn dedup(all: impl Iterator<Item = Declared>) -> Vec<Declared> {
    let mut out: Vec<Declared> = Vec::new();
    for d in all {
        if !out.iter().any(|o| o.name == d.name) {
            out.push(d);
        }
    }
    out
}

/// `shapes=` names only symbolic dims of the model's inputs.
fn check_dims(path: &Path, dims: &HashMap<String, u64>, inputs: &[Declared]) -> PyResult<()> {
    let symbols: Vec<&str> = inputs
        .iter()
        .flat_map(|d| d.dims.iter().flatten())
        .filter_map(|d| match d {
            Dim::Symbolic(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    for name in dims.keys() {
        if !symbols.contains(&name.as_str()) {
            let has = if symbols.is_empty() {
                "its inputs have none".to_string()
            } else {
                let mut s: Vec<&str> = symbols.clone();
                s.sort();
                s.dedup();
                format!("its inputs' symbolic dims are {}", s.join(", "))
            };
            return Err(error(format!(
                "shapes={{'{name}': ...}}: {} has no symbolic dim '{name}'; {has}",
                path.display()
            )));
        }
    }
    Ok(())
}

/// `d` with the dims `shapes=` sizes given their sizes.
fn bind(mut d: Declared, dims: &HashMap<String, u64>) -> Declared {
    for dim in d.dims.iter_mut().flatten() {
        if let Dim::Symbolic(s) = dim {
            if let Some(&n) = dims.get(s.as_str()) {
                *dim = Dim::Fixed(n);
            }
        }
    }
    d
}

#[pymethods]
impl Model {
    /// The inputs every run takes, by name (`TensorInfo`: name, dtype, shape).
    #[getter]
    fn inputs(&self) -> Vec<TensorInfo> {
        self.inner.inputs.iter().cloned().map(TensorInfo).collect()
    }

    /// The outputs a run returns.
    #[getter]
    fn outputs(&self) -> Vec<TensorInfo> {
        self.inner.outputs.iter().cloned().map(TensorInfo).collect()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path.clone()
    }

    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.options.backend.name()
    }

    /// The input shapes the model has been compiled for, most recently used last: one dict
    /// (input name to shape) per program in its cache; one empty dict for a model compiled
    /// at load.
    #[getter]
    fn compiled_shapes<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        lock(&self.inner.cache)
            .iter()
            .filter(|(k, _)| !k.as_written)
            .map(|(_, p)| {
                let d = PyDict::new(py);
                for (name, shape) in &p.shapes {
                    d.set_item(name, PyTuple::new(py, shape)?)?;
                }
                Ok(d)
            })
            .collect()
    }

    /// Runs one step on `feeds` (input names to numpy arrays) from the module's initial
    /// state and returns every output (or the values `fetch` names) by name. Interrupted by
    /// Ctrl-C (KeyboardInterrupt).
    #[pyo3(signature = (feeds=None, *, fetch=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: Option<&Bound<'py, PyDict>>,
        fetch: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fetch = fetch.unwrap_or_default();
        let fed = collect(feeds)?;
        self.inner.check_feeds(&fed, fetch.is_empty())?;
        let p = self.inner.program(py, &fed, !fetch.is_empty())?;
        let inputs = tensors(&p, &fed)?;
        if p.stateful {
            let (session, stop) = self.inner.session(&p, true)?;
            step(py, &p, Arc::new(session), &stop, &inputs, &fetch)
        } else {
            step(py, &p, p.template.clone(), &p.template_stop, &inputs, &fetch)
        }
    }

    /// A session of the model: its variables are kept from one step to the next, and can be
    /// saved and restored. A model compiled per shape is bound to the shapes of the first
    /// step the session runs.
    fn session(&self, py: Python<'_>) -> PyResult<Session> {
        let s = Session { inner: self.inner.clone(), bound: Mutex::new(None), steps: AtomicU64::new(0) };
        if self.inner.per_shape.is_none() {
            s.bind(py, &[])?;
        }
        Ok(s)
    }

    fn __repr__(&self) -> String {
        let ports =
            |v: &[Declared]| v.iter().map(|d| format!("{}: {}", d.name, describe(d))).collect::<Vec<_>>().join(", ");
        format!(
            "<graphc.Model {} (backend {}): inputs {}; outputs {}>",
            self.inner.path.display(),
            self.inner.options.backend.name(),
            ports(&self.inner.inputs),
            ports(&self.inner.outputs)
        )
    }
}

/// A session's program and runtime session, once bound.
#[derive(Debug)]
struct Binding {
    program: Arc<Program>,
    session: Arc<RtSession>,
    stop: Arc<AtomicBool>,
}

/// A session of a model: variables (and queues) kept from step to step.
#[pyclass(frozen, module = "graphc")]
#[derive(Debug)]
pub struct Session {
    inner: Arc<Inner>,
    bound: Mutex<Option<Arc<Binding>>>,
    /// Steps run since it was made or restored, past the restored checkpoint's step.
    steps: AtomicU64,
}

impl Session {
    /// Binds the session to the program for `fed` (a model compiled at load: its only one).
    fn bind(&self, py: Python<'_>, fed: &[(String, Fed<'_>)]) -> PyResult<Arc<Binding>> {
        let mut bound = lock(&self.bound);
        if let Some(b) = bound.as_ref() {
            return Ok(b.clone());
        }
        let program = self.inner.program(py, fed, false)?;
        let (session, stop) = if program.stateful {
            let (s, stop) = self.inner.session(&program, false)?;
            (Arc::new(s), stop)
        } else {
            // Nothing to keep: the model's own session serves.
            (program.template.clone(), program.template_stop.clone())
        };
        let b = Arc::new(Binding { program, session, stop });
        *bound = Some(b.clone());
        Ok(b)
    }

    fn bound(&self) -> PyResult<Arc<Binding>> {
        lock(&self.bound).clone().ok_or_else(|| {
            error(format!(
                "the session has no variables yet: {} is compiled for the shapes of the first step a session runs; run a step first (or load it with shapes=)",
                self.inner.path.display()
            ))
        })
    }

    /// The files a checkpoint may not replace: the model and what the options read.
    fn files(&self, what: &str, path: &Path) -> PyResult<()> {
        let mut files = driver::Files::reading(&self.inner.path, &[]);
        for (w, p) in self.inner.options.reads() {
            files.read(w, p);
        }
        files.write(what, Some(path)).check().or_raise()
    }
}

#[pymethods]
impl Session {
    /// Runs one step on `feeds` and returns its outputs (or the values `fetch` names) by
    /// name; the variables keep what the step left. The feeds' shapes must be those of the
    /// session's first step. Interrupted by Ctrl-C (KeyboardInterrupt).
    #[pyo3(signature = (feeds=None, *, fetch=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: Option<&Bound<'py, PyDict>>,
        fetch: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let fetch = fetch.unwrap_or_default();
        let fed = collect(feeds)?;
        self.inner.check_feeds(&fed, fetch.is_empty())?;
        let b = self.bind(py, &fed)?;
        let inputs = tensors(&b.program, &fed).map_err(|e| {
            if b.program.shapes.is_empty() {
                return e;
            }
            let shapes: Vec<String> = b.program.shapes.iter().map(|(n, s)| format!("{n} {s:?}")).collect();
            error(format!(
                "{} (the session was bound to the shapes of its first step: {})",
                e.value(py),
                shapes.join(", ")
            ))
        })?;
        let out = step(py, &b.program, b.session.clone(), &b.stop, &inputs, &fetch)?;
        self.steps.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Steps run (counting from the restored checkpoint's step).
    #[getter]
    fn step(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    /// The variables' values by name (copies; None for one not yet initialized).
    fn variables<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let b = self.bound()?;
        let dict = PyDict::new(py);
        for (name, value) in b.session.snapshot() {
            let v = match value {
                Some(t) => arrays::to_numpy(py, Arc::new((*t).clone()), &format!("variable '{name}'"))?,
                None => py.None().into_bound(py),
            };
            dict.set_item(name, v)?;
        }
        Ok(dict)
    }

    /// Saves every variable to a safetensors checkpoint (written atomically), with the step
    /// (`step`, else the session's).
    #[pyo3(signature = (path, *, step=None))]
    fn save(&self, py: Python<'_>, path: PathBuf, step: Option<u64>) -> PyResult<()> {
        let b = self.bound()?;
        self.files("save", &path)?;
        let step = step.unwrap_or_else(|| self.steps.load(Ordering::Relaxed));
        py.detach(|| b.session.save(&path, Some(step))).map_err(|e| error(e.to_string()))
    }

    /// Gives the variables a checkpoint's values (one `save` or `graphc run`/`train` wrote, or a
    /// cluster's index), all or none; returns the step it was saved at (None if it says none),
    /// which the session's step count takes up from.
    fn restore(&self, py: Python<'_>, path: PathBuf) -> PyResult<Option<u64>> {
        let b = self.bound()?;
        let step = py
            .detach(|| -> Result<Option<u64>, String> {
                match graphc_dist::checkpoint::load_merged(&path).map_err(|e| e.to_string())? {
                    Some(merged) => {
                        graphc_runtime::checkpoint::restore(b.session.state(), &merged).map_err(|e| e.to_string())?;
                        Ok(merged.step)
                    }
                    None => b.session.restore(&path).map_err(|e| e.to_string()),
                }
            })
            .map_err(|e| error(format!("restore {}: {e}", path.display())))?;
        self.steps.store(step.unwrap_or(0), Ordering::Relaxed);
        Ok(step)
    }

    fn __repr__(&self) -> String {
        format!("<graphc.Session of {} at step {}>", self.inner.path.display(), self.steps.load(Ordering::Relaxed))
    }
}
