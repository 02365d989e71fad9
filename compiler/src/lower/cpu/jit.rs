//! The JIT half of the CPU backend's compile side: kernels emitted into a `JITModule`, linked
//! in memory, and handed to the run half as entry points. The only unsafe code of the
//! compiler: turning the finalized code into callable functions, and freeing it.
#![allow(unsafe_code)]

use super::codegen::{host_isa, Emitter};
use super::CompileOptions;
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId};
use graphc_cpu_runtime::{Entry, KernelFn};
use std::collections::HashMap;
use std::sync::Arc;

/// An emitter into a JIT module for the host (less what `options.isa` leaves out), with the
/// math symbols resolved to the run half's functions.
pub fn emitter(options: &CompileOptions) -> Result<Emitter<JITModule>, String> {
    let mut jb = JITBuilder::with_isa(host_isa(options.isa, false)?, default_libcall_names());
    for (name, _, ptr) in graphc_cpu_runtime::math::symbols() {
        jb.symbol(name, ptr);
    }
    Emitter::new(JITModule::new(jb), options.listings)
}

/// Links every kernel the emitter defined; returns each kernel's entry point, with the
/// extents of the plan it was generated from. The entries share the code, which is freed
/// when the last of them is dropped.
pub fn link(emitter: Emitter<JITModule>) -> Result<HashMap<FuncId, Entry>, String> {
    let (mut m, defined) = emitter.finish();
    m.finalize_definitions().map_err(|e| e.to_string())?;
    let pointers: Vec<(FuncId, *const u8)> =
        defined.iter().map(|&(id, _)| (id, m.get_finalized_function(id))).collect();
    let code: Arc<JitCode> = Arc::new(JitCode(Some(m)));
    Ok(defined
        .into_iter()
        .zip(pointers)
        .map(|((id, extents), (_, p))| {
            // SAFETY: `p` is a function Cranelift generated with exactly `KernelFn`'s
            // signature (codegen.rs: two pointers, two i64, a pointer, no result, the
            // platform's C convention), for the plan whose extents `Emitter::define` recorded
            // with it; codegen.rs's loops touch nothing beyond those extents on rows within
            // them, write every output element of their rows, and keep no state, so calls on
            // disjoint rows may run at once. `code` keeps it mapped as long as the entry lives.
            let entry = unsafe {
                let f = std::mem::transmute::<*const u8, KernelFn>(p);
                Entry::new(f, extents, code.clone())
            };
            (id, entry)
        })
        .collect())
}

/// The JIT module, which owns the code's memory. It is never touched after linking until it
/// is dropped, so sharing it between threads is sound.
struct JitCode(Option<JITModule>);

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the only pointers into this code are the `Entry`s made with it, each of
            // which holds this owner; it drops when the last of them has, so no kernel runs
            // now or can run again.
            unsafe { m.free_memory() }
        }
    }
}

// SAFETY: see `JitCode`: the module is only kept for its memory and freed by its drop.
unsafe impl Send for JitCode {}
unsafe impl Sync for JitCode {}
