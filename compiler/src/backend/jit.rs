//! The Cranelift JIT as a backend: the default pipeline (fused kernels), then the CPU
//! backend's kernels (`crate::lower::cpu`); other nodes run in the interpreter.

use super::{Backend, CompileOptions, Compiled};
use graphc_ir::Module;

#[derive(Debug)]
pub struct Jit;

impl Backend for Jit {
    fn name(&self) -> &'static str {
        "jit"
    }
    fn description(&self) -> &'static str {
        "The default pass pipeline, then elementwise kernels JIT-compiled with Cranelift (other nodes run in the interpreter)"
    }
    fn pipeline(&self) -> &'static str {
        crate::passes::DEFAULT_PIPELINE
    }
    fn compile_with(&self, m: &Module, options: &CompileOptions) -> Result<Compiled, String> {
        let kernels = super::cranelift(m, options)?;
        Ok(Compiled::cpu(kernels, std::time::Duration::ZERO, None))
    }
}
