//! Tiered compilation: the Cranelift kernels at once, and the LLVM tier's in the background,
//! each replacing its Cranelift kernel in the table when ready, so no step waits on LLVM.

use super::tier::{Background, TierDone};
use super::{Backend, CompileOptions, Compiled};
use crate::lower::mlir;
use graphc_ir::Module;

#[derive(Debug)]
pub struct Auto;

impl Backend for Auto {
    fn name(&self) -> &'static str {
        "auto"
    }
    fn description(&self) -> &'static str {
        "Tiered: Cranelift's kernels at once, replaced one by one by the LLVM tier's as it compiles them in the background"
    }
    fn pipeline(&self) -> &'static str {
        crate::passes::DEFAULT_PIPELINE
    }
    fn compile_with(&self, m: &Module, options: &CompileOptions) -> Result<Compiled, String> {
        let kernels = super::cranelift(m, options)?;
        // An instruction set the LLVM tier cannot keep to (--isa sse): Cranelift's alone.
        let background = mlir::lanes_for(options.isa).ok().map(|lanes| {
            let (m, table) = (m.clone(), kernels.table().clone());
            Background::spawn("llvm", move || {
                table.name_tier("llvm");
                let tier = mlir::compile_into(&m, &table, lanes)?;
                Ok(TierDone { count: tier.count, compile_time: tier.compile_time })
            })
        });
        Ok(Compiled::cpu(kernels, std::time::Duration::ZERO, background))
    }
}
