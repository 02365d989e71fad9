//! Backends: IR to native code. `cpu` JIT-compiles kernels with Cranelift.

pub mod cpu;
