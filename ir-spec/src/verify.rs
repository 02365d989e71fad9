//! The verifier. A verifier error on IR that a pass produced is a bug in that pass.
//!
//! Invariants checked, structure first:
//! 1. Every live node sits in exactly one region, whose list holds it; its `parent` agrees.
//! 2. Every region but a graph body is owned by exactly one node, with `parent` set to it.
//! 3. Every operand, control dependency and yielded value is defined in the same region,
//!    earlier (a parameter, or a result of an earlier node): regions are isolated from the
//!    values around them, and the graph has no cycles.
//! 4. Use lists agree with operands, control dependencies and yields.
//! 5. Value names are unique in a graph; output names are unique and as many as the outputs.
//!
//! Then types:
//! 6. Every node passes its op's arity, attribute and region checks and its type rule, and its
//!    result types are those the rule gives.
//! 7. Fusion kernels hold only pure ops: no state, communication or control flow.
//!
//! Then across the module:
//! 8. Graph names are unique.
//! 9. Variables and queues of one name agree on their type (and a queue on its capacity) in
//!    every graph that declares them.
//! 10. A rendezvous key has at most one send and one recv; when both are present they carry
//!     the same type. (A module may hold only some partitions, so a lone send or recv is fine.)

use crate::diag::{Diagnostic, Span};
use crate::graph::{Graph, Module, Node, Region, Use, Value, ValueDef};
use crate::ops::{Op, OpKind};
use crate::types::Type;
use std::collections::{HashMap, HashSet};

// Their home was this module before the node builder needed them too.
pub use crate::infer::{infer_checked, normalize_attrs};

/// Where a graph-level diagnostic points: the span when the item came from source text.
fn at(span: Span, msg: String) -> Diagnostic {
    if span == Span::default() {
        Diagnostic::error_unlocated(msg)
    } else {
        Diagnostic::error(span, msg)
    }
}

/// Verifies one graph; every problem found is returned.
pub fn verify_graph(g: &Graph) -> Vec<Diagnostic> {
    let mut v = GraphVerifier {
        g,
        diags: Vec::new(),
        seen: vec![None; g.nodes.len()],
        defined: Defined { visit: vec![0; g.values.len()], visits: 0 },
    };
    v.region(g.body, None);
    v.names_and_outputs();
    v.diags
}

struct GraphVerifier<'a> {
    g: &'a Graph,
    diags: Vec<Diagnostic>,
    /// Live node -> its region, filled by the walk (by arena index: hash maps of a few hundred
    /// thousand nodes missed the cache on nearly every lookup).
    seen: Vec<Option<Region>>,
    defined: Defined,
}

/// The values defined so far in each region being walked, as the walk of the region's visit
/// number that defined each value, by arena index. A value defined again in another visit
/// (a broken graph's) goes to that visit's own set, `Scope::again`.
struct Defined {
    visit: Vec<u32>,
    visits: u32,
}

/// The values visible in one region's walk.
struct Scope {
    visit: u32,
    again: HashSet<Value>,
}

impl Defined {
    fn open(&mut self) -> Scope {
        self.visits += 1;
        Scope { visit: self.visits, again: HashSet::new() }
    }

    fn insert(&mut self, scope: &mut Scope, v: Value) {
        let slot = &mut self.visit[v.as_u32() as usize];
        if *slot == 0 {
            *slot = scope.visit;
        } else if *slot != scope.visit {
            scope.again.insert(v);
        }
    }

    fn contains(&self, scope: &Scope, v: Value) -> bool {
        self.visit.get(v.as_u32() as usize) == Some(&scope.visit) || scope.again.contains(&v)
    }
}

impl GraphVerifier<'_> {
    fn err(&mut self, span: Span, msg: String) {
        let g = self.g;
        self.diags.push(at(span, format!("in graph @{}: {msg}", g.name)));
    }

    fn region(&mut self, r: Region, owner: Option<Node>) {
        let g = self.g;
        let rd = &g.regions[r];
        if rd.parent != owner {
            self.err(rd.span, format!("{r} records owner {:?} but is held by {:?}", rd.parent, owner));
        }
        // Values visible in this region so far.
        let mut defined = self.defined.open();
        for &p in &rd.params {
            self.defined.insert(&mut defined, p);
        }
        for (i, &p) in rd.params.iter().enumerate() {
            if g.values[p].def != ValueDef::Param(r, i as u32) {
                self.err(rd.span, format!("parameter {i} of {r} has a wrong definition record"));
            }
        }
        for &n in &rd.nodes {
            if let Some(prev) = self.seen[n.as_u32() as usize].replace(r) {
                self.err(g.nodes[n].span, format!("node {} appears in both {prev} and {r}", g.describe(n)));
                continue;
            }
            let nd = &g.nodes[n];
            if nd.parent != r {
                self.err(nd.span, format!("node {} records region {} but sits in {r}", g.describe(n), nd.parent));
            }
            // (What a message names is formatted only for a message.)
            for (i, &v) in nd.operands.iter().enumerate() {
                if !self.defined.contains(&defined, v) {
                    self.in_scope(&defined, r, v, nd.span, &format!("operand {i} of {}", g.describe(n)));
                }
                self.use_recorded(v, Use::Operand(n, i as u32), nd.span);
            }
            for (i, &v) in nd.control_deps.iter().enumerate() {
                if !self.defined.contains(&defined, v) {
                    self.in_scope(&defined, r, v, nd.span, &format!("control dependency {i} of {}", g.describe(n)));
                }
                self.use_recorded(v, Use::Control(n, i as u32), nd.span);
            }
            for &sub in &nd.regions {
                self.region(sub, Some(n));
            }
            self.types(n);
            if nd.op == Op::Fusion {
                self.fusion_is_pure(n);
            }
            for (i, &res) in nd.results.iter().enumerate() {
                if g.values[res].def != ValueDef::Result(n, i as u32) {
                    self.err(nd.span, format!("result {i} of {} has a wrong definition record", g.describe(n)));
                }
                self.defined.insert(&mut defined, res);
            }
        }
        for (i, &v) in rd.yields.iter().enumerate() {
            let what = if owner.is_none() {
                format!("graph output {i}")
            } else {
                format!("yielded value {i} of region '{}'", rd.label)
            };
            self.in_scope(&defined, r, v, rd.span, &what);
            self.use_recorded(v, Use::Yield(r, i as u32), rd.span);
        }
    }

    fn in_scope(&mut self, defined: &Scope, region: Region, v: Value, span: Span, what: &str) {
        if self.defined.contains(defined, v) {
            return;
        }
        let g = self.g;
        let (def_region, live) = match g.values[v].def {
            ValueDef::Result(n, _) => {
                let p = g.nodes[n].parent;
                (p, g.regions[p].nodes.contains(&n))
            }
            ValueDef::Param(r, _) => (r, true),
        };
        let msg = if !live {
            format!("{what} uses {v}, the result of a removed node")
        } else if def_region != region {
            format!("{what} uses a value defined outside its region; regions are isolated: pass it in as a region parameter")
        } else if let Err(n) = crate::topo::topological_order(g, region) {
            format!("{what} depends on itself: the graph has a cycle through {}", g.describe(n))
        } else {
            format!("{what} uses a value before it is defined; move its definition earlier")
        };
        self.err(span, msg);
    }

    fn use_recorded(&mut self, v: Value, u: Use, span: Span) {
        if !self.g.uses(v).contains(&u) {
            self.err(span, format!("use list of {v} misses {u:?}"));
        }
    }

    fn types(&mut self, n: Node) {
        let g = self.g;
        let nd = &g.nodes[n];
        let declared: Vec<Type> = nd.results.iter().map(|&v| g.values[v].ty.clone()).collect();
        match g.infer(nd.op, &nd.operands, &nd.attrs, &nd.regions, Some(&declared)) {
            Err(e) => self.err(nd.span, format!("node {}: {}", g.describe(n), e.message)),
            Ok(types) if types != declared => {
                let show = |ts: &[Type]| ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
                self.err(
                    nd.span,
                    format!(
                        "node {} has result types ({}) but its type rule gives ({})",
                        g.describe(n),
                        show(&declared),
                        show(&types)
                    ),
                );
            }
            Ok(_) => {}
        }
    }

    fn fusion_is_pure(&mut self, n: Node) {
        let g = self.g;
        for &r in &g.nodes[n].regions {
            for &inner in &g.regions[r].nodes {
                let op = g.nodes[inner].op;
                if op.is_stateful() || matches!(op.kind(), OpKind::Control | OpKind::Communication) || op == Op::Fusion
                {
                    self.err(
                        g.nodes[inner].span,
                        format!("a fusion kernel holds only pure ops, but it holds {}", g.describe(inner)),
                    );
                }
            }
        }
    }

    fn names_and_outputs(&mut self) {
        let g = self.g;
        let mut names: HashMap<&str, Value> = HashMap::new();
        for (v, vd) in g.values.iter() {
            if let Some(name) = &vd.name {
                if names.insert(name, v).is_some() {
                    self.err(vd.span, format!("value name %{name} is used twice"));
                }
            }
        }
        let n_out = g.output_values().len();
        if g.outputs.len() != n_out {
            self.err(g.span, format!("{} output names for {n_out} output values", g.outputs.len()));
        }
        let mut out_names = HashMap::new();
        for o in &g.outputs {
            if let Some(prev) = out_names.insert(o.name.clone(), o.span) {
                let d = at(o.span, format!("in graph @{}: output name '{}' is used twice", g.name, o.name));
                self.diags.push(if prev == Span::default() { d } else { d.with_note(prev, "first used here") });
            }
        }
    }
}

/// Verifies every graph of a module and what ties them together.
pub fn verify_module(m: &Module) -> Vec<Diagnostic> {
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut graph_names: HashMap<&str, Span> = HashMap::new();
    for g in &m.graphs {
        if let Some(prev) = graph_names.insert(&g.name, g.span) {
            let d = at(g.span, format!("graph @{} is defined twice", g.name));
            diags.push(if prev == Span::default() { d } else { d.with_note(prev, "first defined here") });
        }
        diags.extend(verify_graph(g));
    }
    diags.extend(check_module_links(m));
    diags
}

/// A stateful declaration or rendezvous endpoint seen while checking a module.
struct Seen<'a> {
    ty: Type,
    extra: Option<i64>,
    span: Span,
    graph: &'a str,
}

/// Checks 9 and 10: what ties the graphs of a module together.
pub fn check_module_links(m: &Module) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut state: HashMap<(Op, String), Seen> = HashMap::new();
    let mut sends: HashMap<String, Seen> = HashMap::new();
    let mut recvs: HashMap<String, Seen> = HashMap::new();
    for g in &m.graphs {
        for n in g.walk() {
            let nd = &g.nodes[n];
            match nd.op {
                Op::Variable | Op::Queue => {
                    let (Some(name), Some(&res)) = (nd.attrs.str("name"), nd.results.first()) else { continue };
                    let seen = Seen {
                        ty: g.values[res].ty.clone(),
                        extra: nd.attrs.int("capacity"),
                        span: nd.span,
                        graph: &g.name,
                    };
                    let what = if nd.op == Op::Variable { "variable" } else { "queue" };
                    match state.get(&(nd.op, name.to_string())) {
                        Some(prev) if prev.ty != seen.ty || prev.extra != seen.extra => {
                            let msg = if prev.ty != seen.ty {
                                format!(
                                    "{what} \"{name}\" is declared as {} in graph @{} but as {} in graph @{}",
                                    seen.ty, g.name, prev.ty, prev.graph
                                )
                            } else {
                                format!(
                                    "queue \"{name}\" has capacity {} in graph @{} but {} in graph @{}",
                                    seen.extra.unwrap_or(0),
                                    g.name,
                                    prev.extra.unwrap_or(0),
                                    prev.graph
                                )
                            };
                            let mut d = at(nd.span, msg);
                            if prev.span != Span::default() {
                                d = d.with_note(prev.span, "the other declaration");
                            }
                            diags.push(d);
                        }
                        Some(_) => {}
                        None => {
                            state.insert((nd.op, name.to_string()), seen);
                        }
                    }
                }
                Op::Send | Op::Recv => {
                    let Some(key) = nd.attrs.str("key") else { continue };
                    let ty = if nd.op == Op::Send {
                        nd.operands.first().map(|&v| g.values[v].ty.clone())
                    } else {
                        nd.results.first().map(|&v| g.values[v].ty.clone())
                    };
                    let Some(ty) = ty else { continue };
                    let table = if nd.op == Op::Send { &mut sends } else { &mut recvs };
                    let seen = Seen { ty, extra: None, span: nd.span, graph: &g.name };
                    if let Some(prev) = table.get(key) {
                        let place = if prev.graph == g.name {
                            format!("in graph @{}", g.name)
                        } else {
                            format!("in graphs @{} and @{}", prev.graph, g.name)
                        };
                        let mut d = at(
                            nd.span,
                            format!(
                                "rendezvous key \"{key}\" has two {}s {place}; keys are unique per direction",
                                nd.op.name()
                            ),
                        );
                        if prev.span != Span::default() {
                            d = d.with_note(prev.span, "the other one");
                        }
                        diags.push(d);
                    } else {
                        table.insert(key.to_string(), seen);
                    }
                }
                _ => {}
            }
        }
    }
    for (key, s) in &sends {
        if let Some(r) = recvs.get(key) {
            if r.ty != s.ty {
                let mut d = at(
                    r.span,
                    format!("recv of key \"{key}\" expects {} but the send (graph @{}) sends {}", r.ty, s.graph, s.ty),
                );
                if s.span != Span::default() {
                    d = d.with_note(s.span, "the send");
                }
                diags.push(d);
            }
        }
    }
    diags.sort_by_key(|d| d.span.map(|s| s.start));
    diags
}
