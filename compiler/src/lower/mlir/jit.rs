//! MLIR kernels (`emit.rs`'s text) lowered through MLIR's upstream passes to the LLVM dialect
//! and JIT-compiled by MLIR's ExecutionEngine (LLVM's ORC JIT, for the host CPU and its
//! features, at -O3), then handed to the run half as entry points. With `jit.rs` of the
//! Cranelift half, the only unsafe code of the compiler: creating the engine, looking up
//! its functions, and destroying it.
#![allow(unsafe_code)]

use graphc_cpu_runtime::{Entry, Extents, KernelFn};
use melior::dialect::DialectRegistry;
use melior::ir::Module;
use melior::pass::PassManager;
use melior::utility::{
    parse_pass_pipeline, register_all_dialects, register_all_llvm_translations, register_all_passes,
};
use melior::Context;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Once};

/// From `emit.rs`'s dialects to the LLVM dialect.
pub const PIPELINE: &str = "builtin.module(canonicalize,cse,convert-scf-to-cf,convert-vector-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)";

/// Compiles `text` (a module of kernels) and returns, for each `(name, extents)`, the entry
/// point of the kernel of that name, generated from the plan of those extents. The entries
/// share the code, which is freed when the last of them is dropped.
pub fn compile(text: &str, kernels: &[(String, Extents)]) -> Result<Vec<Entry>, String> {
    with_context(|context, said| {
        let mut module = Module::parse(context, text).ok_or_else(|| said("MLIR does not parse the kernels"))?;
        let pm = PassManager::new(context);
        parse_pass_pipeline(pm.as_operation_pass_manager(), PIPELINE).map_err(|e| e.to_string())?;
        pm.run(&mut module).map_err(|_| said("lowering the kernels to the LLVM dialect failed"))?;
        if !module.as_operation().verify() {
            return Err(said("the lowered kernels do not verify"));
        }
        let engine = Engine::new(&module).ok_or_else(|| said("LLVM cannot compile the kernels"))?;
        link(engine, kernels)
    })
}

/// Runs `f` with an MLIR context that has every dialect, pass and LLVM translation, and a
/// function that adds the diagnostics MLIR has reported so far to an error message (MLIR
/// reports problems as diagnostics, printed to stderr unless handled).
pub fn with_context<T>(f: impl FnOnce(&Context, &dyn Fn(&str) -> String) -> Result<T, String>) -> Result<T, String> {
    static PASSES: Once = Once::new();
    PASSES.call_once(register_all_passes);
    let registry = DialectRegistry::new();
    register_all_dialects(&registry);
    let context = Context::new();
    context.append_dialect_registry(&registry);
    context.load_all_available_dialects();
    register_all_llvm_translations(&context);
    let diagnostics = Rc::new(RefCell::new(Vec::<String>::new()));
    let sink = diagnostics.clone();
    let handler = context.attach_diagnostic_handler(move |d| {
        sink.borrow_mut().push(format!("{}: {d}", d.location()));
        true
    });
    let said = |what: &str| {
        let d = diagnostics.borrow();
        if d.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {}", d.join("; "))
        }
    };
    let result = f(&context, &said);
    context.detach_diagnostic_handler(handler);
    result
}

/// Registers the run half's math functions with the engine and looks every kernel up.
fn link(engine: Engine, kernels: &[(String, Extents)]) -> Result<Vec<Entry>, String> {
    for (name, _, ptr) in graphc_cpu_runtime::math::symbols() {
        let name = melior::StringRef::new(name);
        // SAFETY: the engine is live; the pointer is a function of the process that lives as
        // long as it (a `no_mangle` function of the run half).
        unsafe { mlir_sys::mlirExecutionEngineRegisterSymbol(engine.0, name.to_raw(), ptr as *mut _) };
    }
    let code = Arc::new(engine);
    kernels
        .iter()
        .map(|(name, extents)| {
            let symbol = melior::StringRef::new(name);
            // SAFETY: the engine is live; a name it does not define gives null (checked),
            // never an abort (only the packed `_mlir_ciface_` wrappers would).
            let p = unsafe { mlir_sys::mlirExecutionEngineLookup(code.0, symbol.to_raw()) };
            if p.is_null() {
                return Err(format!("the compiled kernels lack {name}"));
            }
            // SAFETY: `p` is `emit.rs`'s function `name`, whose signature is `KernelFn`'s
            // (`!llvm.ptr, !llvm.ptr, i64, i64, !llvm.ptr` and no result, which the
            // func-to-LLVM conversion keeps as the C convention's two pointers, two i64 and
            // a pointer), generated from the plan whose extents are `extents`: its loops
            // touch nothing beyond those extents on rows within them (the same loads and
            // stores `cpu/codegen.rs` makes), write every output element of their rows, and
            // keep no state, so calls on disjoint rows may run at once. `code` keeps it
            // mapped as long as the entry lives.
            Ok(unsafe {
                let f = std::mem::transmute::<*mut std::ffi::c_void, KernelFn>(p);
                Entry::new(f, extents.clone(), code.clone())
            })
        })
        .collect()
}

/// An ExecutionEngine, which owns the compiled code. Nothing touches it after linking until
/// it is dropped, so sharing it between threads is sound.
struct Engine(mlir_sys::MlirExecutionEngine);

impl Engine {
    /// The module JIT-compiled at -O3 for the host, or None where LLVM cannot translate it.
    fn new(module: &Module) -> Option<Engine> {
        // SAFETY: the module is live and in the LLVM dialect; the engine translates it to
        // LLVM IR now and keeps nothing of it.
        let raw = unsafe { mlir_sys::mlirExecutionEngineCreate(module.to_raw(), 3, 0, std::ptr::null(), false) };
        (!raw.ptr.is_null()).then_some(Engine(raw))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: the only pointers into this code are the `Entry`s made with it, each of
        // which holds this owner; it drops when the last of them has, so no kernel runs now
        // or can run again.
        unsafe { mlir_sys::mlirExecutionEngineDestroy(self.0) }
    }
}

// SAFETY: see `Engine`: the engine is only kept for its code and destroyed by its drop.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}
