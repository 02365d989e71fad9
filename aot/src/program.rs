//! A compiled program loaded from its bundle: the module (parsed, weights put back, verified)
//! and the kernel table of its compiled nodes, each running the object's code for the plan it
//! was generated from. The only unsafe code that touches generated code lives here, and it
//! rests on one check: the plan the library re-derives from the module has exactly the
//! extents the code was generated for (recorded in the manifest by the compiler).
#![allow(unsafe_code)]

use crate::bundle::{plan_hash, Bundle, KernelRecord, Manifest, ABI_VERSION, FINGERPRINT};
use crate::weights;
use graphc_cpu_runtime::{describe, Entry, KernelFn};
use graphc_ir::{Module, Node, Severity};
use graphc_runtime::KernelTable;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A program ready to make sessions of.
#[derive(Debug)]
pub struct Program {
    pub manifest: Manifest,
    pub module: Module,
    pub kernels: Arc<KernelTable>,
}

/// The bundle's parts as byte slices.
struct Parts<'a> {
    manifest: &'a [u8],
    module: &'a [u8],
    weights: &'a [u8],
    functions: &'a [*const u8],
}

/// The slices a bundle points to.
///
/// # Safety
/// `b` must be a bundle `graphc compile` wrote (each pointer valid for its length, or null
/// with length 0), alive for `'a`.
unsafe fn parts<'a>(b: &'a Bundle) -> Result<Parts<'a>, String> {
    if b.abi != ABI_VERSION {
        return Err(format!(
            "the program's bundle has layout version {}, this library reads version {ABI_VERSION}: link the program against the libgraphc_aot.a of the graphc that compiled it",
            b.abi
        ));
    }
    unsafe fn slice<'a, T>(p: *const T, n: u64) -> &'a [T] {
        if n == 0 || p.is_null() {
            &[]
        } else {
            // SAFETY: the caller's contract: `p` is valid for `n` elements for 'a.
            unsafe { std::slice::from_raw_parts(p, n as usize) }
        }
    }
    // SAFETY: as the function's contract says.
    unsafe {
        Ok(Parts {
            manifest: slice(b.manifest, b.manifest_len),
            module: slice(b.module, b.module_len),
            weights: slice(b.weights, b.weights_len),
            functions: slice(b.functions, b.function_count),
        })
    }
}

impl Program {
    /// Loads the program of bundle `b`, its weights from the bundle, or from `weights_path`
    /// (else the file the manifest names) when they were compiled into a file of their own.
    ///
    /// # Safety
    /// `b` must be a bundle `graphc compile` wrote, linked with this library: its pointers
    /// valid for their lengths as long as the process runs (the object's read-only data), its
    /// functions the code generated for the manifest's kernels.
    pub unsafe fn load(b: &'static Bundle, weights_path: Option<&Path>) -> Result<Program, String> {
        // SAFETY: the caller's contract.
        let parts = unsafe { parts(b)? };
        let manifest: Manifest =
            serde_json::from_slice(parts.manifest).map_err(|e| format!("the program's manifest is not valid: {e}"))?;
        if manifest.fingerprint != FINGERPRINT {
            return Err(format!(
                "{} was compiled by another graphc (build {}) than this run-time library's ({FINGERPRINT}): link it against the libgraphc_aot.a of the graphc that compiled it",
                manifest.source, manifest.fingerprint
            ));
        }
        let text = std::str::from_utf8(parts.module).map_err(|e| format!("the program's module is not UTF-8: {e}"))?;
        let mut module = graphc_ir::parse_module(text).map_err(|d| {
            let first = d.first().map(|d| d.message.clone()).unwrap_or_default();
            format!("the program's module does not parse: {first}")
        })?;
        let external;
        let blob: &[u8] = match &manifest.weights_file {
            None if weights_path.is_some() => {
                return Err(format!("{}'s weights are in the program, not in a file of their own", manifest.source))
            }
            None => parts.weights,
            Some(name) => {
                let path = weights_path.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(name));
                external = graphc_runtime::fsutil::read_regular(&path, "a weights file")
                    .map_err(|e| format!("weights: {e}"))?;
                &external
            }
        };
        weights::restore(&mut module, blob, &manifest.weights)?;
        if let Some(d) = graphc_ir::verify_module(&module).iter().find(|d| d.severity == Severity::Error) {
            return Err(format!("the program's module does not verify: {}", d.message));
        }
        // SAFETY: the caller's contract: the functions are the code of these kernels.
        let kernels = unsafe { kernel_table(&module, &manifest.kernels, parts.functions)? };
        Ok(Program { manifest, module, kernels })
    }
}

/// The kernel table of `module`: each kernel of its plans with the function its record names,
/// after checking that the plan re-derived here is the one the code was generated for.
///
/// # Safety
/// Each `functions[i]` must be the code generated for the record that names `i`, from a plan
/// with the record's extents.
unsafe fn kernel_table(
    module: &Module,
    records: &[KernelRecord],
    functions: &[*const u8],
) -> Result<Arc<KernelTable>, String> {
    let plans = graphc_plan::kernels(module);
    if plans.len() != records.len() {
        return Err(format!("the program's module plans {} kernels where its code has {}", plans.len(), records.len()));
    }
    let table = Arc::new(KernelTable::new());
    // The code is the program's own text section: it stays mapped as long as the process.
    let owner: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
    for (k, r) in plans.into_iter().zip(records) {
        if k.graph != r.graph || k.node != Node::from_u32(r.node) {
            return Err(format!("the program's kernel for node {} of @{} is planned elsewhere", r.node, r.graph));
        }
        if plan_hash(&k.plan) != r.plan {
            return Err(format!("the code of @{}'s node {} was generated for another plan", r.graph, r.node));
        }
        let entry = match (&r.code, k.plan.code()) {
            (Some((f, extents)), Some(plan)) => {
                if describe::extents(plan) != *extents {
                    return Err(format!("the code of @{}'s node {} was generated for another plan", r.graph, r.node));
                }
                let p = *functions.get(*f).ok_or_else(|| format!("the program has no function {f}"))?;
                if p.is_null() {
                    return Err(format!("the program's function {f} is null"));
                }
                // SAFETY: `p` is the generated code for this plan (the caller's contract),
                // whose extents were just checked to be the plan's: `Entry::new`'s contract
                // holds as it does for the JIT's code; the code is never unmapped.
                Some(unsafe {
                    Entry::new(std::mem::transmute::<*const u8, KernelFn>(p), extents.clone(), owner.clone())
                })
            }
            (None, None) => None,
            _ => return Err(format!("the code of @{}'s node {} does not match its plan", r.graph, r.node)),
        };
        table.replace(&k.graph, k.node, Arc::new(describe::kernel(&k.plan, entry)?));
    }
    Ok(table)
}

/// The weights file the bundle's manifest names, if it names one.
///
/// # Safety
/// As for [`Program::load`].
pub unsafe fn weights_file(b: &Bundle) -> Option<String> {
    // SAFETY: the caller's contract.
    let parts = unsafe { parts(b) }.ok()?;
    serde_json::from_slice::<Manifest>(parts.manifest).ok()?.weights_file
}
