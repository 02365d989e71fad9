//! The reference interpreter as a backend: the module as written, every node on its plain
//! kernel.

use super::{Backend, CompileOptions, Compiled};
use graphc_ir::Module;

#[derive(Debug)]
pub struct Interp;

impl Backend for Interp {
    fn name(&self) -> &'static str {
        "interp"
    }
    fn description(&self) -> &'static str {
        "The reference interpreter: every op's plain kernel, one node at a time"
    }
    fn pipeline(&self) -> &'static str {
        ""
    }
    fn compile_with(&self, _: &Module, _: &CompileOptions) -> Result<Compiled, String> {
        Ok(Compiled::default())
    }
}
