//! The bundle: what `graphc compile` puts into an object file beside the kernels' code, and
//! the one thing the object hands this library. Its C layout is [`Bundle`]; its contents are
//! the optimized module as IR text (weights stripped out, [`crate::weights`]), the weights
//! (safetensors, or the name of a file holding them), a manifest that pairs each compiled node
//! with its functions and the extents they were generated for, and the table of function
//! addresses the linker fills in.

use graphc_cpu_runtime::Extents;
use serde::{Deserialize, Serialize};

/// The bundle layout's version (with the entry points' and kernels' calling conventions): an
/// object written for another is refused.
pub const ABI_VERSION: u64 = 1;

/// This build's fingerprint (build.rs: the version and a hash of the sources compiled programs
/// and this library must agree on). The manifest records the compiler's; the library refuses
/// another.
pub const FINGERPRINT: &str = env!("GRAPHC_AOT_FINGERPRINT");

/// A kernel plan's hash (of its full description), which the manifest records and the library
/// compares with the plan it re-derives.
pub fn plan_hash(plan: &graphc_plan::KernelPlan) -> String {
    use crate::fnv::{fnv1a, FNV_OFFSET};
    format!("{:016x}", fnv1a(FNV_OFFSET, format!("{plan:?}").as_bytes()))
}

/// The symbols of this library that generated entry points call, and the names `graphc
/// compile` gives what it generates.
pub mod symbols {
    /// `graphc_aot_create(bundle, graph_index, weights_path) -> ctx`.
    pub const CREATE: &str = "graphc_aot_create";
    /// `graphc_aot_create_sharing(bundle, graph_index, other_ctx) -> ctx`.
    pub const CREATE_SHARING: &str = "graphc_aot_create_sharing";
    /// `graphc_aot_main(argc, argv, bundle) -> exit status`, the executable's `main`.
    pub const MAIN: &str = "graphc_aot_main";
    use crate::bundle::Ret;

    /// Per graph, `NAME_` + each of these forwards to `graphc_aot_` + it: (name, its
    /// arguments, all pointers; what it returns).
    pub const FORWARDED: [(&str, usize, Ret); 5] = [
        ("destroy", 1, Ret::Void),
        ("run", 3, Ret::Int),
        ("error_message", 1, Ret::Pointer),
        ("read_variable", 3, Ret::Int),
        ("write_variable", 3, Ret::Int),
    ];
}

/// What an entry point returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    Void,
    /// A C `int`: 0 or an error status.
    Int,
    Pointer,
}

/// The bundle as the object lays it out: nine 64-bit words (pointers are 64-bit on every
/// target graphc compiles for).
#[repr(C)]
#[derive(Debug)]
pub struct Bundle {
    pub abi: u64,
    pub manifest: *const u8,
    pub manifest_len: u64,
    pub module: *const u8,
    pub module_len: u64,
    pub weights: *const u8,
    pub weights_len: u64,
    pub functions: *const *const u8,
    pub function_count: u64,
}

/// What the bundle says of its module beyond the IR text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The compiler's [`FINGERPRINT`].
    pub fingerprint: String,
    /// The name the program was compiled from (for messages).
    pub source: String,
    /// The graphs with C entry points, in the order `graph_index` counts them.
    pub graphs: Vec<String>,
    /// Every kernel of the module in the order of `graphc_plan::kernels`, which the library
    /// re-derives from the IR and checks against this.
    pub kernels: Vec<KernelRecord>,
    /// Where the weights are when they are not in the object: `--weights-file`'s path, made
    /// absolute.
    pub weights_file: Option<String>,
    /// The keys the weights hold (`crate::weights`): any weights given must hold exactly these.
    pub weights: Vec<String>,
}

/// One compiled node and its generated functions (none for a lone matrix product or a column
/// reduction; one for a loop or a product's epilogue).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelRecord {
    pub graph: String,
    /// The node's index in its graph's arena, as the parser numbers the module's text.
    pub node: u32,
    /// [`plan_hash`] of its plan.
    pub plan: String,
    /// The function's index in the bundle's table and the extents its code was generated for.
    pub code: Option<(usize, Extents)>,
}
