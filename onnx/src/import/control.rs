//! Control flow decided at import time: If whose condition is known then (a constant, a given
//! input, or computed from them) imports the branch it takes, inline; Loop whose trip count
//! and conditions are known then is unrolled, its body imported once per iteration (up to
//! [`UNROLL_LIMIT`] iterations), its scan outputs stacked; Scan likewise over its sequences'
//! static length. A condition or trip count known only
//! at run time is refused with the reason (graphc's `cond` and `while` regions are not yet a
//! target of the importer).

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::{GraphProto, NodeProto};
use graphc_ir::{Attr, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    // If 1 to 24 differ in the types the branches may yield only.
    OpEntry::since("If", 1, if_),
    // Loop 1 and 11 differ in whether the loop-carried shapes may change (11 lets them);
    // 13 adds sequences, 16 optionals and more types.
    OpEntry::since("Loop", 1, loop_),
    // Scan 9 (11 allows negative axes, 16 more types); Scan 8, with a batch axis, is not read.
    OpEntry::since("Scan", 9, scan),
];

/// The most iterations (steps) a Loop, Scan or recurrent layer is unrolled to.
pub(super) const UNROLL_LIMIT: i64 = 4096;

fn if_(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let cond = imp
        .const_input(n, 0, "cond")
        .map_err(|e| format!("{e}; graphc imports an If whose condition is known then"))?;
    let cond = cond.ok_or("input 0 (cond) is required")?.to_f64_vec();
    let [c] = cond[..] else {
        return Err(format!("the condition must hold one value, got {}", cond.len()));
    };
    let name = if c != 0.0 { "then_branch" } else { "else_branch" };
    let attrs = Attrs(n);
    let branch = attrs.get(name).and_then(|a| a.g.as_ref()).ok_or(format!("the {name} attribute is required"))?;
    let outs = inline(imp, branch, &[]).map_err(|e| format!("{name}: {e}"))?;
    if outs.len() != n.output.len() {
        return Err(format!("{name} yields {} values for {} outputs", outs.len(), n.output.len()));
    }
    Ok(outs)
}

/// Inputs: the trip count M and the condition (each optional), then the loop-carried values.
/// The body takes (iteration, condition, carried...) and yields (condition, carried...,
/// scanned...); the outputs are the final carried values, then each scanned value stacked
/// over the iterations.
fn loop_(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let known = "; graphc unrolls a Loop whose trip count and conditions are known at import";
    let trip = imp.const_ints(n, 0, "M").map_err(|e| format!("{e}{known}"))?;
    let trip = match trip.as_deref() {
        None => None,
        Some(&[m]) => Some(m),
        Some(other) => return Err(format!("input 0 (M) must hold one value, got {}", other.len())),
    };
    let mut cond = match imp.opt_input(n, 1)? {
        Some(c) => Some(truth(imp, c).map_err(|e| format!("input 1 (cond): {e}{known}"))?),
        None => None,
    };
    let attrs = Attrs(n);
    let body = attrs.get("body").and_then(|a| a.g.as_ref()).ok_or("the body attribute is required")?;
    let mut carried = (2..n.input.len()).map(|i| imp.input(n, i)).collect::<Result<Vec<_>>>()?;
    if body.input.len() != carried.len() + 2 || body.output.len() < carried.len() + 1 {
        return Err(format!(
            "the body takes {} inputs and yields {} outputs for {} loop-carried values",
            body.input.len(),
            body.output.len(),
            carried.len()
        ));
    }
    let scans = body.output.len() - 1 - carried.len();
    let mut scanned: Vec<Vec<Value>> = vec![Vec::new(); scans];
    let mut i = 0;
    while trip.is_none_or(|m| i < m) && cond != Some(false) {
        if i >= UNROLL_LIMIT {
            return Err(format!("the loop runs past {UNROLL_LIMIT} iterations, the most graphc unrolls"));
        }
        let iteration = imp.constant(Tensor::I64(ndarray::arr0(i).into_dyn()))?;
        let cond_in = imp.constant(Tensor::Bool(ndarray::arr0(cond.unwrap_or(true)).into_dyn()))?;
        let mut params = vec![iteration, cond_in];
        params.extend(&carried);
        let outs = inline(imp, body, &params).map_err(|e| format!("body, iteration {i}: {e}"))?;
        cond = Some(truth(imp, outs[0]).map_err(|e| format!("the body's condition, iteration {i}: {e}{known}"))?);
        carried = outs[1..=carried.len()].to_vec();
        for (s, &v) in scanned.iter_mut().zip(&outs[carried.len() + 1..]) {
            s.push(v);
        }
        i += 1;
    }
    let mut results = carried;
    for (k, values) in scanned.into_iter().enumerate() {
        if values.is_empty() {
            return Err(format!("scan output {k} of a loop that runs no iteration has no known shape"));
        }
        results.push(stack(imp, &values, 0)?);
    }
    Ok(results)
}

/// Inputs: the initial states, then `num_scan_inputs` sequences. The body takes (states...,
/// one slice of each sequence...) and yields (states..., scanned...); unrolled over the
/// sequences' length (static), slicing each along its axis (from the end where its direction
/// is 1) and stacking each scanned value along its output axis (reversed likewise).
fn scan(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let body = a.get("body").and_then(|a| a.g.as_ref()).ok_or("the body attribute is required")?;
    let inputs = (0..n.input.len()).map(|i| imp.input(n, i)).collect::<Result<Vec<_>>>()?;
    let m = a.int("num_scan_inputs", -1);
    if m < 1 || m as usize > inputs.len() {
        return Err(format!("num_scan_inputs {m} must be from 1 to the {} inputs", inputs.len()));
    }
    let (states, sequences) = inputs.split_at(inputs.len() - m as usize);
    let mut states = states.to_vec();
    let per_input = |name: &str, len: usize| -> Result<Vec<i64>> {
        let v = a.ints(name).unwrap_or_else(|| vec![0; len]);
        if v.len() != len {
            return Err(format!("{name} has {} entries for {len} values", v.len()));
        }
        Ok(v)
    };
    let in_axes = per_input("scan_input_axes", sequences.len())?;
    let in_dirs = per_input("scan_input_directions", sequences.len())?;
    let scans =
        body.output.len().checked_sub(states.len()).ok_or("the body yields fewer values than there are states")?;
    let out_axes = per_input("scan_output_axes", scans)?;
    let out_dirs = per_input("scan_output_directions", scans)?;
    let mut axes = Vec::new();
    let mut length = None;
    for (j, (&x, &axis)) in sequences.iter().zip(&in_axes).enumerate() {
        let dims = imp.shape(x)?;
        let axis = norm_axis(axis, dims.len())?;
        if length.is_some_and(|l| l != dims[axis]) {
            return Err(format!(
                "scan input {j} has {} steps along axis {axis}, the others {}",
                dims[axis],
                length.unwrap_or(0)
            ));
        }
        length = Some(dims[axis]);
        axes.push(axis);
    }
    let length = length.unwrap_or(0);
    if length > UNROLL_LIMIT {
        return Err(format!("the scan runs {length} steps, past the {UNROLL_LIMIT} graphc unrolls"));
    }
    let mut scanned: Vec<Vec<Value>> = vec![Vec::new(); scans];
    for t in 0..length {
        let mut params = states.clone();
        for ((&x, &axis), &dir) in sequences.iter().zip(&axes).zip(&in_dirs) {
            let at = if dir != 0 { length - 1 - t } else { t };
            params.push(imp.take(x, axis, at)?);
        }
        let outs = inline(imp, body, &params).map_err(|e| format!("body, step {t}: {e}"))?;
        states = outs[..states.len()].to_vec();
        for (s, &v) in scanned.iter_mut().zip(&outs[states.len()..]) {
            s.push(v);
        }
    }
    let mut results = states;
    for ((mut values, &axis), &dir) in scanned.into_iter().zip(&out_axes).zip(&out_dirs) {
        let Some(&first) = values.first() else {
            return Err("a scan of no steps has scan outputs of no known shape".into());
        };
        let axis = norm_axis(axis, imp.shape(first)?.len() + 1)?;
        if dir != 0 {
            values.reverse();
        }
        results.push(stack(imp, &values, axis)?);
    }
    Ok(results)
}

/// `values` (of one shape) stacked along a new axis `axis`. Where the axes before it are all
/// of size 1 (axis 0, say), the stack is the values one after another in memory: one concat
/// along axis 0 and one reshape, rather than a reshape per value (an unrolled loop's outputs
/// are many small values, and each node costs a step more than its copy).
pub(super) fn stack(imp: &mut Importer, values: &[Value], axis: usize) -> Result<Value> {
    let shape = match values.first() {
        Some(&v) => imp.shape(v)?,
        None => return Err("nothing to stack".into()),
    };
    let same = values.iter().map(|&v| imp.shape(v)).collect::<Result<Vec<_>>>()?.iter().all(|s| *s == shape);
    if same && !shape.is_empty() && axis <= shape.len() && shape[..axis].iter().all(|&d| d == 1) {
        let mut stacked = shape.clone();
        stacked.insert(axis, values.len() as i64);
        let joined = one_after_another(imp, values)?;
        return imp.reshape(joined, stacked);
    }
    let rows = values
        .iter()
        .map(|&v| {
            let mut shape = imp.shape(v)?;
            shape.insert(axis, 1);
            imp.reshape(v, shape)
        })
        .collect::<Result<Vec<_>>>()?;
    imp.emit1(NodeSpec::new(Op::Concat, rows).attr("axis", Attr::Int(axis as i64)))
}

/// `values` (of one shape) one after another along axis 0: the one value itself, or a concat.
pub(super) fn one_after_another(imp: &mut Importer, values: &[Value]) -> Result<Value> {
    match values {
        [] => Err("nothing to join".into()),
        [one] => Ok(*one),
        _ => imp.emit1(NodeSpec::new(Op::Concat, values.to_vec()).attr("axis", Attr::Int(0))),
    }
}

/// A one-element bool (or number) known at import, as a bool.
fn truth(imp: &Importer, v: Value) -> Result<bool> {
    let t = match imp.known(v) {
        Some(t) => t.to_f64_vec(),
        None => {
            return Err(match imp.unknown_input(v) {
                Some(name) => format!(
                    "it comes from graph input '{name}', whose value graphc needs when importing; give it with --input"
                ),
                None => "its value is not known at import".into(),
            })
        }
    };
    match t[..] {
        [x] => Ok(x != 0.0),
        _ => Err(format!("it must hold one value, got {}", t.len())),
    }
}

/// Imports a subgraph's nodes into the graph being built, its inputs bound to `params` and
/// outer-scope names resolving; returns its outputs. Its own names go out of scope after it.
fn inline(imp: &mut Importer, graph: &GraphProto, params: &[Value]) -> Result<Vec<Value>> {
    let outer = imp.env.clone();
    for (input, &v) in graph.input.iter().zip(params) {
        imp.env.insert(input.name.clone().unwrap_or_default(), v);
    }
    let result = (|| {
        for init in &graph.initializer {
            let name = init.name.clone().unwrap_or_default();
            let t =
                crate::tensor::tensor_from_proto(init, imp.base).map_err(|e| format!("initializer '{name}': {e}"))?;
            let v = imp.constant(t)?;
            imp.env.insert(name, v);
        }
        for node in &graph.node {
            super::convert_node(imp, node).map_err(|e| format!("{}: {e}", super::describe(node)))?;
        }
        graph.output.iter().map(|o| imp.value(o.name.as_deref().unwrap_or_default())).collect::<Result<Vec<_>>>()
    })();
    imp.env = outer;
    result
}
