//! The recurrent layers RNN, GRU and LSTM, unrolled over the sequence's static length: the
//! input projection of every step is one matmul, then each step's recurrent matmul and gates
//! (ONNX's equations, gate orders i-o-f-c for LSTM and z-r-h for GRU), per direction
//! (forward, reverse, or both). `sequence_lens`, when given, must be known at import: a batch
//! entry past its length keeps its state and outputs zeros.

use super::attrs::Attrs;
use super::control::{one_after_another, stack, UNROLL_LIMIT};
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    // 7 drops `output_sequence`; 14 adds `layout`; 22 more types. Earlier versions are older
    // than these rows and not read.
    OpEntry::since("RNN", 7, |imp, n| recurrent(imp, n, Cell::Rnn)),
    OpEntry::since("GRU", 7, |imp, n| recurrent(imp, n, Cell::Gru)),
    OpEntry::since("LSTM", 7, |imp, n| recurrent(imp, n, Cell::Lstm)),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> i64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation with its alpha and beta.
#[derive(Clone)]
struct Activation {
    name: String,
    alpha: Option<f32>,
    beta: Option<f32>,
}

/// The layer's weights and settings for one direction.
struct Direction {
    /// `[seq, batch, gates * hidden]`: every step's input projection plus both biases.
    projected: Value,
    /// `[gates * hidden, hidden]`.
    r: Value,
    /// LSTM peepholes `[3 * hidden]` (i, o, f).
    p: Option<Value>,
    /// GRU: the recurrent bias of the h gate, added inside the reset when `linear_before_reset`.
    rb_h: Option<Value>,
    reverse: bool,
    activations: Vec<Activation>,
}

fn recurrent(imp: &mut Importer, n: &NodeProto, cell: Cell) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let hidden = a.int("hidden_size", 0);
    if hidden <= 0 {
        return Err("hidden_size is required (and positive)".into());
    }
    let layout = a.int("layout", 0);
    let mut x = imp.input(n, 0)?;
    if layout == 1 {
        x = imp.transpose(x, vec![1, 0, 2])?;
    }
    let xdims = imp.shape(x)?;
    let [seq, batch, _] = xdims[..] else {
        return Err(format!("X must have rank 3, got {}", xdims.len()));
    };
    if seq > UNROLL_LIMIT {
        return Err(format!("a sequence of {seq} steps is past the {UNROLL_LIMIT} graphc unrolls"));
    }
    let dtype = imp.ty(x)?.dtype;
    let directions = match a.string("direction", "forward").as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(format!("direction '{other}' is not forward, reverse or bidirectional")),
    };
    if a.int("input_forget", 0) != 0 {
        return Err("input_forget = 1 (coupled input and forget gates) is not supported".into());
    }
    let gates = cell.gates();
    let names: Vec<String> = match a.get("activations") {
        Some(p) => p.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect(),
        None => directions.iter().flat_map(|_| cell.default_activations().iter().map(|s| s.to_string())).collect(),
    };
    let per = cell.default_activations().len();
    if names.len() != per * directions.len() {
        return Err(format!("{} activations for {} directions (it needs {per} each)", names.len(), directions.len()));
    }
    let floats = |name: &str| a.get(name).map(|p| p.floats.clone()).unwrap_or_default();
    let (alphas, betas) = (floats("activation_alpha"), floats("activation_beta"));
    let activations: Vec<Activation> = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| Activation { name, alpha: alphas.get(i).copied(), beta: betas.get(i).copied() })
        .collect();
    let clip = a.get("clip").map(|_| a.float("clip", 0.0));
    let lens = match imp.const_ints(n, 4, "sequence_lens")? {
        Some(l) if l.len() as i64 == batch && l.iter().all(|&v| (0..=seq).contains(&v)) => Some(l),
        Some(l) => return Err(format!("sequence_lens {l:?} must be {batch} lengths of at most {seq}")),
        None => None,
    };
    let (w, r) = (imp.input(n, 1)?, imp.input(n, 2)?);
    let (wdims, rdims) = (imp.shape(w)?, imp.shape(r)?);
    let dirs = directions.len() as i64;
    let gh = gates.checked_mul(hidden).ok_or(format!("hidden_size {hidden} is too large"))?;
    if wdims != [dirs, gh, xdims[2]] || rdims != [dirs, gh, hidden] {
        return Err(format!(
            "W {wdims:?} and R {rdims:?} must be [{dirs}, {gh}, {}] and [{dirs}, {gh}, {hidden}] for hidden_size {hidden}",
            xdims[2]
        ));
    }
    let b = imp.opt_input(n, 3)?;
    // Initial states are [directions, batch, hidden] (with layout 1 [batch, directions, hidden]).
    let state = |imp: &mut Importer, i: usize| -> Result<Option<Value>> {
        match imp.opt_input(n, i)? {
            Some(v) if layout == 1 => imp.transpose(v, vec![1, 0, 2]).map(Some),
            other => Ok(other),
        }
    };
    let h0 = state(imp, 5)?;
    let c0 = if cell == Cell::Lstm { state(imp, 6)? } else { None };
    let p = if cell == Cell::Lstm { imp.opt_input(n, 7)? } else { None };
    let linear_before_reset = cell == Cell::Gru && a.int("linear_before_reset", 0) != 0;

    let mut ys: Vec<Vec<Value>> = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in directions.iter().enumerate() {
        let pick = |imp: &mut Importer, v: Value| -> Result<Value> { imp.take(v, 0, d as i64) };
        let wd = pick(imp, w)?;
        let rd = pick(imp, r)?;
        let mut projected = imp.emit1(NodeSpec::new(Op::MatMul, vec![x, wd]).attr("transpose_b", Attr::Bool(true)))?;
        let mut rb_h = None;
        if let Some(b) = b {
            let bd = pick(imp, b)?;
            let wb = imp.slice_axis(bd, 0, 0, gh, 1)?;
            let rb = imp.slice_axis(bd, 0, gh, 2 * gh, 1)?;
            // The h gate's recurrent bias goes inside the reset when linear_before_reset.
            let bias = if linear_before_reset {
                let rb_zr = imp.slice_axis(rb, 0, 0, 2 * hidden, 1)?;
                let zeros = imp.constant(graphc_runtime::kernels::cast(
                    &Tensor::F64(ndarray::Array1::zeros(hidden as usize).into_dyn()),
                    dtype,
                ))?;
                rb_h = Some(imp.slice_axis(rb, 0, 2 * hidden, 3 * hidden, 1)?);
                let rb = imp.emit1(NodeSpec::new(Op::Concat, vec![rb_zr, zeros]).attr("axis", Attr::Int(0)))?;
                imp.binary(Op::Add, wb, rb)?
            } else {
                imp.binary(Op::Add, wb, rb)?
            };
            projected = imp.binary(Op::Add, projected, bias)?;
        }
        let pd = p.map(|p| pick(imp, p)).transpose()?;
        let dir = Direction {
            projected,
            r: rd,
            p: pd,
            rb_h,
            reverse,
            activations: activations[d * per..(d + 1) * per].to_vec(),
        };
        let zeros_state = |imp: &mut Importer| {
            imp.constant(graphc_runtime::kernels::cast(
                &Tensor::F64(ndarray::Array2::zeros((batch as usize, hidden as usize)).into_dyn()),
                dtype,
            ))
        };
        let mut h = match h0 {
            Some(h0) => pick(imp, h0)?,
            None => zeros_state(imp)?,
        };
        let mut c = match c0 {
            Some(c0) => pick(imp, c0)?,
            None => zeros_state(imp)?,
        };
        let zero_out = zeros_state(imp)?;
        let mut outs = vec![zero_out; seq as usize];
        let steps: Vec<i64> = if dir.reverse { (0..seq).rev().collect() } else { (0..seq).collect() };
        for t in steps {
            let xt = imp.take(dir.projected, 0, t)?;
            let (h_new, c_new) = step(imp, cell, &dir, xt, h, c, hidden, clip, linear_before_reset)?;
            match &lens {
                Some(lens) => {
                    let live: Vec<bool> = lens.iter().map(|&l| t < l).collect();
                    let mask = imp.constant(Tensor::Bool(
                        ndarray::Array2::from_shape_vec((batch as usize, 1), live)
                            .map_err(|e| e.to_string())?
                            .into_dyn(),
                    ))?;
                    outs[t as usize] = imp.emit1(NodeSpec::new(Op::Select, vec![mask, h_new, zero_out]))?;
                    h = imp.emit1(NodeSpec::new(Op::Select, vec![mask, h_new, h]))?;
                    c = imp.emit1(NodeSpec::new(Op::Select, vec![mask, c_new, c]))?;
                }
                None => {
                    outs[t as usize] = h_new;
                    (h, c) = (h_new, c_new);
                }
            }
        }
        ys.push(outs);
        hs.push(h);
        cs.push(c);
    }
    // Y: [seq, directions, batch, hidden], the outputs in (step, direction) order one after
    // another; Y_h and Y_c: [directions, batch, hidden].
    let outs: Vec<Value> = (0..seq as usize).flat_map(|t| ys.iter().map(move |outs| outs[t])).collect();
    let mut y = if outs.is_empty() {
        None
    } else {
        let joined = one_after_another(imp, &outs)?;
        Some(imp.reshape(joined, vec![seq, dirs, batch, hidden])?)
    };
    let mut yh = stack(imp, &hs, 0)?;
    let mut yc = stack(imp, &cs, 0)?;
    if layout == 1 {
        y = y.map(|y| imp.transpose(y, vec![2, 0, 1, 3])).transpose()?;
        yh = imp.transpose(yh, vec![1, 0, 2])?;
        yc = imp.transpose(yc, vec![1, 0, 2])?;
    }
    let y = y.ok_or("a sequence of length 0 has no Y")?;
    Ok(if cell == Cell::Lstm { vec![y, yh, yc] } else { vec![y, yh] })
}

/// One step of one direction: the new hidden state (and LSTM cell state).
#[allow(clippy::too_many_arguments)]
fn step(
    imp: &mut Importer,
    cell: Cell,
    dir: &Direction,
    xt: Value,
    h: Value,
    c: Value,
    hidden: i64,
    clip: Option<f32>,
    linear_before_reset: bool,
) -> Result<(Value, Value)> {
    let f = |imp: &mut Importer, i: usize, v: Value| activate(imp, &dir.activations[i], v, clip);
    let gate = |imp: &mut Importer, v: Value, k: i64| imp.slice_axis(v, 1, k * hidden, (k + 1) * hidden, 1);
    let r_gate = |imp: &mut Importer, k: i64| imp.slice_axis(dir.r, 0, k * hidden, (k + 1) * hidden, 1);
    let recur = |imp: &mut Importer, state: Value, r: Value| {
        imp.emit1(NodeSpec::new(Op::MatMul, vec![state, r]).attr("transpose_b", Attr::Bool(true)))
    };
    match cell {
        Cell::Rnn => {
            let hr = recur(imp, h, dir.r)?;
            let pre = imp.binary(Op::Add, xt, hr)?;
            Ok((f(imp, 0, pre)?, c))
        }
        Cell::Gru => {
            let r_zr = imp.slice_axis(dir.r, 0, 0, 2 * hidden, 1)?;
            let hr = recur(imp, h, r_zr)?;
            let x_zr = imp.slice_axis(xt, 1, 0, 2 * hidden, 1)?;
            let zr = imp.binary(Op::Add, x_zr, hr)?;
            let z_pre = gate(imp, zr, 0)?;
            let z = f(imp, 0, z_pre)?;
            let r_pre = gate(imp, zr, 1)?;
            let r = f(imp, 0, r_pre)?;
            let xh = gate(imp, xt, 2)?;
            let rh = r_gate(imp, 2)?;
            let inner = if linear_before_reset {
                let mut hr = recur(imp, h, rh)?;
                if let Some(rb) = dir.rb_h {
                    hr = imp.binary(Op::Add, hr, rb)?;
                }
                imp.binary(Op::Mul, r, hr)?
            } else {
                let rh_state = imp.binary(Op::Mul, r, h)?;
                recur(imp, rh_state, rh)?
            };
            let h_pre = imp.binary(Op::Add, xh, inner)?;
            let cand = f(imp, 1, h_pre)?;
            // (1 - z) * cand + z * h = cand + z * (h - cand)
            let diff = imp.binary(Op::Sub, h, cand)?;
            let keep = imp.binary(Op::Mul, z, diff)?;
            Ok((imp.binary(Op::Add, cand, keep)?, c))
        }
        Cell::Lstm => {
            let hr = recur(imp, h, dir.r)?;
            let pre = imp.binary(Op::Add, xt, hr)?;
            let peep = |imp: &mut Importer, k: i64, state: Value, v: Value| -> Result<Value> {
                match dir.p {
                    Some(p) => {
                        let pk = imp.slice_axis(p, 0, k * hidden, (k + 1) * hidden, 1)?;
                        let term = imp.binary(Op::Mul, pk, state)?;
                        imp.binary(Op::Add, v, term)
                    }
                    None => Ok(v),
                }
            };
            let i_pre = gate(imp, pre, 0)?;
            let i_pre = peep(imp, 0, c, i_pre)?;
            let i = f(imp, 0, i_pre)?;
            let f_pre = gate(imp, pre, 2)?;
            let f_pre = peep(imp, 2, c, f_pre)?;
            let fg = f(imp, 0, f_pre)?;
            let c_pre = gate(imp, pre, 3)?;
            let cand = f(imp, 1, c_pre)?;
            let kept = imp.binary(Op::Mul, fg, c)?;
            let added = imp.binary(Op::Mul, i, cand)?;
            let c_new = imp.binary(Op::Add, kept, added)?;
            let o_pre = gate(imp, pre, 1)?;
            let o_pre = peep(imp, 1, c_new, o_pre)?;
            let o = f(imp, 0, o_pre)?;
            let hc = f(imp, 2, c_new)?;
            Ok((imp.binary(Op::Mul, o, hc)?, c_new))
        }
    }
}

/// An activation of ONNX's recurrent list, after clipping its input to `[-clip, clip]`.
fn activate(imp: &mut Importer, act: &Activation, mut v: Value, clip: Option<f32>) -> Result<Value> {
    let dtype = imp.ty(v)?.dtype;
    if let Some(clip) = clip {
        let lo = imp.scalar(dtype, -clip as f64)?;
        let hi = imp.scalar(dtype, clip as f64)?;
        v = imp.binary(Op::Max, v, lo)?;
        v = imp.binary(Op::Min, v, hi)?;
    }
    let scaled = |imp: &mut Importer, v: Value, k: f32| -> Result<Value> {
        let k = imp.scalar(dtype, k as f64)?;
        imp.binary(Op::Mul, v, k)
    };
    match act.name.to_ascii_lowercase().as_str() {
        "sigmoid" => imp.unary(Op::Sigmoid, v),
        "tanh" => imp.unary(Op::Tanh, v),
        "relu" => imp.unary(Op::Relu, v),
        "affine" => {
            let y = scaled(imp, v, act.alpha.unwrap_or(1.0))?;
            let beta = imp.scalar(dtype, act.beta.unwrap_or(0.0) as f64)?;
            imp.binary(Op::Add, y, beta)
        }
        "scaledtanh" => {
            let inner = scaled(imp, v, act.beta.unwrap_or(1.0))?;
            let t = imp.unary(Op::Tanh, inner)?;
            scaled(imp, t, act.alpha.unwrap_or(1.0))
        }
        "hardsigmoid" => {
            let y = scaled(imp, v, act.alpha.unwrap_or(0.2))?;
            let beta = imp.scalar(dtype, act.beta.unwrap_or(0.5) as f64)?;
            let y = imp.binary(Op::Add, y, beta)?;
            let (zero, one) = (imp.scalar(dtype, 0.0)?, imp.scalar(dtype, 1.0)?);
            let y = imp.binary(Op::Max, y, zero)?;
            imp.binary(Op::Min, y, one)
        }
        "leakyrelu" => {
            let neg = scaled(imp, v, act.alpha.unwrap_or(0.01))?;
            imp.binary(Op::Max, v, neg)
        }
        other => Err(format!(
            "activation '{other}' is not supported (Sigmoid, Tanh, Relu, Affine, ScaledTanh, HardSigmoid, LeakyRelu)"
        )),
    }
}
