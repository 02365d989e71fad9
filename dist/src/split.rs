//! Between-graph replication's split of a training step: the variables and their updates go
//! to the ps tasks, the rest stays with every worker.
//!
//! Variables are grouped with the others an update touches (an `apply_adam` keeps `var`, `m`,
//! `v` and `step` together) and the groups spread over the ps tasks, largest first onto the
//! least loaded (as TensorFlow's replica device setter spreads them by size). In the worker's
//! step graph a `read` of a variable becomes a `recv` from its ps task, and an update becomes
//! a `send` of each of its tensor operands (the gradient, the learning rate) to the ps task,
//! whose `@apply` graph runs the update on the variable. Keys name the ps task and what they
//! carry: `ps0/read/w1`, `ps0/u3_5` (operand 5 of update 3).

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

/// Splits `step` of `m` over `ps` tasks.
pub fn split(m: &Module, step: &str, ps: usize) -> Result<Split, String> {
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
    let groups = group_variables(g, &vars, &var_of, &updates);
    let task_of_var = spread(&vars, &groups, ps);
    let task_of_update: Vec<usize> = updates.iter().map(|&u| task_of_var[var_of[&g.nodes[u].operands[0]]]).collect();

    let placed = Placed { g, vars: &vars, var_of: &var_of, updates: &updates, task_of_var, task_of_update };
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
    Ok(Split { worker, tasks })
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

/// Each variable's ps task: the groups by size, largest first, each onto the least loaded
/// task (the lowest numbered among equals), so the split is the same in every process.
fn spread(vars: &[(Node, String, TensorType)], groups: &[usize], ps: usize) -> Vec<usize> {
    let mut size: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, (_, _, t)) in vars.iter().enumerate() {
        *size.entry(groups[i]).or_default() += bytes(t);
    }
    let mut order: Vec<(usize, u64)> = size.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut load = vec![0u64; ps];
    let mut task_of_group: HashMap<usize, usize> = HashMap::new();
    for (group, b) in order {
        let t = (0..ps).min_by_key(|&t| (load[t], t)).expect("at least one ps task");
        load[t] += b;
        task_of_group.insert(group, t);
    }
    groups.iter().map(|g| task_of_group[g]).collect()
}

fn ps_device(t: usize) -> String {
    format!("/job:ps/task:{t}")
}

fn internal(e: impl std::fmt::Display) -> String {
    format!("internal error splitting the step: {e}")
}

/// The step's variables and updates, each with its ps task.
struct Placed<'a> {
    g: &'a Graph,
    vars: &'a [(Node, String, TensorType)],
    var_of: &'a HashMap<Value, usize>,
    updates: &'a [Node],
    task_of_var: Vec<usize>,
    task_of_update: Vec<usize>,
}

impl Placed<'_> {
    /// The step graph with reads as recvs and updates as sends.
    fn worker_graph(&self) -> Result<Graph, String> {
        let Placed { g, vars, var_of, updates, task_of_var, task_of_update } = self;
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
                let t = task_of_var[i];
                let spec = NodeSpec::new(Op::Recv, Vec::<Value>::new())
                    .attr("key", Attr::Str(format!("ps{t}/read/{}", vars[i].1)))
                    .attr("from", Attr::Str(ps_device(t)))
                    .declared(vec![Type::Tensor(vars[i].2.clone())])
                    .after(deps)
                    .span(nd.span);
                let r = w.add(body, spec).map_err(internal)?[0];
                if let Some(name) = &g.values[nd.results[0]].name {
                    w.set_name(r, name);
                }
                map.insert(nd.results[0], r);
                continue;
            }
            if let Some(u) = updates.iter().position(|&x| x == n) {
                let t = task_of_update[u];
                let mut sent = Vec::new();
                for (i, v) in nd.operands.iter().enumerate() {
                    if var_of.contains_key(v) {
                        continue;
                    }
                    let spec = NodeSpec::new(Op::Send, vec![map[v]])
                        .attr("key", Attr::Str(format!("ps{t}/u{u}_{i}")))
                        .attr("to", Attr::Str(ps_device(t)))
                        .after(deps.clone())
                        .span(nd.span);
                    sent.push(w.add(body, spec).map_err(internal)?[0]);
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

    /// Ps task `t`'s `@apply`: its variables, and its updates with their tensor operands as inputs.
    fn ps_program(&self, t: usize) -> Result<PsProgram, String> {
        let Placed { g, vars, var_of, updates, task_of_var, task_of_update } = self;
        let mut a = Graph::new(APPLY);
        a.comments = vec![format!(" the variables of ps task {t} and their updates, fed by the workers' pushes")];
        let body = a.body;
        let mut handle: HashMap<Value, Value> = HashMap::new();
        let mut reads = BTreeMap::new();
        let mut held = 0u64;
        for (i, (n, name, ty)) in vars.iter().enumerate() {
            if task_of_var[i] != t {
                continue;
            }
            let h = a.import_node(body, g, *n, vec![], vec![]).map_err(internal)?[0];
            handle.insert(g.nodes[*n].results[0], h);
            reads.insert(format!("ps{t}/read/{name}"), name.clone());
            held += bytes(ty);
        }
        let mut pushes = BTreeMap::new();
        let mut outputs = Vec::new();
        for (u, &n) in updates.iter().enumerate() {
            if task_of_update[u] != t {
                continue;
            }
            let nd = &g.nodes[n];
            let mut operands = Vec::with_capacity(nd.operands.len());
            for (i, v) in nd.operands.iter().enumerate() {
                if let Some(&h) = handle.get(v) {
                    operands.push(h);
                    continue;
                }
                if var_of.contains_key(v) {
                    return Err(internal(format!("{} touches variables on two ps tasks", g.describe(n))));
                }
                let key = format!("ps{t}/u{u}_{i}");
                let Type::Tensor(ty) = &g.values[*v].ty else {
                    return Err(format!("{}: operand {i} is not a tensor", g.describe(n)));
                };
                operands.push(a.add_input(input_name(&key), Type::Tensor(ty.clone())));
                pushes.insert(key, ty.clone());
            }
            let r = a.import_node(body, g, n, operands, vec![]).map_err(internal)?[0];
            outputs.push((format!("u{u}"), r));
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
        let s = split(&module(STEP), "step", 2).unwrap();
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
        assert_eq!(s.tasks[0].fingerprint(), split(&module(STEP), "step", 2).unwrap().tasks[0].fingerprint());
    }

    #[test]
    fn what_cannot_be_split_is_refused() {
        let used = STEP.replace("%out = identity %loss after(%done)", "%out = add %loss, %loss after(%done)").replace(
            "%u2 = apply_sgd %b, %lr, %db : f32[1]",
            "%u2 = apply_sgd %b, %lr, %db : f32[1]\n  %z = reduce_sum %u2 {axes = [0]} : f32[]",
        );
        let e = split(&module(&used), "step", 1).unwrap_err();
        assert!(e.contains("uses the value"), "{e}");
        let twice = STEP.replace("%u2 = apply_sgd %b, %lr, %db", "%u2 = apply_sgd %w, %lr, %dw");
        let twice = twice.replace(" : f32[1]\n  %done", " : f32[4,1]\n  %done");
        assert!(split(&module(&twice), "step", 1).unwrap_err().contains("updates each variable once"));
        let late = STEP.replace(
            "%out = identity %loss after(%done) : f32[]",
            "%late = read %b after(%u2) : f32[1]\n  %out = identity %loss after(%done, %late) : f32[]",
        );
        assert!(
            split(&module(&late), "step", 1).unwrap_err().contains("after 'apply_sgd %u2' updates it"),
            "{}",
            split(&module(&late), "step", 1).unwrap_err()
        );
        let none = "graph @s(%x: f32[]) -> (loss: f32[]) {\n  return %x\n}\n";
        assert!(split(&module(none), "s", 1).unwrap_err().contains("no variables"));
    }
}
