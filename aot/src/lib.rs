//! graphc-aot: the run-time library of programs `graphc compile` writes. The compiler puts a
//! [`bundle::Bundle`] into the object (the optimized module as IR text, its weights, a
//! manifest, the addresses of its kernels) and C entry points that hand it here; this library
//! loads it into a runtime session whose compiled nodes run the object's code and whose other
//! nodes run the reference kernels. It holds the IR parser, the plans, the runtime and the CPU
//! backend's run half, never the compiler: no code is generated at run time.
//!
//! - `bundle.rs`: the bundle's C layout and manifest (shared with the compiler);
//! - `weights.rs`: weights out of the IR text into safetensors bytes, and back;
//! - `program.rs`: a bundle loaded and checked: module, kernels (the one place that makes
//!   entry points of the object's code);
//! - `capi.rs`: `graphc_aot_create`, `_run`, `_destroy`, `_error_message`, `_read_variable`,
//!   `_write_variable`, which each graph's `NAME_*` functions call;
//! - `exe.rs`: `graphc_aot_main`, an executable's command line.

pub mod bundle;
pub mod capi;
pub mod exe;
mod fnv;
pub mod program;
pub mod weights;

pub use bundle::{Bundle, KernelRecord, Manifest};
pub use program::Program;
