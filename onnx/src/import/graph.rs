//! The graph-level half of import: the IR graph being built, its inputs, initializers and
//! outputs, ONNX names to IR values, and adding nodes, which evaluates each node whose operands
//! are all known at import time (keeping the result as a constant) so that later nodes can use
//! it where graphc needs an attribute. The converters build on the helpers here.

use super::{ImportOptions, Result};
use crate::proto::{GraphProto, NodeProto, ValueInfoProto};
use crate::tensor::{dtype_of, tensor_from_proto};
use graphc_ir::graph::NodeData;
use graphc_ir::{Attr, DType, Graph, Module, NodeSpec, Op, TensorType, Type, Value};
use graphc_runtime::{kernels, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

/// Results of evaluating a node at import time may be kept as constants up to this size.
const CONST_LIMIT: usize = 1 << 20;

/// One graph being imported.
pub(super) struct Importer<'a> {
    pub(super) g: Graph,
    pub(super) env: HashMap<String, Value>,
    pub(super) consts: HashMap<Value, Tensor>,
    /// Values computed (or found unknowable) on demand by [`Importer::known`].
    derived: RefCell<HashMap<Value, Option<Tensor>>>,
    pub(super) base: &'a Path,
    pub(super) opset: i64,
    pub(super) options: &'a ImportOptions,
}

impl<'a> Importer<'a> {
    pub(super) fn new(graph: &GraphProto, base: &'a Path, opset: i64, options: &'a ImportOptions) -> Result<Self> {
        let mut imp = Importer {
            g: Graph::new(sanitize_graph_name(graph.name.as_deref().unwrap_or("main"))),
            env: HashMap::new(),
            consts: HashMap::new(),
            derived: RefCell::new(HashMap::new()),
            base,
            opset,
            options,
        };
        let body = imp.g.body;
        let init_names: Vec<&str> = graph.initializer.iter().filter_map(|t| t.name.as_deref()).collect();
        // Symbolic dims: `--shape` sizes, then those the fed arrays show (one size per name).
        let mut sizes = options.dims.clone();
        for vi in &graph.input {
            let name = vi.name.clone().unwrap_or_default();
            // Before IR version 4 initializers were listed as inputs too; they are weights.
            if init_names.contains(&name.as_str()) {
                continue;
            }
            let fed = options.input_shapes.get(&name).map(Vec::as_slice);
            let ty = value_type(vi, &mut sizes, fed).map_err(|e| format!("graph input '{name}': {e}"))?;
            let v = imp.g.add_input(&name, Type::Tensor(ty));
            imp.env.insert(name, v);
        }
        if !graph.sparse_initializer.is_empty() {
            return Err("sparse initializers are not supported".into());
        }
        for init in &graph.initializer {
            let name = init.name.clone().unwrap_or_default();
            let t = tensor_from_proto(init, base).map_err(|e| format!("initializer '{name}': {e}"))?;
            // Integer initializers (shapes, axes, indices) stay constants: imports need them.
            let v = if imp.options.weights_as_variables && t.dtype().is_float() {
                let ty = t.ty();
                let var = imp
                    .g
                    .add(
                        body,
                        NodeSpec::new(Op::Variable, vec![])
                            .attr("name", Attr::Str(name.clone()))
                            .attr("init", Attr::Tensor(t.to_literal()))
                            .declared(vec![Type::Var(ty)]),
                    )
                    .map_err(|e| e.message)?[0];
                imp.g.add(body, NodeSpec::new(Op::Read, vec![var])).map_err(|e| e.message)?[0]
            } else {
                imp.constant(t.clone())?
            };
            imp.g.set_name(v, &name);
            imp.env.insert(name, v);
        }
        Ok(imp)
    }

    pub(super) fn finish(mut self, graph: &GraphProto) -> Result<Module> {
        let mut outs = Vec::new();
        for vi in &graph.output {
            let name = vi.name.clone().unwrap_or_default();
            let v = self.value(&name).map_err(|_| format!("graph output '{name}' is computed by no node"))?;
            outs.push((name, v));
        }
        self.g.set_outputs(outs);
        Ok(Module { graphs: vec![self.g], end_comments: vec![] })
    }

    pub(super) fn value(&self, name: &str) -> Result<Value> {
        self.env
            .get(name)
            .copied()
            .ok_or_else(|| format!("input '{name}' is not defined by any earlier node, input or initializer"))
    }

    pub(super) fn input(&self, n: &NodeProto, i: usize) -> Result<Value> {
        match n.input.get(i).filter(|s| !s.is_empty()) {
            Some(name) => self.value(name),
            None => Err(format!("input {i} is required")),
        }
    }

    /// An optional input: absent, or named by the empty string.
    pub(super) fn opt_input(&self, n: &NodeProto, i: usize) -> Result<Option<Value>> {
        match n.input.get(i).filter(|s| !s.is_empty()) {
            Some(name) => self.value(name).map(Some),
            None => Ok(None),
        }
    }

    /// The value of an input that must be known at import time: a constant, a graph input
    /// whose value was given (`--input`), or computed from those by the nodes that produce it.
    pub(super) fn const_input(&self, n: &NodeProto, i: usize, what: &str) -> Result<Option<Tensor>> {
        let Some(v) = self.opt_input(n, i)? else { return Ok(None) };
        if let Some(t) = self.known(v) {
            return Ok(Some(t));
        }
        Err(match self.unknown_input(v) {
            Some(name) => format!(
                "input {i} ({what}) comes from graph input '{name}', whose value graphc needs when importing; give it with --input"
            ),
            None => format!(
                "input {i} ({what}) must be known at import time (an initializer, a graph input given with --input, or computed from them)"
            ),
        })
    }

    /// A graph input without a given value that `v` is computed from, by name.
    pub(super) fn unknown_input(&self, v: Value) -> Option<&str> {
        let mut stack = vec![v];
        let mut seen = std::collections::HashSet::new();
        while let Some(v) = stack.pop() {
            if !seen.insert(v) || self.consts.contains_key(&v) {
                continue;
            }
            if self.g.inputs().contains(&v) {
                let name = self.g.values[v].name.as_deref()?;
                if !self.options.known_inputs.contains_key(name) {
                    return Some(name);
                }
            } else if let Some(node) = self.g.producer(v) {
                stack.extend(&self.g.nodes[node].operands);
            }
        }
        None
    }

    /// `v`'s value where the import can compute it: folded constants, given graph inputs, and
    /// the kernels between them (each result within the constant limit). The walk is
    /// iterative (an unrolled loop makes long chains) and what it computes, or fails to, is
    /// kept in `derived`: values never change once added, so a later query reuses it.
    pub(super) fn known(&self, v: Value) -> Option<Tensor> {
        let mut derived = self.derived.borrow_mut();
        let resolved = |u: Value, derived: &HashMap<Value, Option<Tensor>>| {
            self.consts.contains_key(&u) || derived.contains_key(&u)
        };
        // (value, whether its operands have been pushed)
        let mut stack = vec![(v, false)];
        while let Some((u, expanded)) = stack.pop() {
            if resolved(u, &derived) {
                continue;
            }
            if self.g.inputs().contains(&u) {
                let given = self.g.values[u].name.as_deref().and_then(|name| self.options.known_inputs.get(name));
                derived.insert(u, given.cloned());
                continue;
            }
            let Some(node) = self.g.producer(u).map(|n| &self.g.nodes[n]) else {
                derived.insert(u, None);
                continue;
            };
            if !expanded {
                stack.push((u, true));
                stack.extend(node.operands.iter().filter(|&&o| !resolved(o, &derived)).map(|&o| (o, false)));
                continue;
            }
            let inputs: Option<Vec<Tensor>> = node
                .operands
                .iter()
                .map(|o| self.consts.get(o).cloned().or_else(|| derived.get(o).cloned().flatten()))
                .collect();
            let out = inputs.and_then(|inputs| self.evaluate(node, &inputs));
            for (i, &r) in node.results.iter().enumerate() {
                derived.insert(r, out.as_ref().map(|o| o[i].clone()));
            }
        }
        self.consts.get(&v).cloned().or_else(|| derived.get(&v).cloned().flatten())
    }

    /// A node's results from its operands' values, where it is a kernel and every result
    /// fits the constant limit.
    fn evaluate(&self, node: &NodeData, inputs: &[Tensor]) -> Option<Vec<Tensor>> {
        if !kernels::is_kernel(node.op) || node.op == Op::Constant {
            return None;
        }
        let types: Vec<TensorType> =
            node.results.iter().map(|&r| self.g.values[r].ty.as_tensor().cloned()).collect::<Option<_>>()?;
        if !types.iter().all(|t| t.num_elements().is_some_and(|e| e as usize <= CONST_LIMIT)) {
            return None;
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let out = kernels::eval(node.op, &node.attrs, &refs, &types).ok()?;
        (out.len() == node.results.len()).then_some(out)
    }

    pub(super) fn const_ints(&self, n: &NodeProto, i: usize, what: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.const_input(n, i, what)?.map(|t| t.to_f64_vec().into_iter().map(|x| x as i64).collect()))
    }

    pub(super) fn ty(&self, v: Value) -> Result<TensorType> {
        self.g.values[v].ty.as_tensor().cloned().ok_or("not a tensor".into())
    }

    pub(super) fn shape(&self, v: Value) -> Result<Vec<i64>> {
        Ok(self.ty(v)?.shape.iter().map(|&d| d as i64).collect())
    }

    /// Adds a node and, when all its operands are known, evaluates it.
    pub(super) fn emit(&mut self, spec: NodeSpec) -> Result<Vec<Value>> {
        let op = spec.op;
        let known: Option<Vec<Tensor>> = spec.operands.iter().map(|v| self.consts.get(v).cloned()).collect();
        let attrs = spec.attrs.clone();
        let body = self.g.body;
        let node = self.g.add_node(body, spec).map_err(|e| e.message)?;
        let results = self.g.nodes[node].results.clone();
        if let Some(inputs) = known.filter(|_| kernels::is_kernel(op) && op != Op::Constant) {
            let types: Vec<TensorType> =
                results.iter().filter_map(|&v| self.g.values[v].ty.as_tensor().cloned()).collect();
            if types.iter().all(|t| t.num_elements().is_some_and(|e| e as usize <= CONST_LIMIT)) {
                let refs: Vec<&Tensor> = inputs.iter().collect();
                if let Ok(out) = kernels::eval(op, &attrs, &refs, &types) {
                    for (&v, t) in results.iter().zip(out) {
                        self.consts.insert(v, t);
                    }
                }
            }
        }
        Ok(results)
    }

    pub(super) fn emit1(&mut self, spec: NodeSpec) -> Result<Value> {
        Ok(self.emit(spec)?[0])
    }

    pub(super) fn constant(&mut self, t: Tensor) -> Result<Value> {
        let v = self.emit1(NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(t.to_literal())))?;
        self.consts.insert(v, t);
        Ok(v)
    }

    /// A one-element tensor as a scalar constant.
    pub(super) fn reshape_const(&mut self, t: Tensor) -> Result<Value> {
        let scalar = graphc_runtime::map_dtype!(&t, a => a.clone().into_shape_with_order(ndarray::IxDyn(&[])).map_err(|e| e.to_string())?);
        self.constant(scalar)
    }

    pub(super) fn scalar(&mut self, dtype: DType, x: f64) -> Result<Value> {
        let t = graphc_runtime::kernels::cast(&Tensor::F64(ndarray::arr0(x).into_dyn()), dtype);
        self.constant(t)
    }

    /// `x` converted to `to` (`x` itself when it has that type).
    pub(super) fn cast(&mut self, x: Value, to: DType) -> Result<Value> {
        if self.ty(x)?.dtype == to {
            return Ok(x);
        }
        self.emit1(NodeSpec::new(Op::Cast, vec![x]).attr("to", Attr::DType(to)))
    }

    pub(super) fn unary(&mut self, op: Op, x: Value) -> Result<Value> {
        self.emit1(NodeSpec::new(op, vec![x]))
    }

    pub(super) fn binary(&mut self, op: Op, a: Value, b: Value) -> Result<Value> {
        self.emit1(NodeSpec::new(op, vec![a, b]))
    }

    pub(super) fn reshape(&mut self, x: Value, shape: Vec<i64>) -> Result<Value> {
        self.emit1(NodeSpec::new(Op::Reshape, vec![x]).attr("shape", Attr::Ints(shape)))
    }

    pub(super) fn transpose(&mut self, x: Value, perm: Vec<i64>) -> Result<Value> {
        self.emit1(NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(perm)))
    }

    /// `x[.., start..end:step, ..]` along `axis`.
    pub(super) fn slice_axis(&mut self, x: Value, axis: usize, start: i64, end: i64, step: i64) -> Result<Value> {
        let dims = self.shape(x)?;
        let (mut starts, mut steps) = (vec![0; dims.len()], vec![1; dims.len()]);
        let mut ends = dims;
        (starts[axis], ends[axis], steps[axis]) = (start, end, step);
        self.emit1(
            NodeSpec::new(Op::Slice, vec![x])
                .attr("starts", Attr::Ints(starts))
                .attr("ends", Attr::Ints(ends))
                .attr("steps", Attr::Ints(steps)),
        )
    }

    /// `x[.., at, ..]` along `axis`, that axis dropped.
    pub(super) fn take(&mut self, x: Value, axis: usize, at: i64) -> Result<Value> {
        let idx = self.constant(Tensor::I64(ndarray::arr0(at).into_dyn()))?;
        self.emit1(NodeSpec::new(Op::Gather, vec![x, idx]).attr("axis", Attr::Int(axis as i64)))
    }

    pub(super) fn reduce(&mut self, op: Op, x: Value, axes: Vec<i64>, keep: bool) -> Result<Value> {
        self.emit1(NodeSpec::new(op, vec![x]).attr("axes", Attr::Ints(axes)).attr("keep_dims", Attr::Bool(keep)))
    }

    pub(super) fn bind(&mut self, n: &NodeProto, values: Vec<Value>) -> Result<()> {
        for (i, name) in n.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let v = *values.get(i).ok_or(format!("output {i} ('{name}') is not supported"))?;
            // A value may carry one name; an alias (Identity of a graph input) gets a node.
            let v = if self.g.values[v].name.is_some() { self.unary(Op::Identity, v)? } else { v };
            self.g.set_name(v, name);
            self.env.insert(name.clone(), v);
        }
        Ok(())
    }
}

pub(super) fn norm_axis(axis: i64, rank: usize) -> Result<usize> {
    graphc_ir::shape::normalize_axis(axis, rank)
}

/// The tensor type of a graph input: a supported element type and static dims. A symbolic dim
/// takes its size from `sizes` (`--shape N=1`, or an earlier input's fed array), else from
/// the array `fed` that will be fed (recorded in `sizes` for the inputs after); an unknown dim
/// from `fed` too.
fn value_type(vi: &ValueInfoProto, sizes: &mut HashMap<String, u64>, fed: Option<&[u64]>) -> Result<TensorType> {
    let tp = vi.r#type.as_ref().ok_or("it has no type")?;
    let t = tp.tensor_type.as_ref().ok_or("only tensors are supported (not sequences, maps or optionals)")?;
    let dtype = dtype_of(t.elem_type.unwrap_or(0))?;
    let shape = t.shape.as_ref().ok_or("its shape is unknown; graphc needs static shapes")?;
    let fed = fed.filter(|f| f.len() == shape.dim.len());
    let mut dims = Vec::new();
    for (i, d) in shape.dim.iter().enumerate() {
        match (d.dim_value, &d.dim_param) {
            (Some(v), _) if v >= 0 => dims.push(v as u64),
            (_, Some(p)) if sizes.contains_key(p) => {
                let size = sizes[p];
                if let Some(f) = fed.filter(|f| f[i] != size) {
                    return Err(format!("dim {i} is '{p}' = {size}, but the array fed has {} there", f[i]));
                }
                dims.push(size)
            }
            (_, Some(p)) if fed.is_some() => {
                let size = fed.map_or(0, |f| f[i]);
                sizes.insert(p.clone(), size);
                dims.push(size)
            }
            (_, Some(p)) => {
                return Err(format!(
                    "dim {i} is symbolic ('{p}'); give it a size with --shape {p}=SIZE, or feed the input (graphc needs static shapes)"
                ))
            }
            _ if fed.is_some() => dims.push(fed.map_or(0, |f| f[i])),
            _ => return Err(format!("dim {i} is unknown; graphc needs static shapes")),
        }
    }
    Ok(TensorType::new(dtype, dims))
}

fn sanitize_graph_name(s: &str) -> String {
    let t: String = s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if t.is_empty() || t.starts_with(|c: char| c.is_ascii_digit()) {
        format!("g_{t}")
    } else {
        t
    }
}
