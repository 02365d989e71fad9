//! Structural equality of graphs: same inputs, outputs, nodes in the same order with the same
//! ops, attributes, types, names, devices, dependencies and regions. Arena ids and dead slots
//! do not matter; this is the equality `parse(print(g)) == g` is checked with.

use crate::graph::{Graph, Module, Region, Value};
use std::collections::HashMap;

/// `Ok` when equal, else a description of the first difference.
pub fn graphs_equal(a: &Graph, b: &Graph) -> Result<(), String> {
    if a.name != b.name {
        return Err(format!("graph names differ: @{} vs @{}", a.name, b.name));
    }
    let on = |x: &[crate::graph::Output]| x.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
    if on(&a.outputs) != on(&b.outputs) {
        return Err(format!("@{}: output names differ: {:?} vs {:?}", a.name, on(&a.outputs), on(&b.outputs)));
    }
    if a.comments != b.comments {
        return Err(format!("@{}: comments differ", a.name));
    }
    let mut eq = Eq { a, b, map: HashMap::new() };
    eq.region(a.body, b.body, &format!("@{}", a.name))
}

/// Modules are equal when their graphs are, in order.
pub fn modules_equal(a: &Module, b: &Module) -> Result<(), String> {
    if a.graphs.len() != b.graphs.len() {
        return Err(format!("{} graphs vs {}", a.graphs.len(), b.graphs.len()));
    }
    a.graphs.iter().zip(&b.graphs).try_for_each(|(x, y)| graphs_equal(x, y))
}

struct Eq<'a> {
    a: &'a Graph,
    b: &'a Graph,
    /// Values of `a` matched to values of `b` so far.
    map: HashMap<Value, Value>,
}

impl Eq<'_> {
    fn def(&mut self, va: Value, vb: Value, at: &str) -> Result<(), String> {
        let (da, db) = (&self.a.values[va], &self.b.values[vb]);
        if da.ty != db.ty {
            return Err(format!("{at}: types differ: {} vs {}", da.ty, db.ty));
        }
        if da.name != db.name {
            return Err(format!("{at}: names differ: {:?} vs {:?}", da.name, db.name));
        }
        self.map.insert(va, vb);
        Ok(())
    }

    fn uses(&self, xs: &[Value], ys: &[Value], at: &str, what: &str) -> Result<(), String> {
        if xs.len() != ys.len() || xs.iter().zip(ys).any(|(x, y)| self.map.get(x) != Some(y)) {
            return Err(format!("{at}: {what} differ"));
        }
        Ok(())
    }

    fn region(&mut self, ra: Region, rb: Region, at: &str) -> Result<(), String> {
        let (a, b) = (&self.a.regions[ra], &self.b.regions[rb]);
        if a.label != b.label {
            return Err(format!("{at}: region labels differ: {} vs {}", a.label, b.label));
        }
        if a.params.len() != b.params.len() {
            return Err(format!("{at}: parameter counts differ"));
        }
        for (i, (&x, &y)) in a.params.iter().zip(&b.params).enumerate() {
            self.def(x, y, &format!("{at} parameter {i}"))?;
        }
        if a.nodes.len() != b.nodes.len() {
            return Err(format!("{at}: {} nodes vs {}", a.nodes.len(), b.nodes.len()));
        }
        for (i, (&na, &nb)) in a.nodes.iter().zip(&b.nodes).enumerate() {
            let (x, y) = (&self.a.nodes[na], &self.b.nodes[nb]);
            let here = format!("{at} node {i} ({})", x.op.name());
            if x.op != y.op {
                return Err(format!("{here}: ops differ: {} vs {}", x.op.name(), y.op.name()));
            }
            if x.attrs != y.attrs {
                return Err(format!("{here}: attributes differ"));
            }
            if x.comments != y.comments {
                return Err(format!("{here}: comments differ"));
            }
            if x.device != y.device {
                return Err(format!("{here}: devices differ"));
            }
            self.uses(&x.operands, &y.operands, &here, "operands")?;
            self.uses(&x.control_deps, &y.control_deps, &here, "control dependencies")?;
            if x.regions.len() != y.regions.len() || x.results.len() != y.results.len() {
                return Err(format!("{here}: region or result counts differ"));
            }
            for (&sa, &sb) in x.regions.iter().zip(&y.regions) {
                self.region(sa, sb, &here)?;
            }
            for (k, (&va, &vb)) in x.results.iter().zip(&y.results).enumerate() {
                self.def(va, vb, &format!("{here} result {k}"))?;
            }
        }
        self.uses(&a.yields, &b.yields, at, "yielded values")
    }
}
