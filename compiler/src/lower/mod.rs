//! Lowering the IR to code. `plan` is the target-neutral analysis of which nodes become kernels
//! and what each computes over which buffers; `cpu` is the Cranelift backend's compile half
//! (its run half is the crate `graphc-cpu-runtime`).

pub mod cpu;
pub mod erf;
pub mod mlir;
/// The plans live in their own crate, which AOT programs link to re-derive their kernels.
pub use graphc_plan as plan;
