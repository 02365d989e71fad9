//! Dead code elimination: removes pure ops none of whose results is used. Stateful ops,
//! communication and control flow holding either always stay, and so do ops used only through
//! `after` lists (a control use is a use).

use super::manager::Pass;
use super::rewrite::remove_dead;
use graphc_ir::Graph;

#[derive(Debug)]
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        remove_dead(g)
    }
}
