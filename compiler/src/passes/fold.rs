//! Constant folding: a pure op whose operands are all constants is evaluated with the reference
//! kernels and replaced by constants, when its results are small (at most `LIMIT` elements
//! each). `shape` and `rank` fold always, since shapes are static. An op whose kernel fails
//! (an integer division by zero) is left alone, so the error still happens at run time.

use super::manager::Pass;
use super::rewrite::{constant_of, place_before, regions, remove_dead};
use graphc_ir::{Attr, Graph, Node, NodeSpec, Op, TensorType};
use graphc_runtime::kernels;
use graphc_runtime::Tensor;
use std::collections::HashMap;

/// The most elements a folded result may have.
pub const LIMIT: u64 = 1 << 16;

#[derive(Debug)]
pub struct Fold;

impl Pass for Fold {
    fn name(&self) -> &'static str {
        "fold"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut changed = false;
        for r in regions(g) {
            let mut before: HashMap<Node, Vec<Node>> = HashMap::new();
            for n in g.regions[r].nodes.clone() {
                let Some(values) = evaluate(g, n) else { continue };
                let mut added = Vec::new();
                for (old, t) in g.nodes[n].results.clone().into_iter().zip(values) {
                    let mut spec = NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(t.to_literal()));
                    spec.device = g.nodes[n].device.clone();
                    let c = g.add_node(r, spec).map_err(|e| e.message)?;
                    let new = g.nodes[c].results[0];
                    g.replace_all_uses(old, new);
                    added.push(c);
                }
                before.insert(n, added);
                changed = true;
            }
            place_before(g, r, &before);
        }
        if changed {
            remove_dead(g)?;
        }
        Ok(changed)
    }
}

/// The node's results if it can be folded.
fn evaluate(g: &Graph, n: Node) -> Option<Vec<Tensor>> {
    let nd = &g.nodes[n];
    if !kernels::is_kernel(nd.op) || nd.op == Op::Constant || !nd.control_deps.is_empty() {
        return None;
    }
    let types: Vec<TensorType> =
        nd.results.iter().map(|&v| g.values[v].ty.as_tensor().cloned()).collect::<Option<_>>()?;
    if types.iter().any(|t| t.num_elements().is_none_or(|e| e > LIMIT)) {
        return None;
    }
    if matches!(nd.op, Op::Shape | Op::Rank) {
        let t = g.values[nd.operands[0]].ty.as_tensor()?;
        let shape = t.shape.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let value = if nd.op == Op::Shape {
            Tensor::I64(ndarray::Array1::from(shape).into_dyn())
        } else {
            Tensor::I64(ndarray::arr0(t.rank() as i64).into_dyn())
        };
        return Some(vec![value]);
    }
    // A splat operand's type may be far larger than its text: sizes are checked on the types
    // before any operand is built.
    let small =
        |v: &graphc_ir::Value| g.values[*v].ty.as_tensor().and_then(|t| t.num_elements()).is_some_and(|e| e <= LIMIT);
    if !nd.operands.iter().all(small) {
        return None;
    }
    let inputs: Vec<Tensor> =
        nd.operands.iter().map(|&v| Tensor::from_literal(constant_of(g, v)?).ok()).collect::<Option<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    kernels::eval(nd.op, &nd.attrs, &refs, &types).ok()
}
