//! Between-graph replication's split of a training step: the variables and their updates go
//! to the ps tasks, the rest stays with every worker.
//!
//! Variables are grouped with the others an update touches (an `apply_adam` keeps `var`, `m`,
//! `v` and `step` together) and the groups spread over the ps tasks, largest first onto the
//! least loaded (as TensorFlow's replica device setter spreads them by size). A group of at
//! least `min_slice_bytes` is split row-wise into parts (TensorFlow's min-max variable
//! partitioner: as many parts as slices of that size, at most one per ps task), each part a
//! unit of the spread: part K of `w` is the variable `w/part_K` holding its rows of `w` and
//! of the group's other tensors (Adam's moments), with its own copy of the group's scalars
//! (Adam's step count, which every part advances alike).
//!
//! In the worker's step graph a `read` of a variable becomes a `recv` from its ps task (of a
//! partitioned one, a `recv` per part and a `concat` of their rows), and an update becomes a
//! `send` of each of its tensor operands (the gradient, the learning rate) to the ps task, a
//! partitioned update sending each part its rows (a `slice`) and the scalars; the ps task's
//! `@apply` graph runs the update on its variables. Keys name the ps task and what they
//! carry: `ps0/read/w1`, `ps0/u3_5` (operand 5 of update 3), `ps1/read/w1/part_1`,
//! `ps1/u3p1_5` (operand 5 of update 3 for part 1).

use graphc_ir::{Attr, Graph, Module, Node, NodeSpec, Op, TensorType, Type, Use, Value};
use std::collections::{BTreeMap, HashMap};

/// The ps task's graph that applies the updates.
pub const APPLY: &str = "apply";

/// The step split over the worker and the ps tasks.
#[derive(Clone, Debug)]
pub struct Split {
    /// The step graph as every worker runs it (the module's only graph).
    pub worker: Module,
    pub tasks: Vec<PsProgram>,
    /// The variables split row-wise (tensors, not their scalar slots), with their parts.
    pub partitioned: BTreeMap<String, usize>,
    /// The scalar slots of partitioned groups, with their copies (one per part).
    pub copied: BTreeMap<String, usize>,
}

/// What one ps task holds and does.
#[derive(Clone, Debug)]
pub struct PsProgram {
    /// `@apply`: the task's variables, and its updates fed by the pushed tensors.
    pub module: Module,
    /// Variable reads served: key -> variable name.
    pub reads: BTreeMap<String, String>,
    /// The tensors each worker pushes per step, by key, with their types; `@apply`'s inputs
    /// are named by [`input_name`] of the key.
    pub pushes: BTreeMap<String, TensorType>,
    /// Bytes of its variables.
    pub bytes: u64,
}

impl PsProgram {
    /// A hash of the program, which workers and ps tasks compare.
    pub fn fingerprint(&self) -> u64 {
        let text = graphc_ir::printer::print_module(&self.module);
        text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    }
}

/// `@apply`'s input for a pushed key (`ps0/u3_5` -> `u3_5`).
pub fn input_name(key: &str) -> &str {
    key.split_once('/').map_or(key, |(_, rest)| rest)
}

/// The ps task a key goes to or comes from (`ps3/...` -> 3).
pub fn task_of(key: &str) -> Option<usize> {
    key.strip_prefix("ps")?.split_once('/')?.0.parse().ok()
}

fn is_update(op: Op) -> bool {
    matches!(op, Op::Assign | Op::AssignAdd | Op::ApplySgd | Op::ApplyMomentum | Op::ApplyAdam | Op::ApplyRmsprop)
}

/// TensorFlow's default slice size for partitioned variables (256 KiB).
pub const MIN_SLICE_BYTES: u64 = 256 << 10;

/// Splits `step` of `m` over `ps` tasks, partitioning groups of variables of at least
/// `min_slice_bytes` (0: none) row-wise.
pub fn split(m: &Module, step: &str, ps: usize, min_slice_bytes: u64) -> Result<Split, String> {
    let g = m.graph(step).ok_or_else(|| format!("the module has no graph @{step}"))?;
    let body = &g.regions[g.body].nodes;
    // Variables: the node declaring each, by name (one node per name in the step graph).
    let mut vars: Vec<(Node, String, TensorType)> = Vec::new();
    let mut var_of: HashMap<Value, usize> = HashMap::new();
    for n in g.walk() {
        let nd = &g.nodes[n];
        if nd.op != Op::Variable {
            continue;
        }
        let name = nd.attrs.str("name").unwrap_or_default().to_string();
        if !body.contains(&n) {
            return Err(format!(
                "@{step}: {} is inside a region; with parameter servers, declare variables in the graph's body",
                g.describe(n)
            ));
        }
        let Type::Var(t) = &g.values[nd.results[0]].ty else { unreachable!("a variable's result is a handle") };
        if vars.iter().any(|(_, v, _)| *v == name) {
            return Err(format!("@{step}: variable '{name}' is declared twice; declare it once"));
        }
        var_of.insert(nd.results[0], vars.len());
        vars.push((n, name, t.clone()));
    }
    if vars.is_empty() {
        return Err(format!("@{step} has no variables: there is nothing for parameter servers to hold"));
    }
    // The nodes that touch variables: reads and updates, in the body only.
    let mut updates: Vec<Node> = Vec::new();
    for n in g.walk() {
        let nd = &g.nodes[n];
        let touched: Vec<usize> = nd.operands.iter().filter_map(|v| var_of.get(v).copied()).collect();
        if touched.is_empty() {
            continue;
        }
        if !(nd.op == Op::Read || is_update(nd.op)) {
            return Err(format!(
                "@{step}: {} uses variable '{}'; with parameter servers a step may read variables and update them with assign, assign_add and apply_* ops",
                g.describe(n),
                vars[touched[0]].1
            ));
        }
        if !body.contains(&n) {
            return Err(format!("@{step}: {} is inside a region; with parameter servers, variables are read and updated in the graph's body", g.describe(n)));
        }
        if is_update(nd.op) {
            if let Some(u) = g.uses(nd.results[0]).iter().find(|u| !matches!(u, Use::Control(..))) {
                let user = match u {
                    Use::Operand(m, _) => g.describe(*m),
                    _ => "an output".to_string(),
                };
                return Err(format!(
                    "@{step}: {user} uses the value {} returns; with parameter servers that value stays on the ps task: order after it with `after` instead",
                    g.describe(n)
                ));
            }
            updates.push(n);
        }
    }
    check_order(g, step, &vars, &var_of, &updates)?;
    let group_of = group_variables(g, &vars, &var_of, &updates);
    let mut groups = partition(g, &vars, &var_of, &updates, &group_of, ps, min_slice_bytes);
    spread(&mut groups, ps);

    let placed = Placed { g, vars: &vars, var_of: &var_of, updates: &updates, group_of, groups };
    let parts = |rows: bool| -> BTreeMap<String, usize> {
        placed
            .groups
            .iter()
            .filter(|gr| gr.partitioned())
            .flat_map(|gr| {
                gr.vars
                    .iter()
                    .filter(|&&i| (vars[i].2.rank() > 0) == rows)
                    .map(|&i| (vars[i].1.clone(), gr.parts.len()))
            })
            .collect()
    };
    let (partitioned, copied) = (parts(true), parts(false));
    let worker = placed.worker_graph()?;
    let tasks = (0..ps).map(|t| placed.ps_program(t)).collect::<Result<Vec<_>, _>>()?;
    let worker = Module { graphs: vec![worker], ..Module::default() };
    for (what, m) in
        std::iter::once(("the worker's step", &worker)).chain(tasks.iter().map(|t| ("a ps task's program", &t.module)))
    {
        if let Some(d) = graphc_ir::verify_module(m).first() {
            return Err(format!("internal error: {what} does not verify: {}", d.message));
        }
    }
    Ok(Split { worker, tasks, partitioned, copied })
}

/// What the ps tasks cannot run as one process would: a variable updated twice in a step (the
/// updates would meet on the ps in any order), or read after its update (the read is a pull at
/// the step's start, and the update is applied when the step's round closes).
fn check_order(
    g: &Graph,
    step: &str,
    vars: &[(Node, String, TensorType)],
    var_of: &HashMap<Value, usize>,
    updates: &[Node],
) -> Result<(), String> {
    let touched =
        |n: Node| -> Vec<usize> { g.nodes[n].operands.iter().filter_map(|v| var_of.get(v).copied()).collect() };
    let mut updated_by: HashMap<usize, Node> = HashMap::new();
    for &u in updates {
        for v in touched(u) {
            if let Some(&first) = updated_by.get(&v) {
                return Err(format!(
                    "@{step}: variable '{}' is updated by {} and by {}; with parameter servers a step updates each variable once",
                    vars[v].1,
                    g.describe(first),
                    g.describe(u)
                ));
            }
            updated_by.insert(v, u);
        }
    }
    for n in g.walk() {
        if g.nodes[n].op != Op::Read {
            continue;
        }
        let v = var_of[&g.nodes[n].operands[0]];
        let Some(&u) = updated_by.get(&v) else { continue };
        // Everything the read waits for, through operands and `after` lists.
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<Value> = g.nodes[n].operands.iter().chain(&g.nodes[n].control_deps).copied().collect();
        while let Some(x) = stack.pop() {
            let Some(p) = g.producer(x) else { continue };
            if p == u {
                return Err(format!(
                    "@{step}: {} reads variable '{}' after {} updates it; with parameter servers a step reads its variables before updating them",
                    g.describe(n),
                    vars[v].1,
                    g.describe(u)
                ));
            }
            if seen.insert(p) {
                stack.extend(g.nodes[p].operands.iter().chain(&g.nodes[p].control_deps).copied());
            }
        }
    }
    Ok(())
}

/// Variables an update touches together, as groups of indices (union-find).
fn group_variables(
    g: &Graph,
    vars: &[(Node, String, TensorType)],
    var_of: &HashMap<Value, usize>,
    updates: &[Node],
) -> Vec<usize> {
    let mut parent: Vec<usize> = (0..vars.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for &u in updates {
        let touched: Vec<usize> = g.nodes[u].operands.iter().filter_map(|v| var_of.get(v).copied()).collect();
        for w in touched.windows(2) {
            let (a, b) = (root(&mut parent, w[0]), root(&mut parent, w[1]));
            parent[a.max(b)] = a.min(b);
        }
    }
    (0..vars.len()).map(|i| root(&mut parent, i)).collect()
}

fn bytes(t: &TensorType) -> u64 {
    t.num_elements().unwrap_or(0).saturating_mul(t.dtype.size_bytes() as u64)
}

/// A group of variables, whole on one ps task or in parts of rows over several.
struct Group {
    /// Its variables, by index.
    vars: Vec<usize>,
    /// Bytes of all its variables.
    bytes: u64,
    /// Its rows (dim 0 of its tensors) when partitioned.
    rows: Option<u64>,
    parts: Vec<Part>,
}

struct Part {
    task: usize,
    /// Rows `start..end` of the group's tensors, when partitioned (else the one part is the
    /// whole group).
    rows: Option<(u64, u64)>,
}

impl Part {
    /// A tensor of the group's shape as this part holds it: its rows (a scalar stays whole).
    fn cut(&self, ty: &TensorType) -> TensorType {
        match self.rows {
            Some((a, b)) if ty.rank() > 0 => {
                let mut shape = ty.shape.clone();
                shape[0] = b - a;
                ty.with_shape(shape)
            }
            _ => ty.clone(),
        }
    }
}

impl Group {
    fn partitioned(&self) -> bool {
        self.parts.len() > 1
    }
}

/// The session name of variable `name`'s part `k`.
fn part_name(name: &str, k: usize) -> String {
    format!("{name}/part_{k}")
}

/// The groups (by the root of `group_of`, in order of their first variable), each in as many
/// parts as slices of `min_slice_bytes` its largest tensor holds, at most one per ps task and
/// per row. Only a group whose tensors all share one shape (their other variables being
/// scalars) and whose updates take only that shape or scalars can be cut into rows: every
/// update is then elementwise over rows.
fn partition(
    g: &Graph,
    vars: &[(Node, String, TensorType)],
    var_of: &HashMap<Value, usize>,
    updates: &[Node],
    group_of: &[usize],
    ps: usize,
    min_slice_bytes: u64,
) -> Vec<Group> {
    let mut roots: Vec<usize> = Vec::new();
    for &r in group_of {
        if !roots.contains(&r) {
            roots.push(r);
        }
    }
    roots
        .into_iter()
        .map(|root| {
            let members: Vec<usize> = (0..vars.len()).filter(|&i| group_of[i] == root).collect();
            let total = members.iter().map(|&i| bytes(&vars[i].2)).sum();
            let whole =
                Group { vars: members.clone(), bytes: total, rows: None, parts: vec![Part { task: 0, rows: None }] };
            let tensors: Vec<&TensorType> = members.iter().map(|&i| &vars[i].2).filter(|t| t.rank() > 0).collect();
            let Some(&shape) = tensors.first() else { return whole };
            if min_slice_bytes == 0 || tensors.iter().any(|t| t.shape != shape.shape) {
                return whole;
            }
            let row_aligned =
                updates.iter().filter(|&&u| members.contains(&var_of[&g.nodes[u].operands[0]])).all(|&u| {
                    g.nodes[u].operands.iter().all(|v| {
                        var_of.contains_key(v)
                            || matches!(&g.values[*v].ty, Type::Tensor(t) if t.rank() == 0 || t.shape == shape.shape)
                    })
                });
            let rows = shape.shape[0];
            let slices = bytes(shape).div_ceil(min_slice_bytes);
            let n = slices.min(ps as u64).min(rows);
            if !row_aligned || n < 2 {
                return whole;
            }
            // TensorFlow's rule: the first `rows % n` parts get a row more.
            let mut start = 0;
            let parts = (0..n)
                .map(|k| {
                    let len = rows / n + u64::from(k < rows % n);
                    start += len;
                    Part { task: 0, rows: Some((start - len, start)) }
                })
                .collect();
            Group { vars: members, bytes: total, rows: Some(rows), parts }
        })
        .collect()
}

/// Each part's ps task: the parts by size, largest first, each onto the least loaded task
/// (the lowest numbered among equals), so the split is the same in every process.
fn spread(groups: &mut [Group], ps: usize) {
    let mut order: Vec<(u64, usize, usize)> = Vec::new();
    for (i, gr) in groups.iter().enumerate() {
        for (k, p) in gr.parts.iter().enumerate() {
            let size = match (p.rows, gr.rows) {
                (Some((a, b)), Some(rows)) => gr.bytes * (b - a) / rows.max(1),
                _ => gr.bytes,
            };
            order.push((size, i, k));
        }
    }
    order.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let mut load = vec![0u64; ps];
    for (size, i, k) in order {
        let t = (0..ps).min_by_key(|&t| (load[t], t)).expect("at least one ps task");
        load[t] += size;
        groups[i].parts[k].task = t;
    }
}

fn ps_device(t: usize) -> String {
    format!("/job:ps/task:{t}")
}

fn internal(e: impl std::fmt::Display) -> String {
    format!("internal error splitting the step: {e}")
}

/// The step's variables and updates, their groups placed on the ps tasks.
struct Placed<'a> {
    g: &'a Graph,
    vars: &'a [(Node, String, TensorType)],
    var_of: &'a HashMap<Value, usize>,
    updates: &'a [Node],
    /// Each variable's group, as the root of [`group_variables`].
    group_of: Vec<usize>,
    groups: Vec<Group>,
}

impl Placed<'_> {
    fn group_index(&self, var: usize) -> usize {
        let root = self.group_of[var];
        self.groups.iter().position(|gr| gr.vars.contains(&root)).expect("every variable has a group")
    }

    fn group(&self, var: usize) -> &Group {
        &self.groups[self.group_index(var)]
    }

    /// Variable `var` as part `k` of its group holds it: its session name and type.
    fn part_of(&self, var: usize, k: usize) -> (String, TensorType) {
        let (_, name, ty) = &self.vars[var];
        let part = &self.group(var).parts[k];
        match part.rows {
            Some(_) => (part_name(name, k), part.cut(ty)),
            None => (name.clone(), ty.clone()),
        }
    }

    /// The key of operand `i` of update `u` for part `k` of its group, on task `t`.
    fn push_key(&self, u: usize, k: usize, i: usize, t: usize, partitioned: bool) -> String {
        if partitioned {
            format!("ps{t}/u{u}p{k}_{i}")
        } else {
            format!("ps{t}/u{u}_{i}")
        }
    }

    /// The step graph with reads as recvs and updates as sends.
    fn worker_graph(&self) -> Result<Graph, String> {
        let Placed { g, vars, var_of, updates, .. } = self;
        let mut w = Graph::new(g.name.clone());
        w.span = g.span;
        w.comments = g.comments.clone();
        let body = w.body;
        let mut map: HashMap<Value, Value> = HashMap::new();
        for &v in g.inputs() {
            let kept = w.add_input(g.values[v].name.as_deref().unwrap_or_default(), g.values[v].ty.clone());
            w.values[kept].span = g.values[v].span;
            map.insert(v, kept);
        }
        for &n in &g.regions[g.body].nodes {
            let nd = &g.nodes[n];
            let deps: Vec<Value> = nd.control_deps.iter().filter_map(|v| map.get(v).copied()).collect();
            if nd.op == Op::Variable {
                continue;
            }
            if nd.op == Op::Read {
                let i = var_of[&nd.operands[0]];
                let group = self.group(i);
                // A scalar of a partitioned group: every part holds the same copy.
                let parts = if vars[i].2.rank() == 0 { &group.parts[..1] } else { &group.parts[..] };
                let mut pieces = Vec::with_capacity(parts.len());
                for (k, part) in parts.iter().enumerate() {
                    let (name, ty) = self.part_of(i, k);
                    let spec = NodeSpec::new(Op::Recv, Vec::<Value>::new())
                        .attr("key", Attr::Str(format!("ps{}/read/{name}", part.task)))
                        .attr("from", Attr::Str(ps_device(part.task)))
                        .declared(vec![Type::Tensor(ty)])
                        .after(deps.clone())
                        .span(nd.span);
                    pieces.push(w.add(body, spec).map_err(internal)?[0]);
                }
                let r = if pieces.len() == 1 {
                    pieces[0]
                } else {
                    let spec = NodeSpec::new(Op::Concat, pieces).attr("axis", Attr::Int(0)).span(nd.span);
                    w.add(body, spec).map_err(internal)?[0]
                };
                if let Some(name) = &g.values[nd.results[0]].name {
                    w.set_name(r, name);
                }
                map.insert(nd.results[0], r);
                continue;
            }
            if let Some(u) = updates.iter().position(|&x| x == n) {
                let group = self.group(var_of[&nd.operands[0]]);
                let mut sent = Vec::new();
                for (k, part) in group.parts.iter().enumerate() {
                    for (i, v) in nd.operands.iter().enumerate() {
                        if var_of.contains_key(v) {
                            continue;
                        }
                        let mut value = map[v];
                        if let Some((a, b)) = part.rows {
                            let Type::Tensor(ty) = &g.values[*v].ty else {
                                return Err(format!("{}: operand {i} is not a tensor", g.describe(n)));
                            };
                            if ty.rank() > 0 {
                                let mut starts = vec![0i64; ty.rank()];
                                let mut ends: Vec<i64> = ty.shape.iter().map(|&d| d as i64).collect();
                                (starts[0], ends[0]) = (a as i64, b as i64);
                                let spec = NodeSpec::new(Op::Slice, vec![value])
                                    .attr("starts", Attr::Ints(starts))
                                    .attr("ends", Attr::Ints(ends))
                                    .span(nd.span);
                                value = w.add(body, spec).map_err(internal)?[0];
                            }
                        }
                        let spec = NodeSpec::new(Op::Send, vec![value])
                            .attr("key", Attr::Str(self.push_key(u, k, i, part.task, part.rows.is_some())))
                            .attr("to", Attr::Str(ps_device(part.task)))
                            .after(deps.clone())
                            .span(nd.span);
                        sent.push(w.add(body, spec).map_err(internal)?[0]);
                    }
                }
                let token = if sent.len() == 1 {
                    sent[0]
                } else {
                    w.add(body, NodeSpec::new(Op::NoOp, Vec::<Value>::new()).after(sent).span(nd.span))
                        .map_err(internal)?[0]
                };
                map.insert(nd.results[0], token);
                continue;
            }
            let operands = nd.operands.iter().map(|v| map[v]).collect();
            let results = w.import_node(body, g, n, operands, deps).map_err(internal)?;
            map.extend(nd.results.iter().copied().zip(results));
        }
        w.set_outputs(g.outputs.iter().zip(g.output_values()).map(|(o, v)| (o.name.clone(), map[v])).collect());
        Ok(w)
    }

    /// Ps task `t`'s `@apply`: its variables (whole, or its parts of partitioned ones), and
    /// its updates with their tensor operands as inputs.
    fn ps_program(&self, t: usize) -> Result<PsProgram, String> {
        let Placed { g, vars, var_of, updates, .. } = self;
        let mut a = Graph::new(APPLY);
        a.comments = vec![format!(" the variables of ps task {t} and their updates, fed by the workers' pushes")];
        let body = a.body;
        // Each held part's handles, by (group index, part).
        let mut handle: HashMap<(usize, usize, Value), Value> = HashMap::new();
        let mut reads = BTreeMap::new();
        let mut held = 0u64;
        for (gi, group) in self.groups.iter().enumerate() {
            for (k, part) in group.parts.iter().enumerate() {
                if part.task != t {
                    continue;
                }
                for &i in &group.vars {
                    let n = vars[i].0;
                    let (name, ty) = self.part_of(i, k);
                    let nd = &g.nodes[n];
                    let mut spec = NodeSpec::new(Op::Variable, Vec::<Value>::new())
                        .attr("name", Attr::Str(name.clone()))
                        .declared(vec![Type::Var(ty.clone())])
                        .span(nd.span);
                    if let Some(init) = nd.attrs.tensor("init") {
                        let init = match part.rows {
                            Some((a, b)) if ty.rank() > 0 => init.rows(a, b).map_err(internal)?,
                            _ => init.clone(),
                        };
                        spec = spec.attr("init", Attr::Tensor(init));
                    }
                    let h = a.add(body, spec).map_err(internal)?[0];
                    if let Some(v) = &g.values[nd.results[0]].name {
                        a.set_name(h, v);
                    }
                    handle.insert((gi, k, nd.results[0]), h);
                    reads.insert(format!("ps{t}/read/{name}"), name);
                    held += bytes(&ty);
                }
            }
        }
        let mut pushes = BTreeMap::new();
        let mut outputs = Vec::new();
        for (u, &n) in updates.iter().enumerate() {
            let nd = &g.nodes[n];
            let gi = self.group_index(var_of[&nd.operands[0]]);
            let group = &self.groups[gi];
            for (k, part) in group.parts.iter().enumerate() {
                if part.task != t {
                    continue;
                }
                let mut operands = Vec::with_capacity(nd.operands.len());
                for (i, v) in nd.operands.iter().enumerate() {
                    if let Some(&h) = handle.get(&(gi, k, *v)) {
                        operands.push(h);
                        continue;
                    }
                    if var_of.contains_key(v) {
                        return Err(internal(format!("{} touches variables of two groups", g.describe(n))));
                    }
                    let Type::Tensor(ty) = &g.values[*v].ty else {
                        return Err(format!("{}: operand {i} is not a tensor", g.describe(n)));
                    };
                    let ty = part.cut(ty);
                    let key = self.push_key(u, k, i, t, part.rows.is_some());
                    operands.push(a.add_input(input_name(&key), Type::Tensor(ty.clone())));
                    pushes.insert(key, ty);
                }
                let mut spec = NodeSpec::new(nd.op, operands).span(nd.span);
                spec.attrs = nd.attrs.clone();
                let r = a.add(body, spec).map_err(internal)?[0];
                let out = if part.rows.is_some() { format!("u{u}p{k}") } else { format!("u{u}") };
                outputs.push((out, r));
            }
        }
        a.set_outputs(outputs);
        Ok(PsProgram { module: Module { graphs: vec![a], ..Module::default() }, reads, pushes, bytes: held })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(text: &str) -> Module {
        graphc_ir::parse_module(text).unwrap_or_else(|d| panic!("{:?}", d))
    }

    const STEP: &str = r#"graph @step(%x: f32[8,4], %t: f32[8,1]) -> (loss: f32[]) {
  %w = variable {name = "w", init = dense<0.0> : f32[4,1]} : var<f32[4,1]>
  %b = variable {name = "b", init = dense<[0.0]> : f32[1]} : var<f32[1]>
  %m = variable {name = "m", init = dense<0.0> : f32[4,1]} : var<f32[4,1]>
  %wv = read %w : f32[4,1]
  %bv = read %b : f32[1]
  %xw = matmul %x, %wv : f32[8,1]
  %y = add %xw, %bv : f32[8,1]
  %err = sub %y, %t : f32[8,1]
  %sq = mul %err, %err : f32[8,1]
  %loss = reduce_mean %sq {axes = [0, 1]} : f32[]
  %dw, %db = grad %loss, %wv, %bv : f32[4,1], f32[1]
  %lr = constant {value = dense<0.1> : f32[]} : f32[]
  %mo = constant {value = dense<0.9> : f32[]} : f32[]
  %u1 = apply_momentum %w, %m, %lr, %dw, %mo : f32[4,1]
  %u2 = apply_sgd %b, %lr, %db : f32[1]
  %done = no_op after(%u1, %u2) : token
  %out = identity %loss after(%done) : f32[]
  return %out
}
"#;

    #[test]
    fn reads_become_recvs_and_updates_sends() {
        let s = split(&module(STEP), "step", 2, MIN_SLICE_BYTES).unwrap();
        let text = graphc_ir::printer::print_module(&s.worker);
        assert!(!text.contains("variable"), "{text}");
        assert!(text.contains(r#"recv {key = "ps0/read/w""#), "{text}");
        assert!(text.contains(r#"send %dw {key = "ps0/u0_3""#), "{text}");
        // w and its momentum travel together (16 + 16 bytes) to ps 0; b to ps 1.
        assert_eq!(s.tasks[0].reads.values().collect::<Vec<_>>(), ["m", "w"]);
        assert_eq!(s.tasks[1].reads.values().collect::<Vec<_>>(), ["b"]);
        assert_eq!(s.tasks[0].pushes.keys().collect::<Vec<_>>(), ["ps0/u0_2", "ps0/u0_3", "ps0/u0_4"]);
        assert_eq!(s.tasks[1].bytes, 4);
        let apply = graphc_ir::printer::print_module(&s.tasks[0].module);
        assert!(apply.contains("apply_momentum"), "{apply}");
        assert_eq!(task_of("ps12/u0_1"), Some(12));
        assert_eq!(input_name("ps12/u0_1"), "u0_1");
        // Every process splits the same way.
        assert_eq!(
            s.tasks[0].fingerprint(),
            split(&module(STEP), "step", 2, MIN_SLICE_BYTES).unwrap().tasks[0].fingerprint()
        );
    }

    const ADAM: &str = r#"graph @step(%x: f32[2,5]) -> (loss: f32[]) {
  %w = variable {name = "w", init = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]> : f32[5,2]} : var<f32[5,2]>
  %m = variable {name = "w/m", init = dense<0.0> : f32[5,2]} : var<f32[5,2]>
  %v = variable {name = "w/v", init = dense<0.0> : f32[5,2]} : var<f32[5,2]>
  %t = variable {name = "w/t", init = dense<0.0> : f32[]} : var<f32[]>
  %wv = read %w : f32[5,2]
  %tv = read %t : f32[]
  %y = matmul %x, %wv : f32[2,2]
  %s = reduce_sum %y {axes = [0, 1]} : f32[]
  %loss = add %s, %tv : f32[]
  %dw = grad %loss, %wv : f32[5,2]
  %lr = constant {value = dense<0.1> : f32[]} : f32[]
  %u = apply_adam %w, %m, %v, %t, %lr, %dw : f32[5,2]
  %out = identity %loss after(%u) : f32[]
  return %out
}
"#;

    #[test]
    fn large_variables_are_split_row_wise_with_their_slots() {
        // 40 bytes in slices of 16: 3 slices, at most 2 parts for 2 tasks: rows 0..3 and 3..5.
        let s = split(&module(ADAM), "step", 2, 16).unwrap();
        let worker = graphc_ir::printer::print_module(&s.worker);
        assert!(worker.contains(r#"recv {key = "ps0/read/w/part_0", from = "/job:ps/task:0"} : f32[3,2]"#), "{worker}");
        assert!(worker.contains(r#"key = "ps1/read/w/part_1""#) && worker.contains("concat"), "{worker}");
        assert!(worker.contains("slice %dw {starts = [0, 0], ends = [3, 2]} : f32[3,2]"), "{worker}");
        // The step count is read from part 0's copy only.
        assert!(worker.contains(r#"key = "ps0/read/w/t/part_0""#) && !worker.contains("read/w/t/part_1"), "{worker}");
        let apply = |t: usize| graphc_ir::printer::print_module(&s.tasks[t].module);
        assert!(apply(0).contains("dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : f32[3,2]"), "{}", apply(0));
        assert!(apply(1).contains("dense<[[7.0, 8.0], [9.0, 10.0]]> : f32[2,2]"), "{}", apply(1));
        assert!(apply(1).contains(r#"name = "w/t/part_1""#), "{}", apply(1));
        assert_eq!(s.tasks[1].pushes.keys().collect::<Vec<_>>(), ["ps1/u0p1_4", "ps1/u0p1_5"]);
        assert_eq!(s.tasks[1].pushes["ps1/u0p1_5"].shape, [2, 2]);
        assert_eq!(
            s.partitioned.iter().collect::<Vec<_>>(),
            [(&"w".to_string(), &2), (&"w/m".into(), &2), (&"w/v".into(), &2)]
        );
        // Whole below the slice size, or with one ps task.
        for s in [split(&module(ADAM), "step", 2, 64).unwrap(), split(&module(ADAM), "step", 1, 16).unwrap()] {
            assert!(graphc_ir::printer::print_module(&s.worker).contains(r#"key = "ps0/read/w""#));
        }
    }

    #[test]
    fn what_cannot_be_split_is_refused() {
        let used = STEP.replace("%out = identity %loss after(%done)", "%out = add %loss, %loss after(%done)").replace(
            "%u2 = apply_sgd %b, %lr, %db : f32[1]",
            "%u2 = apply_sgd %b, %lr, %db : f32[1]\n  %z = reduce_sum %u2 {axes = [0]} : f32[]",
        );
        let e = split(&module(&used), "step", 1, MIN_SLICE_BYTES).unwrap_err();
        assert!(e.contains("uses the value"), "{e}");
        let twice = STEP.replace("%u2 = apply_sgd %b, %lr, %db", "%u2 = apply_sgd %w, %lr, %dw");
        let twice = twice.replace(" : f32[1]\n  %done", " : f32[4,1]\n  %done");
        assert!(split(&module(&twice), "step", 1, MIN_SLICE_BYTES).unwrap_err().contains("updates each variable once"));
        let late = STEP.replace(
            "%out = identity %loss after(%done) : f32[]",
            "%late = read %b after(%u2) : f32[1]\n  %out = identity %loss after(%done, %late) : f32[]",
        );
        assert!(
            split(&module(&late), "step", 1, MIN_SLICE_BYTES).unwrap_err().contains("after 'apply_sgd %u2' updates it"),
            "{}",
            split(&module(&late), "step", 1, MIN_SLICE_BYTES).unwrap_err()
        );
        let none = "graph @s(%x: f32[]) -> (loss: f32[]) {\n  return %x\n}\n";
        assert!(split(&module(none), "s", 1, MIN_SLICE_BYTES).unwrap_err().contains("no variables"));
    }
}
