//! Operators that move, select or describe elements without computing on them: Reshape,
//! Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split, Slice, Gather, Expand, and Shape and
//! Size (constants, shapes being static), and Pad (constant as the IR's `pad`, edge, reflect and
//! wrap as gathers with import-time indices). Shape-like inputs (a Reshape's shape, Slice bounds,
//! Squeeze axes) must be known at import time.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[
    OpEntry::new("Reshape", reshape),
    OpEntry::new("Flatten", flatten),
    OpEntry::new("Transpose", transpose),
    OpEntry::new("Squeeze", |imp, n| squeeze(imp, n, false)),
    OpEntry::new("Unsqueeze", |imp, n| squeeze(imp, n, true)),
    OpEntry::new("Concat", concat),
    OpEntry::new("Split", split),
    OpEntry::new("Slice", slice),
    OpEntry::new("Gather", gather),
    OpEntry::new("Expand", expand),
    OpEntry::new("Shape", shape),
    OpEntry::new("Size", size),
    // DepthToSpace 13 and 11 (which adds `mode`; 1 has DCR only); SpaceToDepth 1 and 13.
    OpEntry::since("DepthToSpace", 1, depth_to_space),
    OpEntry::since("SpaceToDepth", 1, space_to_depth),
    // Pad 11 takes the pads and value as inputs, 18 adds `axes`, 19 the wrap mode (13 and 21
    // only add element types): one converter serves them all. Pad 2 has them as attributes.
    OpEntry::since("Pad", 11, pad),
    OpEntry::since("Pad", 2, pad_v2),
    OpEntry::since("CenterCropPad", 18, center_crop_pad),
    // Older versions. Reshape 5 takes the shape as an input, as later ones do.
    OpEntry::since("Reshape", 5, reshape),
    // Flatten 1 and Gather 1 take no negative axis or indices (a subset of later versions).
    OpEntry::since("Flatten", 1, flatten),
    OpEntry::since("Transpose", 1, transpose),
    // Squeeze and Unsqueeze before 13 have their axes as an attribute (negative from 11).
    OpEntry::since("Squeeze", 1, |imp, n| squeeze_attr(imp, n, false)),
    OpEntry::since("Unsqueeze", 1, |imp, n| squeeze_attr(imp, n, true)),
    // Concat 4 makes `axis` required; Concat 1 defaults it to 1.
    OpEntry::since("Concat", 4, concat),
    OpEntry::since("Concat", 1, concat_v1),
    // Split 2 has the sizes as the `split` attribute only.
    OpEntry::since("Split", 2, split),
    // Slice 10 takes its bounds as inputs (11 only allows negative axes); Slice 1 as attributes.
    OpEntry::since("Slice", 10, slice),
    OpEntry::since("Slice", 1, slice_v1),
    OpEntry::since("Gather", 1, gather),
    OpEntry::since("Expand", 8, expand),
    // Shape 1 has no `start` and `end` (they default to the whole shape).
    OpEntry::since("Shape", 1, shape),
    OpEntry::since("Size", 1, size),
];

/// Without `perm`, reverses the dims.
fn transpose(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let rank = imp.ty(x)?.rank() as i64;
    let perm = Attrs(n).ints("perm").unwrap_or_else(|| (0..rank).rev().collect());
    Ok(vec![imp.emit1(NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(perm)))?])
}

/// A 0 in the shape copies the input's dim there unless `allowzero` is set.
fn reshape(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let mut shape = imp.const_ints(n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
    let dims = imp.shape(x)?;
    if Attrs(n).int("allowzero", 0) == 0 {
        for (i, s) in shape.iter_mut().enumerate() {
            if *s == 0 {
                *s =
                    *dims.get(i).ok_or(format!("shape entry {i} is 0 (copy) but the input has rank {}", dims.len()))?;
            }
        }
    }
    Ok(vec![imp.reshape(x, shape)?])
}

/// To a matrix: the dims before `axis`, and from it on.
fn flatten(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let r = dims.len() as i64;
    let axis = a.int("axis", 1);
    let axis = if axis < 0 { axis + r } else { axis };
    if !(0..=r).contains(&axis) {
        return Err(format!("axis {} is out of range for rank {r}", a.int("axis", 1)));
    }
    let axis = axis as usize;
    let outer: i64 = dims[..axis].iter().product();
    let inner: i64 = dims[axis..].iter().product();
    Ok(vec![imp.reshape(x, vec![outer, inner])?])
}

/// Squeeze and Unsqueeze as reshapes; the axes come from input 1 (opset 13) or the attribute.
fn squeeze(imp: &mut Importer, n: &NodeProto, unsqueeze: bool) -> Result<Vec<Value>> {
    let axes = match imp.const_ints(n, 1, "axes")? {
        Some(v) => Some(v),
        None => Attrs(n).ints("axes"),
    };
    squeeze_with(imp, n, unsqueeze, axes)
}

/// Squeeze and Unsqueeze before 13: the axes are the `axes` attribute.
fn squeeze_attr(imp: &mut Importer, n: &NodeProto, unsqueeze: bool) -> Result<Vec<Value>> {
    if n.input.len() > 1 {
        return Err("axes are an attribute in this version, not an input".into());
    }
    let axes = Attrs(n).ints("axes");
    squeeze_with(imp, n, unsqueeze, axes)
}

fn squeeze_with(imp: &mut Importer, n: &NodeProto, unsqueeze: bool, axes: Option<Vec<i64>>) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
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
    Ok(vec![imp.reshape(x, shape)?])
}

fn concat(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    concat_on(imp, n, Attrs(n).int("axis", 0))
}

fn concat_v1(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    concat_on(imp, n, Attrs(n).int("axis", 1))
}

fn concat_on(imp: &mut Importer, n: &NodeProto, axis: i64) -> Result<Vec<Value>> {
    let xs = (0..n.input.len()).map(|i| imp.input(n, i)).collect::<Result<Vec<_>>>()?;
    Ok(vec![imp.emit1(NodeSpec::new(Op::Concat, xs).attr("axis", Attr::Int(axis)))?])
}

/// Sizes from input 1, the `split` attribute, or else equal parts (the last smaller), as many
/// as `num_outputs` or the node's outputs.
fn split(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let axis = norm_axis(a.int("axis", 0), dims.len())?;
    let outputs = n.output.len() as i64;
    let sizes = match imp.const_ints(n, 1, "split")? {
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
    imp.emit(NodeSpec::new(Op::Split, vec![x]).attr("axis", Attr::Int(axis as i64)).attr("sizes", Attr::Ints(sizes)))
}

fn slice(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let starts = imp.const_ints(n, 1, "starts")?.ok_or("input 1 (starts) is required")?;
    let ends = imp.const_ints(n, 2, "ends")?.ok_or("input 2 (ends) is required")?;
    let axes = imp.const_ints(n, 3, "axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = imp.const_ints(n, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    slice_with(imp, n, starts, ends, axes, steps)
}

/// Slice 1: `starts`, `ends` and `axes` are attributes; the step is 1.
fn slice_v1(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let starts = a.ints("starts").ok_or("the starts attribute is required")?;
    let ends = a.ints("ends").ok_or("the ends attribute is required")?;
    let axes = a.ints("axes").unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = vec![1; starts.len()];
    slice_with(imp, n, starts, ends, axes, steps)
}

fn slice_with(
    imp: &mut Importer,
    n: &NodeProto,
    starts: Vec<i64>,
    ends: Vec<i64>,
    axes: Vec<i64>,
    steps: Vec<i64>,
) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let (mut s, mut e, mut st) = (vec![0i64; dims.len()], dims.clone(), vec![1i64; dims.len()]);
    for (k, &ax) in axes.iter().enumerate() {
        let ax = norm_axis(ax, dims.len())?;
        let step = *steps.get(k).unwrap_or(&1);
        if step == 0 {
            return Err(format!("a step of 0 on axis {ax}"));
        }
        if step < 0 {
            return Ok(vec![slice_by_gather(imp, x, &dims, &starts, &ends, &axes, &steps)?]);
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
    Ok(vec![imp.emit1(spec)?])
}

/// A slice with a negative step: the indices each axis keeps, computed with ONNX's rules,
/// become a gather per sliced axis.
fn slice_by_gather(
    imp: &mut Importer,
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
        let t = imp.constant(Tensor::I64(ndarray::Array1::from(idx).into_dyn()))?;
        cur = imp.emit1(NodeSpec::new(Op::Gather, vec![cur, t]).attr("axis", Attr::Int(axis as i64)))?;
    }
    Ok(cur)
}

fn gather(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    Ok(vec![imp.emit1(
        NodeSpec::new(Op::Gather, vec![imp.input(n, 0)?, imp.input(n, 1)?])
            .attr("axis", Attr::Int(Attrs(n).int("axis", 0))),
    )?])
}

/// A broadcast to the input's shape and the given one broadcast together.
fn expand(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let target = imp.const_ints(n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
    let dims: Vec<u64> = imp.shape(x)?.iter().map(|&d| d as u64).collect();
    let t: Vec<u64> = target.iter().map(|&d| d.max(0) as u64).collect();
    let out = graphc_ir::shape::broadcast_shapes(&dims, &t)?;
    Ok(vec![imp.emit1(
        NodeSpec::new(Op::Broadcast, vec![x]).attr("shape", Attr::Ints(out.iter().map(|&d| d as i64).collect())),
    )?])
}

/// The (static) dims from `start` to `end`, as an int64 constant.
fn shape(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let r = dims.len() as i64;
    let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
    let (s, e) = (clamp(a.int("start", 0)), clamp(a.int("end", r)));
    let part = if s < e { dims[s..e].to_vec() } else { vec![] };
    Ok(vec![imp.constant(Tensor::I64(ndarray::Array1::from(part).into_dyn()))?])
}

/// The (static) element count, as an int64 scalar constant.
fn size(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let count: i64 = imp.shape(x)?.iter().product();
    Ok(vec![imp.constant(Tensor::I64(ndarray::arr0(count).into_dyn()))?])
}

/// Pad 11 and later: `pads` (input 1, known at import), the constant value (input 2, any
/// value), the axes the pads are for (input 3, from 18).
fn pad(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let pads = imp.const_ints(n, 1, "pads")?.ok_or("Pad: input 1 (pads) is required")?;
    let value = match imp.opt_input(n, 2)? {
        Some(v) => {
            let dims = imp.shape(v)?;
            if dims.iter().product::<i64>() != 1 {
                return Err(format!("Pad: the constant value must have one element, got shape {dims:?}"));
            }
            Some(if dims.is_empty() { v } else { imp.reshape(v, vec![])? })
        }
        None => None,
    };
    let axes = imp.const_ints(n, 3, "axes")?;
    if axes.is_some() && imp.opset < 18 {
        return Err(format!("Pad: the axes input is only in version 18 and later (opset {})", imp.opset));
    }
    let mode = Attrs(n).string("mode", "constant");
    Ok(vec![pad_with(imp, x, &pads, axes, value, &mode)?])
}

/// Pad 2: `pads`, `mode` and the float `value` are attributes.
fn pad_v2(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let pads = a.ints("pads").ok_or("Pad: the pads attribute is required")?;
    let mode = a.string("mode", "constant");
    let value = a.float("value", 0.0);
    let value = if value == 0.0 {
        None
    } else {
        let dtype = imp.ty(x)?.dtype;
        Some(imp.scalar(dtype, value as f64)?)
    };
    Ok(vec![pad_with(imp, x, &pads, None, value, &mode)?])
}

/// Each of `axes` (all by default) cropped or zero-padded to the size `shape` gives it,
/// centred: the odd element of an uneven difference goes to the end.
fn center_crop_pad(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let sizes = imp.const_ints(n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
    let axes = Attrs(n).ints("axes").unwrap_or_else(|| (0..dims.len() as i64).collect());
    if sizes.len() != axes.len() {
        return Err(format!("{} sizes for {} axes", sizes.len(), axes.len()));
    }
    let mut pads = vec![0; 2 * axes.len()];
    for (i, (&ax, &size)) in axes.iter().zip(&sizes).enumerate() {
        let d = dims[norm_axis(ax, dims.len())?];
        if size < 0 {
            return Err(format!("size {size} for axis {ax} is negative"));
        }
        // Negative pads crop; halves round toward the begin's smaller share.
        let begin = if size < d { -((d - size) / 2) } else { (size - d) / 2 };
        pads[i] = begin;
        pads[axes.len() + i] = size - d - begin;
    }
    Ok(vec![pad_with(imp, x, &pads, Some(axes), None, "constant")?])
}

/// Pads `x` by `pads` (every padded axis' begin, then every one's end; negative crops) along
/// `axes` (all dims when None).
fn pad_with(
    imp: &mut Importer,
    x: Value,
    pads: &[i64],
    axes: Option<Vec<i64>>,
    value: Option<Value>,
    mode: &str,
) -> Result<Value> {
    let dims = imp.shape(x)?;
    let r = dims.len();
    let axes = match axes {
        Some(axes) => axes.iter().map(|&ax| norm_axis(ax, r)).collect::<Result<Vec<_>>>()?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!("Pad: {} pads for {} axes (it needs two per axis)", pads.len(), axes.len()));
    }
    let (mut begin, mut end) = (vec![0i64; r], vec![0i64; r]);
    for (i, &ax) in axes.iter().enumerate() {
        begin[ax] = pads[i];
        end[ax] = pads[axes.len() + i];
    }
    for ax in 0..r {
        if dims[ax] + begin[ax] + end[ax] < 0 {
            return Err(format!(
                "Pad: pads {} and {} leave axis {ax} of size {} negative",
                begin[ax], end[ax], dims[ax]
            ));
        }
    }
    match mode {
        "constant" => {
            let mut cur = x;
            // Negative pads crop first.
            if begin.iter().chain(&end).any(|&p| p < 0) {
                let starts = begin.iter().map(|&p| (-p).max(0)).collect::<Vec<_>>();
                let ends = dims.iter().zip(&end).map(|(&d, &p)| d + p.min(0)).collect::<Vec<_>>();
                cur = imp.emit1(
                    NodeSpec::new(Op::Slice, vec![cur])
                        .attr("starts", Attr::Ints(starts))
                        .attr("ends", Attr::Ints(ends)),
                )?;
            }
            if begin.iter().chain(&end).all(|&p| p <= 0) {
                return Ok(cur);
            }
            let value = match value {
                Some(v) => v,
                None => {
                    let dtype = imp.ty(x)?.dtype;
                    imp.scalar(dtype, 0.0)?
                }
            };
            let low = begin.iter().map(|&p| p.max(0)).collect();
            let high = end.iter().map(|&p| p.max(0)).collect();
            imp.emit1(
                NodeSpec::new(Op::Pad, vec![cur, value]).attr("low", Attr::Ints(low)).attr("high", Attr::Ints(high)),
            )
        }
        "edge" | "reflect" | "wrap" => {
            let mut cur = x;
            for ax in 0..r {
                if begin[ax] == 0 && end[ax] == 0 {
                    continue;
                }
                let d = dims[ax];
                if d == 0 {
                    return Err(format!("Pad: mode '{mode}' cannot pad axis {ax} of size 0"));
                }
                let idx: Vec<i64> = (-begin[ax]..d + end[ax])
                    .map(|j| match mode {
                        "edge" => j.clamp(0, d - 1),
                        "wrap" => j.rem_euclid(d),
                        _ if d == 1 => 0,
                        _ => {
                            let m = j.rem_euclid(2 * (d - 1));
                            if m < d {
                                m
                            } else {
                                2 * (d - 1) - m
                            }
                        }
                    })
                    .collect();
                let t = imp.constant(Tensor::I64(ndarray::Array1::from(idx).into_dyn()))?;
                cur = imp.emit1(NodeSpec::new(Op::Gather, vec![cur, t]).attr("axis", Attr::Int(ax as i64)))?;
            }
            Ok(cur)
        }
        other => Err(format!("Pad: mode '{other}' is not one of constant, edge, reflect, wrap")),
    }
}

/// DepthToSpace: `[N, C, H, W]` to `[N, C/b², H*b, W*b]` by a reshape to six dims, a transpose
/// and a reshape; DCR mode (the default) splits C as `[b, b, C/b²]`, CRD as `[C/b², b, b]`.
fn depth_to_space(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let (nb, c, h, w) = nchw(imp, x, "DepthToSpace")?;
    let b = a.int("blocksize", 0);
    if b <= 0 || c % (b * b) != 0 {
        return Err(format!("blocksize {b} must be positive with its square dividing the {c} channels"));
    }
    let (split, perm) = match a.string("mode", "DCR").as_str() {
        "DCR" => (vec![nb, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2]),
        "CRD" => (vec![nb, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3]),
        m => return Err(format!("mode must be DCR or CRD, got '{m}'")),
    };
    let y = imp.reshape(x, split)?;
    let y = imp.emit1(NodeSpec::new(Op::Transpose, vec![y]).attr("perm", Attr::Ints(perm)))?;
    Ok(vec![imp.reshape(y, vec![nb, c / (b * b), h * b, w * b])?])
}

/// SpaceToDepth: `[N, C, H, W]` to `[N, C*b², H/b, W/b]`, the inverse of DepthToSpace in DCR.
fn space_to_depth(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let (nb, c, h, w) = nchw(imp, x, "SpaceToDepth")?;
    let b = Attrs(n).int("blocksize", 0);
    if b <= 0 || h % b != 0 || w % b != 0 {
        return Err(format!("blocksize {b} must be positive and divide the height {h} and width {w}"));
    }
    let y = imp.reshape(x, vec![nb, c, h / b, b, w / b, b])?;
    let y = imp.emit1(NodeSpec::new(Op::Transpose, vec![y]).attr("perm", Attr::Ints(vec![0, 3, 5, 1, 2, 4])))?;
    Ok(vec![imp.reshape(y, vec![nb, c * b * b, h / b, w / b])?])
}

fn nchw(imp: &Importer, x: Value, op: &str) -> Result<(i64, i64, i64, i64)> {
    match imp.shape(x)?[..] {
        [nb, c, h, w] => Ok((nb, c, h, w)),
        ref d => Err(format!("{op} takes a 4-D input [N, C, H, W], got rank {}", d.len())),
    }
}
