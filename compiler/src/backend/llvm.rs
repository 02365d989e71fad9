//! The LLVM tier as a backend: the default pipeline, then the Cranelift kernels, each replaced
//! by its MLIR/LLVM kernel (`crate::lower::mlir`) before the first step (`auto` compiles
//! them in the background instead).

use super::{Backend, CompileOptions, Compiled};
use crate::lower::mlir;
use graphc_ir::Module;

#[derive(Debug)]
pub struct Llvm;

impl Backend for Llvm {
    fn name(&self) -> &'static str {
        "llvm"
    }
    fn description(&self) -> &'static str {
        "The default pass pipeline, then elementwise kernels lowered through MLIR to LLVM with the host's widest vectors (Cranelift's where MLIR cannot write one; other nodes run in the interpreter)"
    }
    fn pipeline(&self) -> &'static str {
        crate::passes::DEFAULT_PIPELINE
    }
    fn compile_with(&self, m: &Module, options: &CompileOptions) -> Result<Compiled, String> {
        let kernels = super::cranelift(m, options)?;
        let lanes = mlir::lanes_for(options.isa)?;
        kernels.table().name_tier("llvm");
        let tier = mlir::compile_into(m, kernels.table(), lanes)?;
        Ok(Compiled::cpu(kernels, tier.compile_time, None))
    }
}
