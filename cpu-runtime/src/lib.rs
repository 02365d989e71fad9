//! graphc-cpu-runtime: the run half of the CPU backend. Generated kernels are plain functions
//! over rows of f32 buffers; this crate calls them (after checking every buffer against the
//! extents their plan touches), splits their rows across threads, runs matrix products and
//! convolutions (im2col) on the gemm crate's microkernels before a generated epilogue, pools,
//! copies data (transposes, slices, pads, gathers), and provides the math functions the kernels call by symbol.
//!
//! The compile half (`graphc::lower::cpu`) emits code with Cranelift, into a JIT module or an
//! object file, and describes each kernel with a [`LoopKernel`] or [`MatMulKernel`]; nothing
//! here depends on Cranelift or on the compiler, so an AOT-compiled program links this crate
//! (built as a static library) and the graphc runtime, never the compiler.

mod concat;
mod conv;
mod copy;
pub mod describe;
mod entry;
mod kernel;
pub mod math;
mod node;
mod pool;
mod rows;
mod vectors;
mod window;

pub use concat::ConcatKernel;
pub use conv::ConvKernel;
pub use copy::{CopyKernel, GatherKernel};
pub use entry::{matmul, matmul_into, Entry, Extents, In, KernelFn, Product};
pub use kernel::{ColumnKernel, LoopInput, LoopKernel, MatMulKernel};
pub use node::CpuKernel;
pub use pool::PoolKernel;
pub use rows::{row_blocks, PARALLEL_ELEMENTS, PARALLEL_FLOPS};
