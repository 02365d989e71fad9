//! Reverse-mode automatic differentiation as a lowering: every `grad` node is replaced by the
//! adjoint graph of its loss with respect to its operands (TensorFlow's `gradients`, JAX's
//! VJP), built from the forward values it shares. It runs before any backend, the
//! interpreter included (`backend::LOWERINGS`), so `grad` is part of a module's meaning.
//!
//! - `emit.rs`: inserting nodes where the `grad` stood, and the helpers rules share;
//! - `reverse.rs`: the sweep over one region (which nodes lie on a path, adjoints summed);
//! - `rules/`: each op's gradient, laid out like the reference kernels.
//!
//! Gradients of gradients work because the expansion uses only differentiable ops: `grad`s
//! are expanded one at a time, first first, so a later `grad` differentiates an earlier one's
//! expansion.

mod emit;
mod reverse;
mod rules;

use crate::passes::manager::{Pass, PassError};
use crate::placement::passes::PassContext;
use emit::Emit;
use graphc_ir::{Diagnostic, Graph, Module, Node, NodeSpec, Op};

/// The `autodiff` pass. Warnings (a gradient that is zero because the loss does not depend on
/// the value) go to the context's warnings.
#[derive(Debug)]
pub struct Autodiff(pub PassContext);

impl Pass for Autodiff {
    fn name(&self) -> &'static str {
        "autodiff"
    }

    fn run(&self, g: &mut Graph) -> Result<bool, String> {
        let mut warnings = Vec::new();
        let changed = expand_all(g, &mut warnings).map_err(|d| d.flat_message())?;
        self.0.warn(warnings);
        Ok(changed)
    }

    fn run_module(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        let mut warnings = Vec::new();
        for g in &mut m.graphs {
            changed |= expand_all(g, &mut warnings).map_err(|d| PassError {
                message: format!("on @{}: {}", g.name, d.flat_message()),
                diagnostics: vec![d],
                pass: None,
            })?;
        }
        self.0.warn(warnings);
        Ok(changed)
    }
}

/// Expands every `grad` of the graph, in order.
fn expand_all(g: &mut Graph, warnings: &mut Vec<Diagnostic>) -> Result<bool, Diagnostic> {
    let mut changed = false;
    while let Some(n) = g.walk().into_iter().find(|&n| g.nodes[n].op == Op::Grad) {
        expand(g, n, warnings)?;
        changed = true;
    }
    Ok(changed)
}

fn expand(g: &mut Graph, n: Node, warnings: &mut Vec<Diagnostic>) -> Result<(), Diagnostic> {
    let nd = &g.nodes[n];
    let (span, region) = (nd.span, nd.parent);
    let (loss, wrts) = (nd.operands[0], nd.operands[1..].to_vec());
    let results = nd.results.clone();
    let deps = nd.control_deps.clone();
    let at = g.regions[region].nodes.iter().position(|&m| m == n).expect("a node is in its region");
    let mut e = Emit::new(g, region, at, n);
    let located = |f: emit::Failure, g: &Graph| {
        let d = Diagnostic::error(g.nodes[f.node].span, f.message);
        if f.node == n {
            d
        } else {
            d.with_note(span, "in the gradient asked for here")
        }
    };
    let built = (|| {
        let ty = e.ty(loss);
        let one = e.splat(&ty, 1.0)?;
        let adj = reverse::backprop(&mut e, &[(loss, one)], &wrts)?;
        let mut out = Vec::with_capacity(wrts.len());
        for (&w, a) in wrts.iter().zip(adj) {
            out.push(match a {
                Some(a) => a,
                None => {
                    warnings.push(Diagnostic::warning(
                        span,
                        format!("the loss does not depend on {}; its gradient is zero", reverse::value_name(e.g, w)),
                    ));
                    e.zeros_like(w)?
                }
            });
        }
        // The grad's `after` list: each gradient waits for those nodes, as the grad did, so a
        // node ordered after a gradient still orders (and, when pruning, needs) them.
        if !deps.is_empty() {
            for d in &mut out {
                *d = e.node(NodeSpec::new(Op::Identity, vec![*d]).after(deps.clone()))?[0];
            }
        }
        Ok(out)
    })();
    let grads = built.map_err(|f| located(f, g))?;
    for (r, d) in results.into_iter().zip(grads) {
        g.replace_all_uses(r, d);
    }
    g.remove_node(n).map_err(|m| Diagnostic::error(span, format!("internal error: {m}")))?;
    Ok(())
}
