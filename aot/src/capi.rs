//! The C entry points. An object's `NAME_create` calls [`graphc_aot_create`] with its bundle
//! and the graph's index; `NAME_run` and the others forward to the functions here unchanged.
//! Every function checks its pointers for null, catches panics (none may cross into C) and
//! reports failures as a nonzero status with the message in the context.
//!
//! Buffers are the caller's: `run` reads each input's bytes (the header gives their sizes)
//! and writes each output's; a tensor is its elements row-major in the machine's byte order,
//! a bool one byte (0 or 1).
#![allow(unsafe_code)]

use crate::bundle::Bundle;
use crate::program::Program;
use graphc_ir::{Graph, TensorType, Type};
use graphc_runtime::limits::tensor_bytes;
use graphc_runtime::state::Variable;
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

/// Statuses `run`, `read_variable` and `write_variable` return.
pub const OK: c_int = 0;
/// A null pointer, or no variable of that name.
pub const INVALID_ARGUMENT: c_int = 1;
/// The graph failed (the message says how).
pub const RUN_FAILED: c_int = 2;
/// A panic inside the library (a bug of graphc's).
pub const INTERNAL: c_int = 3;

/// One graph of a program, with its session (variables, queues, buffers): its own, or one it
/// shares with the other contexts made from it by `create_sharing`.
#[derive(Debug)]
pub struct Ctx {
    session: Arc<Session>,
    /// The address of the program's bundle, which a context to share must have too.
    bundle: usize,
    /// The program's graphs, by index.
    graphs: Arc<[String]>,
    graph: String,
    inputs: Vec<(String, TensorType)>,
    /// Per output: its tensor type (tokens and handles are not copied out).
    outputs: Vec<Option<TensorType>>,
    error: CString,
}

impl Ctx {
    /// A context for graph `index` of the program of bundle `bundle`.
    pub fn new(program: Program, bundle: &Bundle, index: usize) -> Result<Ctx, String> {
        let options = SessionOptions { detect_deadlock: true, ..Default::default() };
        let graphs: Arc<[String]> = program.manifest.graphs.into();
        let session = Session::with_compiled(program.module, options, program.kernels).map_err(|e| e.to_string())?;
        Ctx::on(Arc::new(session), bundle as *const Bundle as usize, graphs, index)
    }

    /// A context for graph `index` of `other`'s program on `other`'s session: the graphs
    /// share their variables and queues, as graphs of one `graphc run` session do.
    pub fn sharing(other: &Ctx, bundle: &Bundle, index: usize) -> Result<Ctx, String> {
        if other.bundle != bundle as *const Bundle as usize {
            return Err(format!(
                "the context to share (of @{}) is another program's: a context shares only with those of its own object",
                other.graph
            ));
        }
        Ctx::on(other.session.clone(), other.bundle, other.graphs.clone(), index)
    }

    fn on(session: Arc<Session>, bundle: usize, graphs: Arc<[String]>, index: usize) -> Result<Ctx, String> {
        let graph = graphs.get(index).ok_or_else(|| format!("the program has no graph {index}"))?.clone();
        let g = session.module().graph(&graph).ok_or_else(|| format!("the program has no graph @{graph}"))?;
        let (inputs, outputs) = signature(g)?;
        Ok(Ctx { session, bundle, graphs, graph, inputs, outputs, error: CString::default() })
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    fn fail(&mut self, status: c_int, message: String) -> c_int {
        self.error = CString::new(message.replace('\0', " ")).unwrap_or_default();
        status
    }

    /// Runs the graph on the inputs' bytes, writing the outputs' bytes.
    ///
    /// # Safety
    /// `inputs` must hold a pointer per input, each valid for reads of its byte size;
    /// `outputs` a pointer per output, each valid for writes of its byte size (or null for a
    /// token or handle output).
    unsafe fn run(&mut self, inputs: *const *const u8, outputs: *const *mut u8) -> Result<(), (c_int, String)> {
        let invalid = |m: String| (INVALID_ARGUMENT, m);
        if (inputs.is_null() && !self.inputs.is_empty()) || (outputs.is_null() && !self.outputs.is_empty()) {
            return Err(invalid("null inputs or outputs array".into()));
        }
        let mut request = RunRequest::new(self.graph.clone());
        for (i, (name, ty)) in self.inputs.iter().enumerate() {
            // SAFETY: the caller's contract: one valid pointer per input.
            let p = unsafe { *inputs.add(i) };
            if p.is_null() {
                return Err(invalid(format!("input {i} ('{name}') is null")));
            }
            let n = byte_size(ty).map_err(invalid)?;
            // SAFETY: the caller's contract: valid for reads of the input's byte size.
            let bytes = unsafe { std::slice::from_raw_parts(p, n) };
            let t = tensor(ty, bytes).map_err(invalid)?;
            request = request.feed(name.clone(), Arc::new(t));
        }
        // Every output pointer checked before the step runs: a step (a training update, say)
        // either runs and writes every output, or fails before it changes anything.
        let mut targets = Vec::new();
        for (k, ty) in self.outputs.iter().enumerate() {
            let Some(ty) = ty else { continue };
            // SAFETY: the caller's contract: one pointer per output.
            let p = unsafe { *outputs.add(k) };
            if p.is_null() {
                return Err(invalid(format!("output {k} is null")));
            }
            targets.push((k, p, byte_size(ty).map_err(invalid)?));
        }
        let out = self.session.run(request).map_err(|e| (RUN_FAILED, e.to_string()))?;
        let mut results = Vec::new();
        for &(k, p, size) in &targets {
            let t = out.tensor(k).ok_or_else(|| (RUN_FAILED, format!("output {k} is not a tensor")))?;
            let bytes = native_bytes(t);
            if bytes.len() != size {
                return Err((RUN_FAILED, format!("output {k} is {} where the header says {size} bytes", t.ty())));
            }
            results.push((p, bytes));
        }
        for (p, bytes) in results {
            // SAFETY: the caller's contract: valid for writes of the output's byte size,
            // which `bytes` has (checked above).
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        }
        self.session.recycle([out]);
        Ok(())
    }
}

/// A graph's inputs (name and type) and outputs (tensor types), in declaration order.
type Signature = (Vec<(String, TensorType)>, Vec<Option<TensorType>>);

/// A graph's [`Signature`].
fn signature(g: &Graph) -> Result<Signature, String> {
    let inputs = g
        .inputs()
        .iter()
        .map(|&v| match &g.values[v].ty {
            Type::Tensor(t) => Ok((g.values[v].name.clone().unwrap_or_default(), t.clone())),
            other => Err(format!("input of @{} is a {other}; only tensors can be fed", g.name)),
        })
        .collect::<Result<_, _>>()?;
    let outputs = g.output_values().iter().map(|&v| g.values[v].ty.as_tensor().cloned()).collect();
    Ok((inputs, outputs))
}

fn byte_size(ty: &TensorType) -> Result<usize, String> {
    tensor_bytes(ty).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| format!("{ty} is too large"))
}

/// A tensor of `ty` from its bytes in the machine's order.
fn tensor(ty: &TensorType, bytes: &[u8]) -> Result<Tensor, String> {
    let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
    let t = if cfg!(target_endian = "little") { Tensor::from_le_bytes(ty.dtype, &shape, bytes) } else { None };
    t.ok_or_else(|| format!("cannot read {ty} from {} bytes on this machine", bytes.len()))
}

fn native_bytes(t: &Tensor) -> Vec<u8> {
    // Every target graphc compiles for is little-endian (x86-64, aarch64 Linux).
    t.to_le_bytes()
}

/// Runs `f`, turning a panic into `on_panic`.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// A context for graph `index` of `bundle`, or null (with the reason on standard error: there
/// is no context yet to hold it). `weights_path`, when not null, is the weights file of a
/// program compiled with `--weights-file` (else the path given then).
///
/// # Safety
/// `bundle` must be the bundle of an object `graphc compile` wrote, linked into this program;
/// `weights_path` null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_create(bundle: *const Bundle, index: u64, weights_path: *const c_char) -> *mut Ctx {
    guard(std::ptr::null_mut(), || {
        if bundle.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract: a NUL-terminated string when not null.
        let path =
            (!weights_path.is_null()).then(|| unsafe { CStr::from_ptr(weights_path) }.to_string_lossy().into_owned());
        // SAFETY: the caller's contract: the object's bundle, in its read-only data for the
        // process's life.
        let made = unsafe { Program::load(&*bundle, path.as_deref().map(Path::new)) }
            // SAFETY: as above.
            .and_then(|p| Ctx::new(p, unsafe { &*bundle }, index as usize));
        boxed(made)
    })
}

/// A context for graph `index` of `bundle` that shares `other`'s session (its variables and
/// queues): `other` is a context of another graph of the same object (or of the same graph).
/// Null (with the reason on standard error) if `other` is null or of another object. Each
/// context is destroyed on its own; the session lives while one of them does.
///
/// # Safety
/// `bundle` as for [`graphc_aot_create`]; `other` null or a live context.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_create_sharing(bundle: *const Bundle, index: u64, other: *const Ctx) -> *mut Ctx {
    guard(std::ptr::null_mut(), || {
        if bundle.is_null() || other.is_null() {
            eprintln!("graphc: create_sharing: no context to share (null)");
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract: the object's bundle and a live context.
        boxed(Ctx::sharing(unsafe { &*other }, unsafe { &*bundle }, index as usize))
    })
}

/// The context made, or null with the reason on standard error (there is no context yet to
/// hold it).
fn boxed(made: Result<Ctx, String>) -> *mut Ctx {
    match made {
        Ok(ctx) => Box::into_raw(Box::new(ctx)),
        Err(e) => {
            eprintln!("graphc: {e}");
            std::ptr::null_mut()
        }
    }
}

/// Frees a context (null is ignored).
///
/// # Safety
/// `ctx` must be null or a context `create` returned, not destroyed before.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_destroy(ctx: *mut Ctx) {
    if !ctx.is_null() {
        // SAFETY: the caller's contract: a live context from `Box::into_raw`.
        guard((), || drop(unsafe { Box::from_raw(ctx) }));
    }
}

/// Runs the graph: 0, or a status with the message in `error_message`.
///
/// # Safety
/// `ctx` a live context; `inputs` and `outputs` as the header describes (a pointer per input
/// and output, each to a buffer of its byte size).
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_run(ctx: *mut Ctx, inputs: *const *const u8, outputs: *const *mut u8) -> c_int {
    if ctx.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract: a live context, used by one thread at a time.
    let ctx = unsafe { &mut *ctx };
    let status = guard(INTERNAL, || {
        // SAFETY: the caller's contract on the arrays.
        match unsafe { ctx.run(inputs, outputs) } {
            Ok(()) => OK,
            Err((status, message)) => ctx.fail(status, message),
        }
    });
    if status == INTERNAL {
        ctx.fail(
            INTERNAL,
            "graphc: internal error (a panic in the run-time library); the context may be inconsistent".into(),
        );
    }
    status
}

/// The message of the last failure ("" when none); valid until the next call on `ctx`.
///
/// # Safety
/// `ctx` null or a live context.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_error_message(ctx: *const Ctx) -> *const c_char {
    if ctx.is_null() {
        return c"graphc: no context (create failed?)".as_ptr();
    }
    // SAFETY: the caller's contract.
    unsafe { (*ctx).error.as_ptr() }
}

/// Copies variable `name`'s value into `out` (its byte size, from the header).
///
/// # Safety
/// `ctx` a live context, `name` NUL-terminated, `out` valid for writes of the variable's size.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_read_variable(ctx: *mut Ctx, name: *const c_char, out: *mut u8) -> c_int {
    if ctx.is_null() || name.is_null() || out.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract.
    let (ctx, name) = unsafe { (&mut *ctx, CStr::from_ptr(name).to_string_lossy()) };
    on_variable(ctx, &name, |v| {
        let t = v.read().map_err(|e| (RUN_FAILED, e.to_string()))?;
        let bytes = native_bytes(&t);
        if Ok(bytes.len()) != byte_size(&v.ty) {
            return Err((RUN_FAILED, format!("variable '{name}' holds {} where it is declared {}", t.ty(), v.ty)));
        }
        // SAFETY: the caller's contract: `out` holds the variable's byte size, which `bytes`
        // has.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
        Ok(())
    })
}

/// Sets variable `name` from the bytes at `value` (its byte size, from the header).
///
/// # Safety
/// `ctx` a live context, `name` NUL-terminated, `value` valid for reads of the variable's size.
#[no_mangle]
pub unsafe extern "C" fn graphc_aot_write_variable(ctx: *mut Ctx, name: *const c_char, value: *const u8) -> c_int {
    if ctx.is_null() || name.is_null() || value.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract.
    let (ctx, name) = unsafe { (&mut *ctx, CStr::from_ptr(name).to_string_lossy()) };
    on_variable(ctx, &name, |v| {
        let n = byte_size(&v.ty).map_err(|e| (INVALID_ARGUMENT, e))?;
        // SAFETY: the caller's contract: `value` holds the variable's byte size.
        let bytes = unsafe { std::slice::from_raw_parts(value, n) };
        let t = tensor(&v.ty, bytes).map_err(|e| (INVALID_ARGUMENT, e))?;
        v.assign(Some(Arc::new(t))).map_err(|e| (RUN_FAILED, e.to_string()))
    })
}

/// Runs `f` on variable `name` of the context: 0, or the failure's status with its message
/// kept in the context (no such variable: `INVALID_ARGUMENT`; a panic: `INTERNAL`).
fn on_variable(ctx: &mut Ctx, name: &str, f: impl FnOnce(&Variable) -> Result<(), (c_int, String)>) -> c_int {
    guard(INTERNAL, || {
        let result =
            ctx.session.state().variable(name).map_err(|e| (INVALID_ARGUMENT, e.to_string())).and_then(|v| f(v));
        match result {
            Ok(()) => OK,
            Err((status, message)) => ctx.fail(status, message),
        }
    })
}
