//! Building the adjoint graph: [`Emit`] inserts nodes into one region at a moving position,
//! each with the span of the node being differentiated, so a type error in a rule's output
//! points at the op whose gradient it is. The rules and the reverse sweep share it.

use graphc_ir::{Attr, DType, Graph, Node, NodeSpec, Op, Region, Span, TensorData, TensorLiteral, TensorType, Value};

/// Why a gradient could not be built: a message about one node.
#[derive(Clone, Debug)]
pub struct Failure {
    pub node: Node,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Failure>;

/// The reverse sweep over a region, handed to the rules that differentiate regions (`cond`,
/// `while`) so that they need not depend on the module that calls them: from adjoints of some
/// values (`seeds`), the adjoints of `wrts` (`None` where nothing depends on one).
pub type Backprop = fn(&mut Emit<'_>, &[(Value, Value)], &[Value]) -> Result<Vec<Option<Value>>>;

/// Inserts nodes into `region` at `at`, moving past each one.
pub struct Emit<'g> {
    pub g: &'g mut Graph,
    pub region: Region,
    pub at: usize,
    /// The node being differentiated: blamed for failures, its span given to new nodes.
    pub blame: Node,
}

impl<'g> Emit<'g> {
    pub fn new(g: &'g mut Graph, region: Region, at: usize, blame: Node) -> Self {
        Emit { g, region, at, blame }
    }

    pub fn fail<T>(&self, message: impl Into<String>) -> Result<T> {
        Err(Failure { node: self.blame, message: message.into() })
    }

    fn span(&self) -> Span {
        self.g.nodes[self.blame].span
    }

    /// Adds a node, returning its results. A type error here is a bug in a rule; it names the
    /// op being differentiated.
    pub fn node(&mut self, spec: NodeSpec) -> Result<Vec<Value>> {
        let op = spec.op;
        let spec = spec.span(self.span());
        match self.g.insert_node(self.region, self.at, spec) {
            Ok(n) => {
                self.at += 1;
                Ok(self.g.nodes[n].results.clone())
            }
            Err(e) => {
                let of = self.g.nodes[self.blame].op.name();
                self.fail(format!("internal error: the gradient of '{of}' built an ill-typed '{}': {e}", op.name()))
            }
        }
    }

    /// A node with one result and these attributes.
    pub fn op(&mut self, op: Op, operands: &[Value], attrs: &[(&str, Attr)]) -> Result<Value> {
        let mut spec = NodeSpec::new(op, operands.to_vec());
        for (k, v) in attrs {
            spec = spec.attr(k, v.clone());
        }
        Ok(self.node(spec)?[0])
    }

    pub fn ty(&self, v: Value) -> TensorType {
        self.g.value_type(v).as_tensor().cloned().expect("gradients flow through tensors only")
    }

    pub fn shape(&self, v: Value) -> Vec<u64> {
        self.ty(v).shape
    }

    pub fn dtype(&self, v: Value) -> DType {
        self.ty(v).dtype
    }

    /// A constant of type `ty` with every element `x`.
    pub fn splat(&mut self, ty: &TensorType, x: f64) -> Result<Value> {
        self.literal(ty.clone(), TensorData::from_f64(ty.dtype, x))
    }

    pub fn literal(&mut self, ty: TensorType, data: TensorData) -> Result<Value> {
        match TensorLiteral::new(ty, data) {
            Ok(lit) => self.op(Op::Constant, &[], &[("value", Attr::Tensor(lit))]),
            Err(e) => self.fail(format!("internal error: a gradient constant: {e}")),
        }
    }

    /// A scalar of `dtype`.
    pub fn scalar(&mut self, dtype: DType, x: f64) -> Result<Value> {
        self.splat(&TensorType::scalar(dtype), x)
    }

    /// Zeros of `v`'s type.
    pub fn zeros_like(&mut self, v: Value) -> Result<Value> {
        let ty = self.ty(v);
        self.splat(&ty, 0.0)
    }

    pub fn add(&mut self, a: Value, b: Value) -> Result<Value> {
        self.op(Op::Add, &[a, b], &[])
    }

    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value> {
        self.op(Op::Sub, &[a, b], &[])
    }

    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value> {
        self.op(Op::Mul, &[a, b], &[])
    }

    pub fn div(&mut self, a: Value, b: Value) -> Result<Value> {
        self.op(Op::Div, &[a, b], &[])
    }

    pub fn neg(&mut self, a: Value) -> Result<Value> {
        self.op(Op::Neg, &[a], &[])
    }

    /// `a * x` for a number `x` in `a`'s dtype.
    pub fn scale(&mut self, a: Value, x: f64) -> Result<Value> {
        let s = self.scalar(self.dtype(a), x)?;
        self.mul(a, s)
    }

    /// `cond ? a : zero`, or `cond ? zero : a` when `keep_where` is false.
    pub fn mask(&mut self, cond: Value, a: Value, keep_where: bool) -> Result<Value> {
        let zero = self.scalar(self.dtype(a), 0.0)?;
        let (t, f) = if keep_where { (a, zero) } else { (zero, a) };
        self.op(Op::Select, &[cond, t, f], &[])
    }

    pub fn reshape(&mut self, v: Value, shape: &[u64]) -> Result<Value> {
        if self.shape(v) == shape {
            return Ok(v);
        }
        self.op(Op::Reshape, &[v], &[("shape", Attr::Ints(ints(shape)))])
    }

    pub fn broadcast(&mut self, v: Value, shape: &[u64]) -> Result<Value> {
        if self.shape(v) == shape {
            return Ok(v);
        }
        self.op(Op::Broadcast, &[v], &[("shape", Attr::Ints(ints(shape)))])
    }

    pub fn cast(&mut self, v: Value, to: DType) -> Result<Value> {
        if self.dtype(v) == to {
            return Ok(v);
        }
        self.op(Op::Cast, &[v], &[("to", Attr::DType(to))])
    }

    pub fn reduce_sum(&mut self, v: Value, axes: &[usize], keep_dims: bool) -> Result<Value> {
        let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        self.op(Op::ReduceSum, &[v], &[("axes", Attr::Ints(axes)), ("keep_dims", Attr::Bool(keep_dims))])
    }

    /// Undoes numpy broadcasting: sums `v` (of a broadcast shape) down to `shape`, over its
    /// extra leading dims and the dims where `shape` has 1.
    pub fn unbroadcast(&mut self, v: Value, shape: &[u64]) -> Result<Value> {
        let from = self.shape(v);
        if from == shape {
            return Ok(v);
        }
        let lead = from.len() - shape.len();
        let axes: Vec<usize> =
            (0..from.len()).filter(|&i| i < lead || (shape[i - lead] == 1 && from[i] != 1)).collect();
        let summed = if axes.is_empty() { v } else { self.reduce_sum(v, &axes, true)? };
        self.reshape(summed, shape)
    }

    /// Spreads `dy`, the adjoint of a reduction of `x` over `axes` (kept or not), back over
    /// `x`'s shape.
    pub fn unreduce(&mut self, dy: Value, x_shape: &[u64], axes: &[usize]) -> Result<Value> {
        let kept: Vec<u64> = (0..x_shape.len()).map(|i| if axes.contains(&i) { 1 } else { x_shape[i] }).collect();
        let r = self.reshape(dy, &kept)?;
        self.broadcast(r, x_shape)
    }
}

pub fn ints(s: &[u64]) -> Vec<i64> {
    s.iter().map(|&d| d as i64).collect()
}

/// The node a rule differentiates, copied out of the graph so the rule can add nodes freely:
/// its operands `x`, results `y`, attributes, and the adjoints `dy` of its results (`None`
/// for a result nothing differentiated depends on; at least one is present).
pub struct Site {
    pub node: Node,
    pub op: Op,
    pub x: Vec<Value>,
    pub y: Vec<Value>,
    pub attrs: graphc_ir::Attrs,
    pub dy: Vec<Option<Value>>,
    pub backprop: Backprop,
}

impl Site {
    pub fn new(g: &Graph, node: Node, dy: &[Option<Value>], backprop: Backprop) -> Self {
        let nd = &g.nodes[node];
        Site {
            node,
            op: nd.op,
            x: nd.operands.clone(),
            y: nd.results.clone(),
            attrs: nd.attrs.clone(),
            dy: dy.to_vec(),
            backprop,
        }
    }

    /// The adjoint of the only result.
    pub fn dy(&self) -> Value {
        self.dy[0].expect("a differentiated node's result has an adjoint")
    }
}
