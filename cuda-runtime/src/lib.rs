//! graphc-cuda-runtime: the run half of the CUDA backend. Generated kernels are PTX entry
//! points over a `[rows, cols]` view of f32 buffers; this crate loads their PTX through the
//! CUDA driver and runs them on device 0, copying operands in and results out.
//!
//! The driver library is looked for at run time (cudarc's dynamic loading), never linked:
//! everything builds without CUDA, and on a machine without a driver or a device
//! [`available`], [`load`] and every kernel return an error, never panic or abort.
//!
//! For now each kernel call allocates its device buffers, copies its inputs in and its
//! results back, and frees them: the tensors of a session stay on the host. A device-resident
//! executor (tensors kept on the GPU, copied only at send/recv) comes later.

mod device;
mod kernel;

pub use device::{available, load, GpuCode, THREADS_PER_BLOCK};
pub use kernel::{GpuInput, GpuLoopKernel, Threads};
