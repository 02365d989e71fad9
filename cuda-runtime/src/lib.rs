//! graphc-cuda-runtime: the run half of the CUDA backend. Generated kernels are PTX entry
//! points over a `[rows, cols]` view of f32 buffers; this crate loads their PTX through the
//! CUDA driver and runs them on device 0, copying operands in and results out.
//!
//! The driver library is looked for at run time (cudarc's dynamic loading), never linked:
//! everything builds without CUDA, and on a machine without a driver or a device
//! [`available`], [`load`] and every kernel return an error, never panic or abort.
//!
//! A kernel runs two ways. As a [`graphc_runtime::Kernel`] on host tensors, it copies its
//! operands in and its results back on every call. As a [`graphc_runtime::DeviceKernel`],
//! under an executor that keeps a partition's tensors on the GPU
//! ([`graphc_runtime::InterpExecutor::on_device`] with [`CudaDevice`]), it reads and writes
//! [`GpuTensor`]s that stay in device memory between kernels.

mod device;
mod kernel;
mod tensor;

pub use device::{available, load, GpuCode, THREADS_PER_BLOCK};
pub use kernel::{GpuInput, GpuLoopKernel, Threads};
pub use tensor::{CudaDevice, GpuTensor};
