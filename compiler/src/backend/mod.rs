//! Backends behind one trait, in a registry as the passes are: each has a name (`--backend
//! NAME`), the pass pipeline it runs before compiling, and a compile step that turns a module
//! into kernels a session runs in place of the reference kernels, with [`CompileOptions`]
//! (the instruction set, and what to keep of each kernel: `--isa`, `--dump-code`).
//!
//! A graph placed on a device runs through the [`Executor`] its backend gives for that device
//! ([`Backend::executor`]), by default the interpreter with the backend's kernels. Passes that
//! depend on what a backend compiles (fusion, placement) ask it through their `PassContext`
//! ([`Backend::fuses`], [`Backend::accepts`]) rather than asking a lowering themselves.
//!
//! Every backend runs [`LOWERINGS`] first, the interpreter included: lowerings that are part
//! of a module's meaning (`autodiff`: every `grad` expanded into its adjoint graph). A backend's kernels come
//! as a `CompiledKernels` for the whole module, looked up node by node, so a later tier can
//! replace them one kernel at a time in a live session.

#[cfg(feature = "llvm")]
mod auto;
#[cfg(feature = "llvm")]
mod cuda;
mod interp;
mod jit;
#[cfg(feature = "llvm")]
mod llvm;
mod tier;

use graphc_ir::{DeviceKind, DeviceSpec, Graph, Module, Node, Op};
use graphc_runtime::{CompiledKernels, Executor, KernelTable};
use std::sync::Arc;
use std::time::Duration;

pub use crate::lower::cpu::{CompileOptions, Isa, Listing, Listings};
#[cfg(feature = "llvm")]
pub use auto::Auto;
#[cfg(feature = "llvm")]
pub use cuda::Cuda;
pub use interp::Interp;
pub use jit::Jit;
#[cfg(feature = "llvm")]
pub use llvm::Llvm;
pub use tier::{Background, TierDone};

/// Lowerings every backend runs before its own pipeline (a pass pipeline; empty: none).
pub const LOWERINGS: &str = "autodiff";

/// A way to run modules.
pub trait Backend: Sync + std::fmt::Debug {
    /// The name `--backend` takes.
    fn name(&self) -> &'static str;
    /// One line for `--help` and errors.
    fn description(&self) -> &'static str;
    /// The passes it runs after [`LOWERINGS`] and before compiling (empty: none).
    fn pipeline(&self) -> &'static str;
    /// Compiles a module (after its pipeline, placement and partitioning) into kernels with
    /// `options`; an error when this host or module cannot be compiled (callers may fall back
    /// to the interpreter, which runs every node). Backends without code ignore the options.
    fn compile_with(&self, m: &Module, options: &CompileOptions) -> Result<Compiled, String>;

    /// [`Backend::compile_with`] the default options: the host's instruction set, no listings.
    fn compile(&self, m: &Module) -> Result<Compiled, String> {
        self.compile_with(m, &CompileOptions::default())
    }

    /// The executor for a graph placed on `device` (a partition; `None`: a graph none of
    /// whose nodes is placed), or `None` for the session's default: the interpreter running
    /// this backend's kernels. A backend whose device keeps tensors in its own memory (a GPU)
    /// returns its own, which copies only where the host must see a value (send, fetch).
    fn executor(&self, _device: Option<&DeviceSpec>, _compiled: &Compiled) -> Option<Arc<dyn Executor>> {
        None
    }

    /// The kind of device that runs node `n` of `g` (a top-level node of a graph it
    /// compiled), so that a profile records the node's time as that kind's: the host's CPU,
    /// unless this backend runs the node elsewhere.
    fn runs_on(&self, _g: &Graph, _n: Node) -> DeviceKind {
        DeviceKind::Cpu
    }

    /// Whether this backend's fused kernels compute elementwise op `op`: the fuse pass groups
    /// only those, since one they do not would keep its whole group off compiled code. By
    /// default, the ops a loop plan takes.
    fn fuses(&self, op: Op) -> bool {
        crate::lower::plan::supported(op)
    }

    /// Whether this backend's fused kernels read node `n` (a `slice`, a `gather` of one
    /// constant index) as a view of its operand, not a copy: the fuse pass then groups it with
    /// the elementwise ops that read it, where the group's loop reads the view through its
    /// strides (`plan::view_fits`). By default, any view a loop plan takes, except on a node
    /// placed on a GPU, whose kernels read no views.
    fn fuses_view(&self, g: &Graph, n: Node) -> bool {
        let gpu = g.nodes[n].device.as_ref().is_some_and(|d| matches!(d.device, Some((DeviceKind::Gpu, _))));
        !gpu && crate::lower::plan::view(g, n).is_some()
    }

    /// Whether a device of kind `kind` runs node `n` of `g` (with a kernel, or needing none),
    /// or why not: placement admits a node only to the devices that do. By default a CPU runs
    /// every node and a GPU what the GPU's kernels run (`gpu_runs`: by dtypes, shapes and what
    /// a fusion holds), so placement gives a device spec's GPUs the work the cuda backend
    /// would run there, whichever backend runs the module.
    fn accepts(&self, kind: DeviceKind, g: &Graph, n: Node) -> Result<(), String> {
        match kind {
            DeviceKind::Cpu => Ok(()),
            DeviceKind::Gpu => crate::lower::mlir::gpu_runs(g, n),
        }
    }
}

/// What a backend made of a module.
#[derive(Debug, Default)]
pub struct Compiled {
    /// Kernels for some nodes; `None` runs every node on the reference kernels.
    pub kernels: Option<Arc<dyn CompiledKernels>>,
    /// Where those kernels are looked up node by node, when the backend keeps them in the
    /// runtime's table: a later tier replaces them there, one at a time, while sessions run.
    pub table: Option<Arc<KernelTable>>,
    /// How many nodes run compiled code.
    pub count: usize,
    pub compile_time: Duration,
    /// What `CompileOptions::listings` asked to keep of each kernel with code, each with the
    /// line that heads its kernel (`graphc::lower::plan::kernel_header`).
    pub listings: Vec<(String, Listing)>,
    /// A faster tier still compiling into `table` (`auto`); dropping it waits for it.
    pub background: Option<Background>,
}

impl Compiled {
    /// The CPU backend's kernels, whose table is where a later tier puts its own, with the
    /// time a tier that replaced some of them before the first step took (`tier`).
    fn cpu(kernels: Arc<crate::lower::cpu::CpuKernels>, tier: Duration, background: Option<Background>) -> Compiled {
        Compiled {
            count: kernels.len(),
            compile_time: kernels.compile_time + tier,
            listings: kernels.listings.clone(),
            table: Some(kernels.table().clone()),
            kernels: Some(kernels),
            background,
        }
    }
}

/// The CPU backend's kernels, compiled by Cranelift, named as their tier in the table (for
/// profiles: a later tier's replace them there under its own name).
fn cranelift(m: &Module, options: &CompileOptions) -> Result<Arc<crate::lower::cpu::CpuKernels>, String> {
    let kernels = crate::lower::cpu::CpuKernels::compile_with(m, options)?;
    kernels.table().name_tier("cranelift");
    Ok(kernels)
}

/// Every backend; the first is the default.
#[cfg(not(feature = "llvm"))]
pub static BACKENDS: &[&dyn Backend] = &[&Jit, &Interp];
/// Every backend; the first is the default.
#[cfg(feature = "llvm")]
pub static BACKENDS: &[&dyn Backend] = &[&Auto, &Jit, &Llvm, &Cuda, &Interp];

/// The default backend's name: tiered where the LLVM tier is built in.
#[cfg(not(feature = "llvm"))]
pub const DEFAULT_BACKEND: &str = "jit";
/// The default backend's name: tiered where the LLVM tier is built in.
#[cfg(feature = "llvm")]
pub const DEFAULT_BACKEND: &str = "auto";

/// The default backend, which passes ask when no backend is named ([`BACKENDS`]' first).
pub fn default_backend() -> &'static dyn Backend {
    BACKENDS[0]
}

/// The backends that need the `llvm` feature (MLIR/LLVM 19), for the error a build without it
/// gives when one is asked for.
pub const LLVM_BACKENDS: [&str; 3] = ["auto", "llvm", "cuda"];

/// The backend of this name; an error listing the known ones, or saying the one named is not
/// built into this graphc.
pub fn backend(name: &str) -> Result<&'static dyn Backend, String> {
    BACKENDS.iter().copied().find(|b| b.name() == name).ok_or_else(|| {
        let known: Vec<&str> = BACKENDS.iter().map(|b| b.name()).collect();
        if LLVM_BACKENDS.contains(&name) {
            return format!(
                "backend '{name}' is not built into this graphc: it needs the llvm feature (`cargo build --release -p graphc --features llvm`, with MLIR 19 from tests/mlir-toolchain.sh); this build has {}",
                known.join(", ")
            );
        }
        let hint = graphc_ir::suggest::closest(name, known.iter().copied())
            .map(|s| format!("did you mean '{s}'? "))
            .unwrap_or_default();
        format!("unknown backend '{name}'; {hint}the backends are {}", known.join(", "))
    })
}
