//! graphc-runtime: tensors, the reference interpreter, sessions, checkpoints.
//!
//! The reference interpreter is the oracle every compiled path is tested against: each op has
//! a plain kernel in [`kernels`] written for clarity, and [`Session`] runs graphs with the
//! execution model of the IR — partial execution by feeds, fetches and targets; variables and
//! queues held by the session and shared by concurrent runs; structured control flow; send and
//! recv through a per-step rendezvous.
//!
//! Three seams let other code take part without this crate knowing it: an [`Executor`] runs
//! one graph's part of a step in place of the interpreter ([`Session::set_executor`]); a
//! [`Rendezvous`], made per step by a [`RendezvousFactory`] ([`Session::set_rendezvous`]),
//! carries send/recv; a [`KernelTable`] holds compiled kernels that can be replaced while
//! sessions run them. A [`Device`] with memory of its own, and kernels that run there
//! ([`DeviceKernel`]), let the interpreter keep a partition's tensors in that memory
//! ([`InterpExecutor::on_device`]).
//!
//! This crate depends on the IR only; the compiler depends on it, never the reverse.

pub mod budget;
pub mod checkpoint;
mod compiled;
mod constants;
mod device;
mod error;
mod exec;
mod executor;
pub mod feeds;
mod frames;
pub mod fsutil;
pub mod kernels;
pub mod limits;
mod liveness;
pub mod npy;
mod optimizer;
pub mod outputs;
mod pool;
pub mod random;
mod rendezvous;
mod session;
pub mod state;
pub mod tensor;
mod threads;
mod value;
mod wait;

pub use compiled::{CompiledKernels, Kernel, KernelTable, Operands};
pub use constants::ConstantCache;
pub use device::{Device, DeviceKernel, DeviceTensor, Residency, Transfers};
pub use error::{ErrorKind, RunError};
pub use exec::InterpExecutor;
pub use executor::{ExecContext, ExecOutput, Executor, NodeEvent, Ran, MAX_EVENTS};
pub use pool::{BufferPool, PoolStats};
pub use rendezvous::{rendezvous_key, LocalRendezvous, LocalRendezvousFactory, Rendezvous, RendezvousFactory};
pub use session::{RunOutput, RunRequest, Session, SessionOptions};
pub use tensor::Tensor;
pub use threads::{may_split, PARALLEL_ELEMENTS, PARALLEL_FLOPS};
pub use value::RtValue;
pub use wait::WaitCtx;
