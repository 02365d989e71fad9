//! Convolution and pooling: Conv (with its bias), ConvTranspose (as the IR's `conv_input_grad`,
//! with its bias, output padding and shape), MaxPool (with indices, either storage order),
//! AveragePool, LpPool (an average pool of |x|^p), and GlobalAveragePool and GlobalMaxPool as
//! reductions over the spatial dims.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("Conv", |imp, n| windowed(imp, n, Window::Conv)),
    OpEntry::new("MaxPool", |imp, n| windowed(imp, n, Window::MaxPool)),
    OpEntry::new("AveragePool", |imp, n| windowed(imp, n, Window::AveragePool)),
    OpEntry::new("GlobalAveragePool", |imp, n| global_pool(imp, n, Op::ReduceMean)),
    OpEntry::new("GlobalMaxPool", |imp, n| global_pool(imp, n, Op::ReduceMax)),
    // ConvTranspose 1, 11 and 22 differ only in the element types they list.
    OpEntry::since("ConvTranspose", 1, conv_transpose),
    // Older versions take a subset of the later attributes, with the same defaults: Conv 1 is
    // Conv 11; MaxPool gains `storage_order` and the indices output in 8, `ceil_mode` and
    // `dilations` in 10; AveragePool gains `count_include_pad` in 7 (default 0 as before) and
    // `ceil_mode` in 10. An attribute a version lacks is absent and so takes its default.
    OpEntry::since("Conv", 1, |imp, n| windowed(imp, n, Window::Conv)),
    OpEntry::since("MaxPool", 1, |imp, n| windowed(imp, n, Window::MaxPool)),
    OpEntry::since("AveragePool", 1, |imp, n| windowed(imp, n, Window::AveragePool)),
    OpEntry::since("GlobalAveragePool", 1, |imp, n| global_pool(imp, n, Op::ReduceMean)),
    OpEntry::since("GlobalMaxPool", 1, |imp, n| global_pool(imp, n, Op::ReduceMax)),
    // LpPool 2 has `p` as an integer attribute, as later versions; 11 adds dilations' and
    // 18 `ceil_mode`'s attributes, absent (so at their defaults) before.
    OpEntry::since("LpPool", 2, |imp, n| windowed(imp, n, Window::LpPool)),
];

/// The operators that slide a window over the spatial dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    Conv,
    MaxPool,
    AveragePool,
    /// `(sum over the window of |x|^p)^(1/p)`: an average pool of `|x|^p` counting the
    /// padding, times the window's size.
    LpPool,
}

/// A node's window geometry: kernel, strides, dilations and pads, with `auto_pad` resolved
/// to explicit pads from the static input shape `dims` ([N, C, spatial...]). `kernel` is the
/// weight's spatial shape where the node has no `kernel_shape` (Conv).
struct Geometry {
    kernel: Vec<i64>,
    strides: Vec<i64>,
    dilations: Vec<i64>,
    pads: Vec<i64>,
}

impl Geometry {
    fn of(a: &Attrs, dims: &[i64], weight_kernel: Option<Vec<i64>>) -> Result<Self> {
        if dims.len() < 3 {
            return Err(format!("the input must be [N, C, spatial...], got rank {}", dims.len()));
        }
        let spatial = &dims[2..];
        let k = spatial.len();
        let kernel = a.ints("kernel_shape").or(weight_kernel).ok_or("kernel_shape is required")?;
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
        Ok(Geometry { kernel, strides, dilations, pads })
    }

    fn apply(&self, spec: NodeSpec) -> NodeSpec {
        spec.attr("strides", Attr::Ints(self.strides.clone()))
            .attr("pads", Attr::Ints(self.pads.clone()))
            .attr("dilations", Attr::Ints(self.dilations.clone()))
    }
}

/// A convolution of `x` by `w` with the node's window attributes and `group` (no bias): Conv's
/// core, which the quantized convolutions share.
pub(super) fn conv_of(imp: &mut Importer, n: &NodeProto, x: Value, w: Value) -> Result<Value> {
    let a = Attrs(n);
    let weight_kernel = imp.shape(w)?.get(2..).map(<[i64]>::to_vec);
    let geometry = Geometry::of(&a, &imp.shape(x)?, weight_kernel)?;
    imp.emit1(geometry.apply(NodeSpec::new(Op::Conv, vec![x, w])).attr("group", Attr::Int(a.int("group", 1))))
}

/// Conv, MaxPool and AveragePool.
fn windowed(imp: &mut Importer, n: &NodeProto, window: Window) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    if window == Window::Conv {
        let mut y = conv_of(imp, n, x, imp.input(n, 1)?)?;
        if let Some(b) = imp.opt_input(n, 2)? {
            let mut shape = imp.shape(b)?;
            shape.extend(std::iter::repeat_n(1, imp.shape(x)?.len() - 2));
            let b = imp.reshape(b, shape)?;
            y = imp.binary(Op::Add, y, b)?;
        }
        return Ok(vec![y]);
    }
    let dims = imp.shape(x)?;
    let geometry = Geometry::of(&a, &dims, None)?;
    let spatial = &dims[2..];
    let kernel = geometry.kernel.clone();
    let windowed = |spec: NodeSpec| geometry.apply(spec);
    if window == Window::LpPool {
        return lp_pool(imp, x, a.int("p", 2), &kernel, |spec| {
            windowed(spec).attr("ceil_mode", Attr::Bool(a.int("ceil_mode", 0) != 0))
        });
    }
    let indices = n.output.get(1).is_some_and(|o| !o.is_empty());
    let column_major = a.int("storage_order", 0) != 0;
    let op = if window == Window::MaxPool { Op::MaxPool } else { Op::AvgPool };
    let mut spec = windowed(NodeSpec::new(op, vec![x]))
        .attr("kernel", Attr::Ints(kernel))
        .attr("ceil_mode", Attr::Bool(a.int("ceil_mode", 0) != 0));
    if op == Op::AvgPool {
        spec = spec.attr("count_include_pad", Attr::Bool(a.int("count_include_pad", 0) != 0));
    }
    if indices {
        spec = spec.attr("indices", Attr::Bool(true));
    }
    let mut outs = imp.emit(spec)?;
    if indices && column_major {
        outs[1] = column_major_index(imp, outs[1], spatial)?;
    }
    Ok(outs)
}

fn lp_pool(
    imp: &mut Importer,
    x: Value,
    p: i64,
    kernel: &[i64],
    windowed: impl Fn(NodeSpec) -> NodeSpec,
) -> Result<Vec<Value>> {
    if p < 1 {
        return Err(format!("LpPool: p must be at least 1, got {p}"));
    }
    let dtype = imp.ty(x)?.dtype;
    let ax = imp.unary(Op::Abs, x)?;
    let xp = match p {
        1 => ax,
        _ => {
            let e = imp.scalar(dtype, p as f64)?;
            imp.binary(Op::Pow, ax, e)?
        }
    };
    let spec = windowed(NodeSpec::new(Op::AvgPool, vec![xp]))
        .attr("kernel", Attr::Ints(kernel.to_vec()))
        .attr("count_include_pad", Attr::Bool(true));
    let avg = imp.emit1(spec)?;
    let size = imp.scalar(dtype, kernel.iter().product::<i64>() as f64)?;
    let sum = imp.binary(Op::Mul, avg, size)?;
    Ok(vec![match p {
        1 => sum,
        2 => imp.unary(Op::Sqrt, sum)?,
        _ => {
            let e = imp.scalar(dtype, 1.0 / p as f64)?;
            imp.binary(Op::Pow, sum, e)?
        }
    }])
}

/// ConvTranspose: `conv_input_grad` of the conv whose output channels are ConvTranspose's
/// input channels (W `[C_in, C_out/group, k...]` is that conv's weight). The output position
/// `i` of a spatial dim reads the full transposed convolution (length `s*(O-1) + d*(K-1) + 1`)
/// at `i + pad_begin`; positions beyond it (output padding, a larger `output_shape`, negative
/// pads) are zero and come from a `pad` of the result.
fn conv_transpose(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let w = imp.input(n, 1)?;
    let xd = imp.shape(x)?;
    let wd = imp.shape(w)?;
    if xd.len() < 3 || wd.len() != xd.len() {
        return Err(format!(
            "ConvTranspose: the input must be [N, C, spatial...] and W [C, M/group, k...] of the same rank, got ranks {} and {}",
            xd.len(),
            wd.len()
        ));
    }
    let k = xd.len() - 2;
    let group = a.int("group", 1);
    if group < 1 || xd[1] % group != 0 || xd[1] != wd[0] {
        return Err(format!(
            "ConvTranspose: {} input channels do not match W's first dim {} in {group} groups",
            xd[1], wd[0]
        ));
    }
    let kernel = wd[2..].to_vec();
    if let Some(ks) = a.ints("kernel_shape") {
        if ks != kernel {
            return Err(format!("ConvTranspose: kernel_shape {ks:?} differs from W's spatial dims {kernel:?}"));
        }
    }
    let strides = a.ints("strides").unwrap_or_else(|| vec![1; k]);
    let dilations = a.ints("dilations").unwrap_or_else(|| vec![1; k]);
    let out_pad = a.ints("output_padding").unwrap_or_else(|| vec![0; k]);
    if strides.len() != k || dilations.len() != k || out_pad.len() != k {
        return Err(format!("ConvTranspose: strides, dilations and output_padding need {k} entries each"));
    }
    if strides.iter().chain(&dilations).any(|&v| v < 1) {
        return Err("ConvTranspose: strides and dilations must be at least 1".into());
    }
    let output_shape = match a.ints("output_shape") {
        Some(s) if s.len() == k => Some(s),
        // Some exporters give the whole output shape.
        Some(s) if s.len() == k + 2 => Some(s[2..].to_vec()),
        Some(s) => return Err(format!("ConvTranspose: output_shape {s:?} needs {k} spatial entries")),
        None => None,
    };
    // The full transposed convolution's length per spatial dim.
    let full: Vec<i64> = (0..k).map(|i| strides[i] * (xd[2 + i] - 1) + (kernel[i] - 1) * dilations[i] + 1).collect();
    let auto_pad = a.string("auto_pad", "NOTSET");
    let (begin, out): (Vec<i64>, Vec<i64>) = match auto_pad.as_str() {
        "NOTSET" | "VALID" => {
            let pads = match (auto_pad.as_str(), a.ints("pads")) {
                ("NOTSET", Some(p)) if p.len() == 2 * k => p,
                ("NOTSET", Some(p)) => return Err(format!("ConvTranspose: pads {p:?} need {} entries", 2 * k)),
                _ => vec![0; 2 * k],
            };
            let out = match &output_shape {
                Some(s) => s.clone(),
                None => (0..k).map(|i| full[i] + out_pad[i] - pads[i] - pads[k + i]).collect(),
            };
            (pads[..k].to_vec(), out)
        }
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let out = output_shape.clone().unwrap_or_else(|| (0..k).map(|i| xd[2 + i] * strides[i]).collect());
            let begin = (0..k)
                .map(|i| {
                    let total = full[i] + out_pad[i] - out[i];
                    if mode == "SAME_UPPER" {
                        total.div_euclid(2)
                    } else {
                        total - total.div_euclid(2)
                    }
                })
                .collect();
            (begin, out)
        }
        other => {
            return Err(format!(
                "ConvTranspose: auto_pad '{other}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
            ))
        }
    };
    if out.iter().any(|&d| d < 1) {
        return Err(format!("ConvTranspose: the output's spatial dims {out:?} must be positive"));
    }
    // Per dim: zeros before (negative begin pad), the part conv_input_grad computes, zeros after.
    let (mut low, mut high, mut inner, mut pads) = (vec![0; k], vec![0; k], vec![0; k], vec![0; 2 * k]);
    for i in 0..k {
        low[i] = (-begin[i]).max(0).min(out[i]);
        let b = begin[i].max(0);
        let rest = out[i] - low[i];
        // Positions at or past the full length are zero.
        inner[i] = rest.min(full[i] - b).max(0);
        high[i] = rest - inner[i];
        pads[i] = b;
        pads[k + i] = full[i] - b - inner[i];
    }
    let c_out = wd[1] * group;
    let y = if inner.contains(&0) {
        let dtype = imp.ty(x)?.dtype;
        let zero = imp.scalar(dtype, 0.0)?;
        let mut shape = vec![xd[0], c_out];
        shape.extend(&out);
        imp.emit1(NodeSpec::new(Op::Broadcast, vec![zero]).attr("shape", Attr::Ints(shape)))?
    } else {
        let mut shape = vec![xd[0], c_out];
        shape.extend(&inner);
        let mut y = imp.emit1(
            NodeSpec::new(Op::ConvInputGrad, vec![x, w])
                .attr("strides", Attr::Ints(strides))
                .attr("pads", Attr::Ints(pads))
                .attr("dilations", Attr::Ints(dilations))
                .attr("group", Attr::Int(group))
                .attr("shape", Attr::Ints(shape)),
        )?;
        if low.iter().chain(&high).any(|&p| p > 0) {
            let dtype = imp.ty(x)?.dtype;
            let zero = imp.scalar(dtype, 0.0)?;
            let lo = [0, 0].into_iter().chain(low).collect();
            let hi = [0, 0].into_iter().chain(high).collect();
            y = imp.emit1(
                NodeSpec::new(Op::Pad, vec![y, zero]).attr("low", Attr::Ints(lo)).attr("high", Attr::Ints(hi)),
            )?;
        }
        y
    };
    let mut y = y;
    if let Some(b) = imp.opt_input(n, 2)? {
        let mut shape = vec![imp.shape(b)?.iter().product()];
        shape.extend(std::iter::repeat_n(1, k));
        let b = imp.reshape(b, shape)?;
        y = imp.binary(Op::Add, y, b)?;
    }
    Ok(vec![y])
}

/// Turns row-major flat indices into ones whose spatial part is column-major (ONNX
/// `storage_order = 1`): `plane * S + sum_i pos_i * prod_{j<i} dims_j`.
fn column_major_index(imp: &mut Importer, idx: Value, spatial: &[i64]) -> Result<Value> {
    let plane_size: i64 = spatial.iter().product();
    let k = |imp: &mut Importer, v: i64| imp.scalar(DType::I64, v as f64);
    let ps = k(imp, plane_size)?;
    let plane = imp.binary(Op::Div, idx, ps)?;
    let base = imp.binary(Op::Mul, plane, ps)?;
    let mut rest = imp.binary(Op::Sub, idx, base)?;
    // Row-major positions, last dim first.
    let mut pos = vec![rest; spatial.len()];
    for i in (0..spatial.len()).rev() {
        let d = k(imp, spatial[i])?;
        let q = imp.binary(Op::Div, rest, d)?;
        let qd = imp.binary(Op::Mul, q, d)?;
        pos[i] = imp.binary(Op::Sub, rest, qd)?;
        rest = q;
    }
    let mut col = base;
    let mut stride = 1i64;
    for (i, &p) in pos.iter().enumerate() {
        let s = k(imp, stride)?;
        let term = imp.binary(Op::Mul, p, s)?;
        col = imp.binary(Op::Add, col, term)?;
        stride *= spatial[i];
    }
    Ok(col)
}

/// The mean or max over every spatial dim, kept as size 1.
fn global_pool(imp: &mut Importer, n: &NodeProto, op: Op) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let rank = imp.shape(x)?.len() as i64;
    Ok(vec![imp.reduce(op, x, (2..rank).collect(), true)?])
}
