//! Gradients through `cond` and `while` (SPEC.md, "Gradients"). Regions are isolated, so a
//! region's gradient is built inside a new region of the same kind: its forward nodes copied
//! in, then the reverse sweep over the copy.
//!
//! - `cond`: a `cond` on the same predicate whose branches each compute their branch's
//!   gradient with respect to the arguments, from the results' adjoints passed in.
//! - `while`: by recomputation, since shapes are static and a loop's trip count is not. One
//!   loop counts the iterations n; a reverse loop runs k = n..1, and each of its iterations
//!   recomputes the state before the k-th iteration from the initial values (an inner loop of
//!   k-1 body runs), then applies the body's gradient to the adjoints of the carried values.
//!   That is O(n^2) body runs and O(1) memory beyond the carried values.
//!
//! A recomputation copies only the nodes the values it needs depend on, so the region's
//! effects (an `assign_add` counting iterations, an `enqueue`) are not repeated; a needed node
//! with an effect (a `dequeue`, a `recv`, a write whose result is used) is an error, since
//! running it again would not give the value it gave, and so is a `read` in a region that
//! also writes a variable (the copy would read it after the writes).

use crate::autodiff::emit::{Emit, Result, Site};
use graphc_ir::{DType, Graph, Node, NodeSpec, Op, Region, Type, Value};
use std::collections::{HashMap, HashSet};

type Grads = Result<Vec<Option<Value>>>;

fn is_float(g: &Graph, v: Value) -> bool {
    g.value_type(v).as_tensor().is_some_and(|t| t.dtype.is_float())
}

/// Ops that write a variable.
fn writes_variable(op: Op) -> bool {
    matches!(op, Op::Assign | Op::AssignAdd | Op::ApplySgd | Op::ApplyMomentum | Op::ApplyAdam | Op::ApplyRmsprop)
}

/// Whether a recomputation may run `op` again and get what the forward run got: pure ops,
/// the stateful ops without effects (handles, `no_op`), and `read` when the control-flow node
/// being differentiated writes no variable itself.
fn rerunnable(op: Op, writes: bool) -> bool {
    !op.is_stateful() || matches!(op, Op::Variable | Op::Queue | Op::NoOp) || (op == Op::Read && !writes)
}

/// `n` and every node nested in its regions.
fn nested(g: &Graph, n: Node, out: &mut Vec<Node>) {
    out.push(n);
    for &r in &g.nodes[n].regions {
        for &m in &g.regions[r].nodes {
            nested(g, m, out);
        }
    }
}

/// Copies to the end of `to` the nodes of `from` (a region of `src`, a snapshot of `e.g`)
/// that its yields at `needed` depend on, its params standing for `params`; returns what each
/// yield became (`None` for one not needed and not copied). Control dependencies on nodes not
/// copied are dropped: they order effects, and the copy has none. A needed node that cannot be
/// run again (see [`rerunnable`]) is an error.
fn copy_region(
    e: &mut Emit<'_>,
    src: &Graph,
    from: Region,
    to: Region,
    params: &[Value],
    needed: &[usize],
) -> Result<Vec<Option<Value>>> {
    let rd = &src.regions[from];
    let mut live: HashSet<Value> = needed.iter().map(|&i| rd.yields[i]).collect();
    let mut keep = vec![false; rd.nodes.len()];
    for (k, &n) in rd.nodes.iter().enumerate().rev() {
        let nd = &src.nodes[n];
        if nd.results.iter().any(|r| live.contains(r)) {
            keep[k] = true;
            live.extend(nd.operands.iter().copied());
        }
    }
    // Whether the control-flow node whose region this is writes a variable anywhere inside.
    let owner = rd.parent;
    let mut inside = Vec::new();
    if let Some(p) = owner {
        nested(src, p, &mut inside);
    }
    let writes = inside.iter().any(|&m| writes_variable(src.nodes[m].op));
    let mut map: HashMap<Value, Value> = rd.params.iter().copied().zip(params.iter().copied()).collect();
    for (&n, _) in rd.nodes.iter().zip(&keep).filter(|(_, &k)| k) {
        let mut deep = Vec::new();
        nested(src, n, &mut deep);
        if let Some(&m) = deep.iter().find(|&&m| !rerunnable(src.nodes[m].op, writes)) {
            let why = if src.nodes[m].op == Op::Read {
                "would read its variable after the writes this region makes"
            } else {
                "has an effect, which running it again would repeat"
            };
            let of = owner.map_or("region", |p| src.nodes[p].op.name());
            return e.fail(format!(
                "cannot differentiate through this '{of}': its gradient runs the '{}' region again, and {} there {why}; compute the value outside and pass it in as an operand",
                rd.label,
                src.describe(m)
            ));
        }
        let nd = &src.nodes[n];
        let ops = nd.operands.iter().map(|v| map[v]).collect();
        let deps = nd.control_deps.iter().filter_map(|v| map.get(v).copied()).collect();
        let results = match e.g.import_node(to, src, n, ops, deps) {
            Ok(r) => r,
            Err(err) => return e.fail(format!("internal error: copying a region for its gradient: {err}")),
        };
        map.extend(nd.results.iter().copied().zip(results));
    }
    Ok(rd.yields.iter().map(|v| map.get(v).copied()).collect())
}

/// The copied yields at `needed`, each present by construction.
fn pick(ys: &[Option<Value>], needed: &[usize]) -> Vec<Value> {
    needed.iter().map(|&i| ys[i].expect("a needed yield is copied")).collect()
}

/// A new region labelled `label` whose params have `types`.
fn region(e: &mut Emit<'_>, label: &str, types: &[Type]) -> (Region, Vec<Value>) {
    let r = e.g.new_region(label, types);
    let params = e.g.regions[r].params.clone();
    (r, params)
}

fn types(g: &Graph, vs: &[Value]) -> Vec<Type> {
    vs.iter().map(|&v| g.value_type(v).clone()).collect()
}

/// Runs the reverse sweep at the end of region `r`: the adjoints of `wrts` from `seeds`,
/// zeros where nothing depends on one.
fn sweep(e: &mut Emit<'_>, s: &Site, r: Region, seeds: &[(Value, Value)], wrts: &[Value]) -> Result<Vec<Value>> {
    let at = e.g.regions[r].nodes.len();
    let mut inner = Emit::new(e.g, r, at, e.blame);
    let adj = (s.backprop)(&mut inner, seeds, wrts)?;
    let mut out = Vec::with_capacity(wrts.len());
    for (&w, a) in wrts.iter().zip(adj) {
        out.push(match a {
            Some(a) => a,
            None => inner.zeros_like(w)?,
        });
    }
    Ok(out)
}

/// The adjoints of the float results, zeros for those nothing depends on.
fn result_adjoints(e: &mut Emit<'_>, s: &Site, float: &[usize]) -> Result<Vec<Value>> {
    float
        .iter()
        .map(|&i| match s.dy[i] {
            Some(d) => Ok(d),
            None => e.zeros_like(s.y[i]),
        })
        .collect()
}

pub fn cond(e: &mut Emit<'_>, s: &Site) -> Grads {
    let src = e.g.clone();
    let regions = src.nodes[s.node].regions.clone();
    let args = &s.x[1..];
    let float_args: Vec<usize> = (0..args.len()).filter(|&i| is_float(&src, args[i])).collect();
    let float_results: Vec<usize> = (0..s.y.len()).filter(|&i| is_float(&src, s.y[i])).collect();
    let dys = result_adjoints(e, s, &float_results)?;
    let mut param_types = types(&src, args);
    param_types.extend(types(e.g, &dys));
    let mut branches = Vec::new();
    for &r in &regions {
        let (nr, params) = region(e, &src.regions[r].label, &param_types);
        let (xs, gs) = params.split_at(args.len());
        let ys = copy_region(e, &src, r, nr, xs, &float_results)?;
        let seeds: Vec<(Value, Value)> = pick(&ys, &float_results).into_iter().zip(gs.iter().copied()).collect();
        let wrts: Vec<Value> = float_args.iter().map(|&i| xs[i]).collect();
        let grads = sweep(e, s, nr, &seeds, &wrts)?;
        e.g.set_yields(nr, grads);
        branches.push(nr);
    }
    let mut operands = s.x.clone();
    operands.extend(dys);
    let results = e.node(NodeSpec::new(Op::Cond, operands).regions(branches))?;
    let mut out = vec![None; s.x.len()];
    for (&i, r) in float_args.iter().zip(results) {
        out[i + 1] = Some(r);
    }
    Ok(out)
}

pub fn while_loop(e: &mut Emit<'_>, s: &Site) -> Grads {
    let src = e.g.clone();
    let (cond_r, body_r) = (src.nodes[s.node].regions[0], src.nodes[s.node].regions[1]);
    let init = s.x.clone();
    let carried = types(&src, &init);
    let float: Vec<usize> = (0..init.len()).filter(|&i| is_float(&src, init[i])).collect();
    let i64t = Type::tensor(DType::I64, Vec::<u64>::new());

    // The trip count: the loop again, with a counter.
    let mut counted = carried.clone();
    counted.push(i64t.clone());
    let every: Vec<usize> = (0..init.len()).collect();
    let (c, cp) = region(e, "cond", &counted);
    let stop = copy_region(e, &src, cond_r, c, &cp[..init.len()], &[0])?;
    e.g.set_yields(c, pick(&stop, &[0]));
    let (b, bp) = region(e, "body", &counted);
    let mut next = pick(&copy_region(e, &src, body_r, b, &bp[..init.len()], &every)?, &every);
    next.push(increment(e, b, bp[init.len()], 1.0)?);
    e.g.set_yields(b, next);
    let mut operands = init.clone();
    operands.push(e.scalar(DType::I64, 0.0)?);
    let trips = *e.node(NodeSpec::new(Op::While, operands).regions(vec![c, b]))?.last().expect("the counter");

    // The reverse loop over (k, the initial values, the float values' adjoints).
    let dys = result_adjoints(e, s, &float)?;
    let mut rev = vec![i64t.clone()];
    rev.extend(carried.iter().cloned());
    rev.extend(types(e.g, &dys));
    let (rc, rcp) = region(e, "cond", &rev);
    let zero = {
        let at = e.g.regions[rc].nodes.len();
        let mut inner = Emit::new(e.g, rc, at, e.blame);
        let zero = inner.scalar(DType::I64, 0.0)?;
        inner.op(Op::Greater, &[rcp[0], zero], &[])?
    };
    e.g.set_yields(rc, vec![zero]);
    let (rb, rbp) = region(e, "body", &rev);
    let k = rbp[0];
    let init_p = rbp[1..=init.len()].to_vec();
    let gs = rbp[init.len() + 1..].to_vec();
    let km1 = increment(e, rb, k, -1.0)?;
    let state = replay(e, &src, body_r, rb, km1, &init_p, &carried)?;
    let ys = copy_region(e, &src, body_r, rb, &state, &float)?;
    let seeds: Vec<(Value, Value)> = pick(&ys, &float).into_iter().zip(gs.iter().copied()).collect();
    let wrts: Vec<Value> = float.iter().map(|&i| state[i]).collect();
    let grads = sweep(e, s, rb, &seeds, &wrts)?;
    let mut yields = vec![km1];
    yields.extend(init_p);
    yields.extend(grads);
    e.g.set_yields(rb, yields);
    let mut operands = vec![trips];
    operands.extend(init.iter().copied());
    operands.extend(dys);
    let results = e.node(NodeSpec::new(Op::While, operands).regions(vec![rc, rb]))?;
    let mut out = vec![None; init.len()];
    for (n, &i) in float.iter().enumerate() {
        out[i] = Some(results[1 + init.len() + n]);
    }
    Ok(out)
}

/// `v + by` for an i64 scalar `v`, at the end of region `r`.
fn increment(e: &mut Emit<'_>, r: Region, v: Value, by: f64) -> Result<Value> {
    let at = e.g.regions[r].nodes.len();
    let mut inner = Emit::new(e.g, r, at, e.blame);
    let step = inner.scalar(DType::I64, by)?;
    inner.add(v, step)
}

/// At the end of region `r`: the carried values after `count` runs of `body` from `init`, by
/// an inner loop over (j, count, values).
fn replay(
    e: &mut Emit<'_>,
    src: &Graph,
    body: Region,
    r: Region,
    count: Value,
    init: &[Value],
    carried: &[Type],
) -> Result<Vec<Value>> {
    let i64t = Type::tensor(DType::I64, Vec::<u64>::new());
    let mut tys = vec![i64t.clone(), i64t];
    tys.extend(carried.iter().cloned());
    let (c, cp) = region(e, "cond", &tys);
    let less = {
        let mut inner = Emit::new(e.g, c, 0, e.blame);
        inner.op(Op::Less, &[cp[0], cp[1]], &[])?
    };
    e.g.set_yields(c, vec![less]);
    let (b, bp) = region(e, "body", &tys);
    let every: Vec<usize> = (0..init.len()).collect();
    let next = pick(&copy_region(e, src, body, b, &bp[2..], &every)?, &every);
    let mut yields = vec![increment(e, b, bp[0], 1.0)?, bp[1]];
    yields.extend(next);
    e.g.set_yields(b, yields);
    let mut operands = vec![];
    {
        let at = e.g.regions[r].nodes.len();
        let mut inner = Emit::new(e.g, r, at, e.blame);
        operands.push(inner.scalar(DType::I64, 0.0)?);
    }
    operands.push(count);
    operands.extend(init.iter().copied());
    let at = e.g.regions[r].nodes.len();
    let mut inner = Emit::new(e.g, r, at, e.blame);
    let results = inner.node(NodeSpec::new(Op::While, operands).regions(vec![c, b]))?;
    Ok(results[2..].to_vec())
}
