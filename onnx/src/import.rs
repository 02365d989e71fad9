//! ONNX graphs to graphc graphs. Each ONNX node becomes one or a few IR nodes; inputs that
//! ONNX passes as tensors but graphc needs as attributes (a Reshape's shape, a Slice's
//! bounds, reduction axes) must be constants at import time: initializers, Constant nodes, or
//! anything computed from them, which the importer evaluates with the reference kernels as it
//! goes (so `Shape -> Gather -> Concat -> Reshape` chains work, shapes being static).

mod attrs;
mod graph;

use crate::proto::{ModelProto, NodeProto};
use crate::tensor::{dtype_of, tensor_from_proto};
use attrs::Attrs;
use graph::{norm_axis, Importer};
use graphc_ir::{Attr, DType, Module, NodeSpec, Op, Value};
use graphc_runtime::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// How to import.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Make initializers variables (named as in the model, initialized to their values)
    /// instead of constants, so they can be trained, checkpointed and restored.
    pub weights_as_variables: bool,
    /// Values of graph inputs known when importing (`graphc run` knows what it will feed).
    /// Where an operator needs an input as a constant (a Reshape's shape, Slice bounds,
    /// reduction axes), a known value specializes the graph to it; the input stays in the
    /// signature.
    pub known_inputs: HashMap<String, Tensor>,
}

pub(crate) type Result<T> = std::result::Result<T, String>;

/// Imports a decoded model. `base` is the model's directory (for external data).
pub fn import_model(model: &ModelProto, base: &Path, options: &ImportOptions) -> Result<Module> {
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx")))
        .and_then(|o| o.version)
        .ok_or("the model imports no version of the default ONNX operator set")?;
    if opset < 13 {
        return Err(format!("the model uses ONNX opset {opset}; graphc imports opset 13 and later"));
    }
    let graph = model.graph.as_ref().ok_or("the model has no graph")?;
    let mut imp = Importer::new(graph, base, opset, options)?;
    for node in &graph.node {
        imp.node(node).map_err(|e| format!("{}: {e}", describe(node)))?;
    }
    imp.finish(graph)
}

fn describe(n: &NodeProto) -> String {
    match n.name.as_deref().filter(|s| !s.is_empty()) {
        Some(name) => format!("node '{name}' ({})", n.op_type.as_deref().unwrap_or("?")),
        None => format!("node {} -> {:?}", n.op_type.as_deref().unwrap_or("?"), n.output),
    }
}

impl Importer<'_> {
    fn node(&mut self, n: &NodeProto) -> Result<()> {
        if !matches!(n.domain.as_deref(), None | Some("") | Some("ai.onnx")) {
            return Err(format!("operator domain '{}' is not supported", n.domain.as_deref().unwrap_or("")));
        }
        let op_type = n.op_type.clone().unwrap_or_default();
        let a = Attrs(n);
        let outs: Vec<Value> = match op_type.as_str() {
            "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Greater" | "Less" | "And" | "Or" => {
                let op = match op_type.as_str() {
                    "Add" => Op::Add,
                    "Sub" => Op::Sub,
                    "Mul" => Op::Mul,
                    "Div" => Op::Div,
                    "Equal" => Op::Equal,
                    "Greater" => Op::Greater,
                    "Less" => Op::Less,
                    "And" => Op::And,
                    _ => Op::Or,
                };
                vec![self.binary(op, self.input(n, 0)?, self.input(n, 1)?)?]
            }
            "GreaterOrEqual" => vec![self.binary(Op::GreaterEqual, self.input(n, 0)?, self.input(n, 1)?)?],
            "LessOrEqual" => vec![self.binary(Op::LessEqual, self.input(n, 0)?, self.input(n, 1)?)?],
            "Pow" => {
                let (x, y) = (self.input(n, 0)?, self.input(n, 1)?);
                let dt = self.ty(x)?.dtype;
                let y = if self.ty(y)?.dtype != dt {
                    self.emit1(NodeSpec::new(Op::Cast, vec![y]).attr("to", Attr::DType(dt)))?
                } else {
                    y
                };
                vec![self.binary(Op::Pow, x, y)?]
            }
            "Neg" | "Abs" | "Exp" | "Log" | "Sqrt" | "Relu" | "Sigmoid" | "Tanh" | "Erf" | "Not" | "Identity" => {
                let op = match op_type.as_str() {
                    "Neg" => Op::Neg,
                    "Abs" => Op::Abs,
                    "Exp" => Op::Exp,
                    "Log" => Op::Log,
                    "Sqrt" => Op::Sqrt,
                    "Relu" => Op::Relu,
                    "Sigmoid" => Op::Sigmoid,
                    "Tanh" => Op::Tanh,
                    "Erf" => Op::Erf,
                    "Not" => Op::Not,
                    _ => Op::Identity,
                };
                vec![self.unary(op, self.input(n, 0)?)?]
            }
            "Max" | "Min" | "Sum" => {
                let op = match op_type.as_str() {
                    "Max" => Op::Max,
                    "Min" => Op::Min,
                    _ => Op::Add,
                };
                let mut acc = self.input(n, 0)?;
                for i in 1..n.input.len() {
                    let x = self.input(n, i)?;
                    acc = self.binary(op, acc, x)?;
                }
                if n.input.len() == 1 {
                    acc = self.unary(Op::Identity, acc)?;
                }
                vec![acc]
            }
            "Where" => {
                vec![self
                    .emit1(NodeSpec::new(Op::Select, vec![self.input(n, 0)?, self.input(n, 1)?, self.input(n, 2)?]))?]
            }
            "Cast" => {
                let to = dtype_of(a.int("to", 0) as i32)?;
                vec![self.emit1(NodeSpec::new(Op::Cast, vec![self.input(n, 0)?]).attr("to", Attr::DType(to)))?]
            }
            "Constant" => vec![self.constant_node(n, &a)?],
            "ConstantOfShape" => {
                let shape = self.const_ints(n, 0, "shape")?.ok_or("input 0 (shape) is required")?;
                let fill = match a.get("value").and_then(|x| x.t.as_ref()) {
                    Some(t) => tensor_from_proto(t, self.base)?,
                    None => Tensor::F32(ndarray::arr1(&[0.0f32]).into_dyn()),
                };
                if fill.len() != 1 {
                    return Err("the value attribute must hold one element".into());
                }
                let scalar = self.reshape_const(fill)?;
                let dims: Vec<i64> = shape.iter().map(|&d| d.max(0)).collect();
                vec![self.emit1(NodeSpec::new(Op::Broadcast, vec![scalar]).attr("shape", Attr::Ints(dims)))?]
            }
            "CastLike" => {
                let to = self.ty(self.input(n, 1)?)?.dtype;
                vec![self.emit1(NodeSpec::new(Op::Cast, vec![self.input(n, 0)?]).attr("to", Attr::DType(to)))?]
            }
            "MatMul" => vec![self.matmul(self.input(n, 0)?, self.input(n, 1)?)?],
            "Gemm" => vec![self.gemm(n, &a)?],
            "Transpose" => {
                let x = self.input(n, 0)?;
                let rank = self.ty(x)?.rank() as i64;
                let perm = a.ints("perm").unwrap_or_else(|| (0..rank).rev().collect());
                vec![self.emit1(NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(perm)))?]
            }
            "Reshape" => {
                let x = self.input(n, 0)?;
                let mut shape = self.const_ints(n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
                let dims = self.shape(x)?;
                if a.int("allowzero", 0) == 0 {
                    for (i, s) in shape.iter_mut().enumerate() {
                        if *s == 0 {
                            *s = *dims
                                .get(i)
                                .ok_or(format!("shape entry {i} is 0 (copy) but the input has rank {}", dims.len()))?;
                        }
                    }
                }
                vec![self.reshape(x, shape)?]
            }
            "Flatten" => {
                let x = self.input(n, 0)?;
                let dims = self.shape(x)?;
                let r = dims.len() as i64;
                let axis = a.int("axis", 1);
                let axis = if axis < 0 { axis + r } else { axis };
                if !(0..=r).contains(&axis) {
                    return Err(format!("axis {} is out of range for rank {r}", a.int("axis", 1)));
                }
                let axis = axis as usize;
                let outer: i64 = dims[..axis].iter().product();
                let inner: i64 = dims[axis..].iter().product();
                vec![self.reshape(x, vec![outer, inner])?]
            }
            "Squeeze" | "Unsqueeze" => vec![self.squeeze(n, &a, op_type == "Unsqueeze")?],
            "Concat" => {
                let xs = (0..n.input.len()).map(|i| self.input(n, i)).collect::<Result<Vec<_>>>()?;
                vec![self.emit1(NodeSpec::new(Op::Concat, xs).attr("axis", Attr::Int(a.int("axis", 0))))?]
            }
            "Split" => self.split(n, &a)?,
            "Slice" => vec![self.slice(n)?],
            "Gather" => {
                vec![self.emit1(
                    NodeSpec::new(Op::Gather, vec![self.input(n, 0)?, self.input(n, 1)?])
                        .attr("axis", Attr::Int(a.int("axis", 0))),
                )?]
            }
            "Expand" => {
                let x = self.input(n, 0)?;
                let target = self.const_ints(n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
                let dims: Vec<u64> = self.shape(x)?.iter().map(|&d| d as u64).collect();
                let t: Vec<u64> = target.iter().map(|&d| d.max(0) as u64).collect();
                let out = graphc_ir::shape::broadcast_shapes(&dims, &t)?;
                vec![self.emit1(
                    NodeSpec::new(Op::Broadcast, vec![x])
                        .attr("shape", Attr::Ints(out.iter().map(|&d| d as i64).collect())),
                )?]
            }
            "Shape" => {
                let x = self.input(n, 0)?;
                let dims = self.shape(x)?;
                let r = dims.len() as i64;
                let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
                let (s, e) = (clamp(a.int("start", 0)), clamp(a.int("end", r)));
                let part = if s < e { dims[s..e].to_vec() } else { vec![] };
                vec![self.constant(Tensor::I64(ndarray::Array1::from(part).into_dyn()))?]
            }
            "Size" => {
                let x = self.input(n, 0)?;
                let count: i64 = self.shape(x)?.iter().product();
                vec![self.constant(Tensor::I64(ndarray::arr0(count).into_dyn()))?]
            }
            "Clip" => {
                let mut x = self.input(n, 0)?;
                if let Some(lo) = self.opt_input(n, 1)? {
                    x = self.binary(Op::Max, x, lo)?;
                }
                if let Some(hi) = self.opt_input(n, 2)? {
                    x = self.binary(Op::Min, x, hi)?;
                }
                vec![self.unary(Op::Identity, x)?]
            }
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" => vec![self.reduction(n, &a, &op_type)?],
            "Softmax" | "LogSoftmax" => {
                let x = self.input(n, 0)?;
                let axis = a.int("axis", -1);
                if op_type == "Softmax" {
                    vec![self.emit1(NodeSpec::new(Op::Softmax, vec![x]).attr("axis", Attr::Int(axis)))?]
                } else {
                    let m = self.reduce(Op::ReduceMax, x, vec![axis], true)?;
                    let d = self.binary(Op::Sub, x, m)?;
                    let e = self.unary(Op::Exp, d)?;
                    let s = self.reduce(Op::ReduceSum, e, vec![axis], true)?;
                    let l = self.unary(Op::Log, s)?;
                    vec![self.binary(Op::Sub, d, l)?]
                }
            }
            "Gelu" => {
                let x = self.input(n, 0)?;
                let dt = self.ty(x)?.dtype;
                let half = self.scalar(dt, 0.5)?;
                let one = self.scalar(dt, 1.0)?;
                let inner = if a.string("approximate", "none") == "tanh" {
                    // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
                    let c = self.scalar(dt, (2.0 / std::f64::consts::PI).sqrt())?;
                    let k = self.scalar(dt, 0.044715)?;
                    let x2 = self.binary(Op::Mul, x, x)?;
                    let x3 = self.binary(Op::Mul, x2, x)?;
                    let kx3 = self.binary(Op::Mul, k, x3)?;
                    let s = self.binary(Op::Add, x, kx3)?;
                    let cs = self.binary(Op::Mul, c, s)?;
                    self.unary(Op::Tanh, cs)?
                } else {
                    let r = self.scalar(dt, std::f64::consts::FRAC_1_SQRT_2)?;
                    let xr = self.binary(Op::Mul, x, r)?;
                    self.unary(Op::Erf, xr)?
                };
                let p = self.binary(Op::Add, one, inner)?;
                let hx = self.binary(Op::Mul, half, x)?;
                vec![self.binary(Op::Mul, hx, p)?]
            }
            "Reciprocal" | "Softplus" | "Softsign" | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "HardSigmoid"
            | "HardSwish" | "ThresholdedRelu" | "Mish" => vec![self.activation(&op_type, self.input(n, 0)?, &a)?],
            "PRelu" => {
                let (x, slope) = (self.input(n, 0)?, self.input(n, 1)?);
                let dt = self.ty(x)?.dtype;
                let zero = self.scalar(dt, 0.0)?;
                let neg = self.binary(Op::Less, x, zero)?;
                let scaled = self.binary(Op::Mul, x, slope)?;
                vec![self.emit1(NodeSpec::new(Op::Select, vec![neg, scaled, x]))?]
            }
            "Xor" => vec![self.binary(Op::NotEqual, self.input(n, 0)?, self.input(n, 1)?)?],
            "Conv" | "MaxPool" | "AveragePool" => self.windowed(n, &a, &op_type)?,
            "GlobalAveragePool" | "GlobalMaxPool" => {
                let x = self.input(n, 0)?;
                let rank = self.shape(x)?.len() as i64;
                let op = if op_type == "GlobalMaxPool" { Op::ReduceMax } else { Op::ReduceMean };
                vec![self.reduce(op, x, (2..rank).collect(), true)?]
            }
            "LayerNormalization" => self.layer_norm(n, &a)?,
            "BatchNormalization" => self.batch_norm(n, &a)?,
            other => return Err(format!("operator '{other}' is not supported (opset {})", self.opset)),
        };
        self.bind(n, outs)
    }

    /// Activations that are short compositions of IR ops, with ONNX's default parameters.
    fn activation(&mut self, op_type: &str, x: Value, a: &Attrs) -> Result<Value> {
        let dt = self.ty(x)?.dtype;
        let k = |imp: &mut Self, v: f64| imp.scalar(dt, v);
        let zero = k(self, 0.0)?;
        let one = k(self, 1.0)?;
        Ok(match op_type {
            "Reciprocal" => self.binary(Op::Div, one, x)?,
            "Softplus" | "Mish" => {
                // log(1 + exp(x)), written as max(x, 0) + log(1 + exp(-|x|)) so large x stays finite.
                let ax = self.unary(Op::Abs, x)?;
                let nax = self.unary(Op::Neg, ax)?;
                let e = self.unary(Op::Exp, nax)?;
                let p = self.binary(Op::Add, one, e)?;
                let l = self.unary(Op::Log, p)?;
                let r = self.unary(Op::Relu, x)?;
                let sp = self.binary(Op::Add, r, l)?;
                if op_type == "Mish" {
                    let t = self.unary(Op::Tanh, sp)?;
                    self.binary(Op::Mul, x, t)?
                } else {
                    sp
                }
            }
            "Softsign" => {
                let ax = self.unary(Op::Abs, x)?;
                let d = self.binary(Op::Add, one, ax)?;
                self.binary(Op::Div, x, d)?
            }
            "LeakyRelu" => {
                let alpha = k(self, a.float("alpha", 0.01) as f64)?;
                let neg = self.binary(Op::Less, x, zero)?;
                let scaled = self.binary(Op::Mul, x, alpha)?;
                self.emit1(NodeSpec::new(Op::Select, vec![neg, scaled, x]))?
            }
            "ThresholdedRelu" => {
                let alpha = k(self, a.float("alpha", 1.0) as f64)?;
                let above = self.binary(Op::Greater, x, alpha)?;
                self.emit1(NodeSpec::new(Op::Select, vec![above, x, zero]))?
            }
            "Elu" | "Selu" | "Celu" => {
                // alpha * (exp(x / c) - 1) below zero, x above; Selu scales both by gamma.
                let (alpha, c, gamma) = match op_type {
                    "Elu" => (a.float("alpha", 1.0) as f64, 1.0, 1.0),
                    "Celu" => (a.float("alpha", 1.0) as f64, a.float("alpha", 1.0) as f64, 1.0),
                    _ => (a.float("alpha", 1.673_263_2) as f64, 1.0, a.float("gamma", 1.050_701) as f64),
                };
                let cv = k(self, c)?;
                let xc = self.binary(Op::Div, x, cv)?;
                let e = self.unary(Op::Exp, xc)?;
                let em1 = self.binary(Op::Sub, e, one)?;
                let av = k(self, alpha)?;
                let neg_part = self.binary(Op::Mul, av, em1)?;
                let neg = self.binary(Op::Less, x, zero)?;
                let y = self.emit1(NodeSpec::new(Op::Select, vec![neg, neg_part, x]))?;
                if gamma == 1.0 {
                    y
                } else {
                    let g = k(self, gamma)?;
                    self.binary(Op::Mul, g, y)?
                }
            }
            "HardSigmoid" | "HardSwish" => {
                let (alpha, beta) = if op_type == "HardSwish" {
                    (1.0 / 6.0, 0.5)
                } else {
                    (a.float("alpha", 0.2) as f64, a.float("beta", 0.5) as f64)
                };
                let av = k(self, alpha)?;
                let bv = k(self, beta)?;
                let ax = self.binary(Op::Mul, x, av)?;
                let s = self.binary(Op::Add, ax, bv)?;
                let lo = self.binary(Op::Max, s, zero)?;
                let hs = self.binary(Op::Min, lo, one)?;
                if op_type == "HardSwish" {
                    self.binary(Op::Mul, x, hs)?
                } else {
                    hs
                }
            }
            other => return Err(format!("operator '{other}' is not supported")),
        })
    }

    /// Conv, MaxPool and AveragePool: window attributes, with `auto_pad` resolved to explicit
    /// pads from the static input shape.
    fn windowed(&mut self, n: &NodeProto, a: &Attrs, op_type: &str) -> Result<Vec<Value>> {
        let x = self.input(n, 0)?;
        let dims = self.shape(x)?;
        if dims.len() < 3 {
            return Err(format!("the input must be [N, C, spatial...], got rank {}", dims.len()));
        }
        let spatial = &dims[2..];
        let k = spatial.len();
        let kernel = match (op_type, a.ints("kernel_shape")) {
            (_, Some(ks)) => ks,
            ("Conv", None) => self.shape(self.input(n, 1)?)?[2..].to_vec(),
            _ => return Err("kernel_shape is required".into()),
        };
        let strides = a.ints("strides").unwrap_or_else(|| vec![1; k]);
        let dilations = a.ints("dilations").unwrap_or_else(|| vec![1; k]);
        if kernel.len() != k || strides.len() != k || dilations.len() != k {
            return Err(format!("kernel_shape, strides and dilations need {k} entries each"));
        }
        let pads = match a.string("auto_pad", "NOTSET").as_str() {
            "NOTSET" => a.ints("pads").unwrap_or_else(|| vec![0; 2 * k]),
            "VALID" => vec![0; 2 * k],
            mode @ ("SAME_UPPER" | "SAME_LOWER") => {
                let mut begin = vec![0; k];
                let mut end = vec![0; k];
                for i in 0..k {
                    let out = (spatial[i] + strides[i] - 1) / strides[i];
                    let total = ((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial[i]).max(0);
                    let small = total / 2;
                    (begin[i], end[i]) =
                        if mode == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                }
                begin.into_iter().chain(end).collect()
            }
            other => return Err(format!("auto_pad '{other}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")),
        };
        let windowed = |spec: NodeSpec| {
            spec.attr("strides", Attr::Ints(strides.clone()))
                .attr("pads", Attr::Ints(pads.clone()))
                .attr("dilations", Attr::Ints(dilations.clone()))
        };
        if op_type == "Conv" {
            let w = self.input(n, 1)?;
            let spec = windowed(NodeSpec::new(Op::Conv, vec![x, w])).attr("group", Attr::Int(a.int("group", 1)));
            let mut y = self.emit1(spec)?;
            if let Some(b) = self.opt_input(n, 2)? {
                let m = self.shape(b)?;
                let mut shape = m.clone();
                shape.extend(std::iter::repeat_n(1, k));
                let b = self.reshape(b, shape)?;
                y = self.binary(Op::Add, y, b)?;
            }
            return Ok(vec![y]);
        }
        let indices = n.output.get(1).is_some_and(|o| !o.is_empty());
        let column_major = a.int("storage_order", 0) != 0;
        let op = if op_type == "MaxPool" { Op::MaxPool } else { Op::AvgPool };
        let mut spec = windowed(NodeSpec::new(op, vec![x]))
            .attr("kernel", Attr::Ints(kernel))
            .attr("ceil_mode", Attr::Bool(a.int("ceil_mode", 0) != 0));
        if op == Op::AvgPool {
            spec = spec.attr("count_include_pad", Attr::Bool(a.int("count_include_pad", 0) != 0));
        }
        if indices {
            spec = spec.attr("indices", Attr::Bool(true));
        }
        let mut outs = self.emit(spec)?;
        if indices && column_major {
            outs[1] = self.column_major_index(outs[1], spatial)?;
        }
        Ok(outs)
    }

    /// Turns row-major flat indices into ones whose spatial part is column-major (ONNX
    /// `storage_order = 1`): `plane * S + sum_i pos_i * prod_{j<i} dims_j`.
    fn column_major_index(&mut self, idx: Value, spatial: &[i64]) -> Result<Value> {
        let plane_size: i64 = spatial.iter().product();
        let k = |imp: &mut Self, v: i64| imp.scalar(DType::I64, v as f64);
        let ps = k(self, plane_size)?;
        let plane = self.binary(Op::Div, idx, ps)?;
        let base = self.binary(Op::Mul, plane, ps)?;
        let mut rest = self.binary(Op::Sub, idx, base)?;
        // Row-major positions, last dim first.
        let mut pos = vec![rest; spatial.len()];
        for i in (0..spatial.len()).rev() {
            let d = k(self, spatial[i])?;
            let q = self.binary(Op::Div, rest, d)?;
            let qd = self.binary(Op::Mul, q, d)?;
            pos[i] = self.binary(Op::Sub, rest, qd)?;
            rest = q;
        }
        let mut col = base;
        let mut stride = 1i64;
        for (i, &p) in pos.iter().enumerate() {
            let s = k(self, stride)?;
            let term = self.binary(Op::Mul, p, s)?;
            col = self.binary(Op::Add, col, term)?;
            stride *= spatial[i];
        }
        Ok(col)
    }

    fn constant_node(&mut self, n: &NodeProto, a: &Attrs) -> Result<Value> {
        let t = if let Some(t) = a.get("value").and_then(|x| x.t.as_ref()) {
            tensor_from_proto(t, self.base)?
        } else if let Some(f) = a.get("value_float").and_then(|x| x.f) {
            Tensor::F32(ndarray::arr0(f).into_dyn())
        } else if let Some(i) = a.get("value_int").and_then(|x| x.i) {
            Tensor::I64(ndarray::arr0(i).into_dyn())
        } else if let Some(fs) = a.get("value_floats") {
            Tensor::F32(ndarray::Array1::from(fs.floats.clone()).into_dyn())
        } else if let Some(is) = a.get("value_ints") {
            Tensor::I64(ndarray::Array1::from(is.ints.clone()).into_dyn())
        } else {
            let which = n.attribute.first().and_then(|x| x.name.clone()).unwrap_or_default();
            return Err(format!("Constant with attribute '{which}' is not supported"));
        };
        self.constant(t)
    }

    /// numpy matmul: 1-D operands are promoted to matrices and the added dim removed after.
    fn matmul(&mut self, x: Value, y: Value) -> Result<Value> {
        let (xs, ys) = (self.shape(x)?, self.shape(y)?);
        let x2 = if xs.len() == 1 { self.reshape(x, vec![1, xs[0]])? } else { x };
        let y2 = if ys.len() == 1 { self.reshape(y, vec![ys[0], 1])? } else { y };
        let m = self.binary(Op::MatMul, x2, y2)?;
        if xs.len() > 1 && ys.len() > 1 {
            return Ok(m);
        }
        // Drop the dims the promotion added: M for a 1-D lhs, N for a 1-D rhs.
        let full = self.shape(m)?;
        let r = full.len();
        let drop = |i: usize| (xs.len() == 1 && i == r - 2) || (ys.len() == 1 && i == r - 1);
        let out = full.iter().enumerate().filter(|&(i, _)| !drop(i)).map(|(_, &d)| d).collect();
        self.reshape(m, out)
    }

    fn gemm(&mut self, n: &NodeProto, a: &Attrs) -> Result<Value> {
        let (mut x, mut y) = (self.input(n, 0)?, self.input(n, 1)?);
        let t = |imp: &mut Self, v: Value| {
            imp.emit1(NodeSpec::new(Op::Transpose, vec![v]).attr("perm", Attr::Ints(vec![1, 0])))
        };
        if a.int("transA", 0) != 0 {
            x = t(self, x)?;
        }
        if a.int("transB", 0) != 0 {
            y = t(self, y)?;
        }
        let dt = self.ty(x)?.dtype;
        let mut out = self.binary(Op::MatMul, x, y)?;
        let alpha = a.float("alpha", 1.0);
        if alpha != 1.0 {
            let s = self.scalar(dt, alpha as f64)?;
            out = self.binary(Op::Mul, out, s)?;
        }
        if let Some(mut c) = self.opt_input(n, 2)? {
            let beta = a.float("beta", 1.0);
            if beta != 1.0 {
                let s = self.scalar(dt, beta as f64)?;
                c = self.binary(Op::Mul, c, s)?;
            }
            out = self.binary(Op::Add, out, c)?;
        }
        Ok(out)
    }

    fn squeeze(&mut self, n: &NodeProto, a: &Attrs, unsqueeze: bool) -> Result<Value> {
        let x = self.input(n, 0)?;
        let dims = self.shape(x)?;
        let axes = match self.const_ints(n, 1, "axes")? {
            Some(v) => Some(v),
            None => a.ints("axes"),
        };
        let shape = if unsqueeze {
            let axes = axes.ok_or("axes are required")?;
            let rank = dims.len() + axes.len();
            let mut axes = axes.iter().map(|&ax| norm_axis(ax, rank)).collect::<Result<Vec<_>>>()?;
            axes.sort_unstable();
            let mut out = Vec::with_capacity(rank);
            let mut it = dims.iter();
            for i in 0..rank {
                if axes.contains(&i) {
                    out.push(1);
                } else {
                    out.push(*it.next().ok_or("repeated axes")?);
                }
            }
            out
        } else {
            match axes {
                Some(axes) => {
                    let axes = axes.iter().map(|&ax| norm_axis(ax, dims.len())).collect::<Result<Vec<_>>>()?;
                    for &ax in &axes {
                        if dims[ax] != 1 {
                            return Err(format!("cannot squeeze axis {ax} of size {}", dims[ax]));
                        }
                    }
                    dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect()
                }
                None => dims.iter().copied().filter(|&d| d != 1).collect(),
            }
        };
        self.reshape(x, shape)
    }

    fn split(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Value>> {
        let x = self.input(n, 0)?;
        let dims = self.shape(x)?;
        let axis = norm_axis(a.int("axis", 0), dims.len())?;
        let outputs = n.output.len() as i64;
        let sizes = match self.const_ints(n, 1, "split")? {
            Some(s) => s,
            None => match a.ints("split") {
                Some(s) => s,
                None => {
                    let parts = a.get("num_outputs").and_then(|x| x.i).unwrap_or(outputs).max(1);
                    let chunk = (dims[axis] + parts - 1) / parts;
                    let mut left = dims[axis];
                    (0..parts)
                        .map(|_| {
                            let s = chunk.min(left);
                            left -= s;
                            s
                        })
                        .collect()
                }
            },
        };
        self.emit(
            NodeSpec::new(Op::Split, vec![x]).attr("axis", Attr::Int(axis as i64)).attr("sizes", Attr::Ints(sizes)),
        )
    }

    fn slice(&mut self, n: &NodeProto) -> Result<Value> {
        let x = self.input(n, 0)?;
        let dims = self.shape(x)?;
        let starts = self.const_ints(n, 1, "starts")?.ok_or("input 1 (starts) is required")?;
        let ends = self.const_ints(n, 2, "ends")?.ok_or("input 2 (ends) is required")?;
        let axes = self.const_ints(n, 3, "axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = self.const_ints(n, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
        let (mut s, mut e, mut st) = (vec![0i64; dims.len()], dims.clone(), vec![1i64; dims.len()]);
        for (k, &ax) in axes.iter().enumerate() {
            let ax = norm_axis(ax, dims.len())?;
            let step = *steps.get(k).unwrap_or(&1);
            if step == 0 {
                return Err(format!("a step of 0 on axis {ax}"));
            }
            if step < 0 {
                return self.slice_by_gather(x, &dims, &starts, &ends, &axes, &steps);
            }
            // ONNX uses huge values for "to the end"; clamping keeps them in range.
            let clamp = |v: i64| v.clamp(-dims[ax] - 1, dims[ax]);
            s[ax] = clamp(*starts.get(k).ok_or("fewer starts than axes")?);
            e[ax] = clamp(*ends.get(k).ok_or("fewer ends than axes")?);
            st[ax] = step;
        }
        // `ends` of -dim-1 clamps to 0 here as in ONNX; IR slices resolve negatives the same way.
        let e: Vec<i64> = e.iter().zip(&dims).map(|(&v, &d)| if v < -d { 0 } else { v }).collect();
        let s: Vec<i64> = s.iter().zip(&dims).map(|(&v, &d)| if v < -d { 0 } else { v }).collect();
        let mut spec = NodeSpec::new(Op::Slice, vec![x]).attr("starts", Attr::Ints(s)).attr("ends", Attr::Ints(e));
        if st.iter().any(|&x| x != 1) {
            spec = spec.attr("steps", Attr::Ints(st));
        }
        self.emit1(spec)
    }

    /// A slice with a negative step: the indices each axis keeps, computed with ONNX's rules,
    /// become a gather per sliced axis.
    fn slice_by_gather(
        &mut self,
        x: Value,
        dims: &[i64],
        starts: &[i64],
        ends: &[i64],
        axes: &[i64],
        steps: &[i64],
    ) -> Result<Value> {
        let mut cur = x;
        for (k, &ax) in axes.iter().enumerate() {
            let axis = norm_axis(ax, dims.len())?;
            let d = dims[axis];
            let step = *steps.get(k).unwrap_or(&1);
            let (s, e) = (*starts.get(k).ok_or("fewer starts than axes")?, *ends.get(k).ok_or("fewer ends than axes")?);
            let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
            let idx: Vec<i64> = if step > 0 {
                let (s, e) = (fix(s).clamp(0, d), fix(e).clamp(0, d));
                (s..e).step_by(step as usize).collect()
            } else {
                let (s, e) = (fix(s).clamp(-1, d - 1), fix(e).clamp(-1, d - 1));
                let mut v = Vec::new();
                let mut i = s;
                while i > e {
                    v.push(i);
                    i += step;
                }
                v
            };
            let t = self.constant(Tensor::I64(ndarray::Array1::from(idx).into_dyn()))?;
            cur = self.emit1(NodeSpec::new(Op::Gather, vec![cur, t]).attr("axis", Attr::Int(axis as i64)))?;
        }
        Ok(cur)
    }

    fn reduction(&mut self, n: &NodeProto, a: &Attrs, op_type: &str) -> Result<Value> {
        let op = match op_type {
            "ReduceSum" => Op::ReduceSum,
            "ReduceMean" => Op::ReduceMean,
            "ReduceMax" => Op::ReduceMax,
            _ => Op::ReduceMin,
        };
        let x = self.input(n, 0)?;
        let rank = self.shape(x)?.len() as i64;
        let axes = match self.const_ints(n, 1, "axes")? {
            Some(v) => v,
            None => a.ints("axes").unwrap_or_default(),
        };
        let axes = if axes.is_empty() {
            if a.int("noop_with_empty_axes", 0) != 0 {
                return self.unary(Op::Identity, x);
            }
            (0..rank).collect()
        } else {
            axes
        };
        let keep = a.int("keepdims", 1) != 0;
        if self.ty(x)?.dtype == DType::Bool && matches!(op, Op::ReduceMax | Op::ReduceMin) {
            // Any / all: reduce as 0/1 integers.
            let i = self.emit1(NodeSpec::new(Op::Cast, vec![x]).attr("to", Attr::DType(DType::I32)))?;
            let r = self.reduce(op, i, axes, keep)?;
            return self.emit1(NodeSpec::new(Op::Cast, vec![r]).attr("to", Attr::DType(DType::Bool)));
        }
        self.reduce(op, x, axes, keep)
    }

    fn layer_norm(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Value>> {
        let x = self.input(n, 0)?;
        let scale = self.input(n, 1)?;
        let bias = self.opt_input(n, 2)?;
        let rank = self.shape(x)?.len();
        let axis = norm_axis(a.int("axis", -1), rank)?;
        let axes: Vec<i64> = (axis as i64..rank as i64).collect();
        let dt = self.ty(x)?.dtype;
        let eps = self.scalar(dt, a.float("epsilon", 1e-5) as f64)?;
        let mean = self.reduce(Op::ReduceMean, x, axes.clone(), true)?;
        let d = self.binary(Op::Sub, x, mean)?;
        let sq = self.binary(Op::Mul, d, d)?;
        let var = self.reduce(Op::ReduceMean, sq, axes, true)?;
        let ve = self.binary(Op::Add, var, eps)?;
        let std = self.unary(Op::Sqrt, ve)?;
        let one = self.scalar(dt, 1.0)?;
        let inv = self.binary(Op::Div, one, std)?;
        let norm = self.binary(Op::Mul, d, inv)?;
        let mut y = self.binary(Op::Mul, norm, scale)?;
        if let Some(b) = bias {
            y = self.binary(Op::Add, y, b)?;
        }
        Ok(vec![y, mean, inv])
    }

    /// Inference: normalize with the given mean and variance. Training mode: normalize with the
    /// batch's own (population) statistics over every axis but 1, and also return the running
    /// statistics updated with `momentum`.
    fn batch_norm(&mut self, n: &NodeProto, a: &Attrs) -> Result<Vec<Value>> {
        let x = self.input(n, 0)?;
        let rank = self.shape(x)?.len();
        let dt = self.ty(x)?.dtype;
        // Per-channel parameters broadcast over dim 1: [C] -> [C, 1, ..., 1].
        let per_channel = |imp: &mut Self, i: usize| -> Result<Value> {
            let v = imp.input(n, i)?;
            let c = imp.shape(v)?;
            let mut shape = c.clone();
            shape.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
            imp.reshape(v, shape)
        };
        let (scale, bias, mean, var) =
            (per_channel(self, 1)?, per_channel(self, 2)?, per_channel(self, 3)?, per_channel(self, 4)?);
        let eps = self.scalar(dt, a.float("epsilon", 1e-5) as f64)?;
        let training = a.int("training_mode", 0) != 0;
        let (use_mean, use_var) = if training {
            let axes: Vec<i64> = std::iter::once(0).chain(2..rank as i64).collect();
            let bm = self.reduce(Op::ReduceMean, x, axes.clone(), true)?;
            let d = self.binary(Op::Sub, x, bm)?;
            let sq = self.binary(Op::Mul, d, d)?;
            let bv = self.reduce(Op::ReduceMean, sq, axes, true)?;
            // Back to [C, 1, ...] to line up with the per-channel parameters.
            let shape = self.shape(mean)?;
            (self.reshape(bm, shape.clone())?, self.reshape(bv, shape)?)
        } else {
            (mean, var)
        };
        let ve = self.binary(Op::Add, use_var, eps)?;
        let std = self.unary(Op::Sqrt, ve)?;
        let d = self.binary(Op::Sub, x, use_mean)?;
        let norm = self.binary(Op::Div, d, std)?;
        let scaled = self.binary(Op::Mul, norm, scale)?;
        let y = self.binary(Op::Add, scaled, bias)?;
        if !training {
            if n.output.iter().skip(1).any(|o| !o.is_empty()) {
                return Err("running statistics are outputs only in training mode".into());
            }
            return Ok(vec![y]);
        }
        let momentum = a.float("momentum", 0.9) as f64;
        let mom = self.scalar(dt, momentum)?;
        let rest = self.scalar(dt, 1.0 - momentum)?;
        let mut running = vec![y];
        for (old, new) in [(mean, use_mean), (var, use_var)] {
            let kept = self.binary(Op::Mul, old, mom)?;
            let fresh = self.binary(Op::Mul, new, rest)?;
            let r = self.binary(Op::Add, kept, fresh)?;
            let c = self.shape(self.input(n, 3)?)?;
            running.push(self.reshape(r, c)?);
        }
        Ok(running)
    }
}
