//! Resizing: Resize (10, 11, 13, 18, 19), Upsample (7, 9), and AffineGrid's sampling grid. Shapes are static, so the
//! scales or sizes (and the roi of `tf_crop_and_resize`) are known at import, and with them,
//! for every resized axis, each output coordinate's source indices and weights: the resize is
//! separable, one axis after another (in ONNX's reference order), each a weighted sum of
//! `gather`s with constant indices times constant weights broadcast along the axis. Where every
//! output takes one source element whole (nearest, or integer ratios), the axis is a single
//! gather. Modes nearest (every `nearest_mode`), linear and cubic (`cubic_coeff_a`,
//! `exclude_outside`), every coordinate transformation mode of each version, `antialias` (the
//! kernel widened by 1 / scale when downscaling: more taps), `axes` and
//! `keep_aspect_ratio_policy`. The indices, weights and rounding follow the ONNX reference
//! implementation; Resize 10 and Upsample map coordinates as `asymmetric` and pick nearest
//! pixels as onnxruntime does for them (truncating when upscaling an axis, rounding up when
//! downscaling it).

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::{norm_axis, Importer};
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::{kernels, Tensor};
use ndarray::{ArrayD, IxDyn};

pub(super) const OPS: &[OpEntry] = &[
    // 19 adds `half_pixel_symmetric`; 18 adds `antialias`, `axes` and
    // `keep_aspect_ratio_policy` and drops `tf_half_pixel_for_nn`; 13 makes roi and scales
    // optional inputs; 11 adds roi and sizes and the attributes beyond `mode`.
    OpEntry::since("Resize", 19, |imp, n| resize(imp, n, 19)),
    OpEntry::since("Resize", 18, |imp, n| resize(imp, n, 18)),
    OpEntry::since("Resize", 13, |imp, n| resize(imp, n, 13)),
    OpEntry::since("Resize", 11, |imp, n| resize(imp, n, 11)),
    OpEntry::since("Resize", 10, resize_v10),
    // Upsample 9 takes the scales as an input, 7 as an attribute (deprecated from 10 on; later
    // opsets' models are read as 9).
    OpEntry::since("Upsample", 9, |imp, n| upsample(imp, n, 9)),
    OpEntry::since("Upsample", 7, |imp, n| upsample(imp, n, 7)),
    OpEntry::since("AffineGrid", 20, affine_grid),
];

/// AffineGrid: the sampling grid `theta @ (x, y[, z], 1)` of every output position, for the
/// `size` known at import. A position's normalized coordinate along an axis of S points is
/// `-1 + 2i / (S - 1)` with `align_corners` (-1 for one point), else `(2i + 1) / S - 1`.
fn affine_grid(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let theta = imp.input(n, 0)?;
    let t = imp.ty(theta)?;
    let size = imp.const_ints(n, 1, "size")?.ok_or("input 1 (size) is required")?;
    let spatial = match size.len() {
        4 | 5 => size[2..].to_vec(),
        other => return Err(format!("size must be [N, C, H, W] or [N, C, D, H, W], got {other} values")),
    };
    let k = spatial.len();
    if t.shape.len() != 3 || t.shape[1] != k as u64 || t.shape[2] != k as u64 + 1 || t.shape[0] as i64 != size[0] {
        return Err(format!("theta must be [{}, {k}, {}] for size {size:?}, got {t}", size[0], k + 1));
    }
    if spatial.iter().any(|&s| s < 0) {
        return Err(format!("size {size:?} has a negative dim"));
    }
    let align = Attrs(n).int("align_corners", 0) != 0;
    let coord = |i: i64, s: i64| match (align, s) {
        (true, 1) => -1.0,
        (true, _) => -1.0 + 2.0 * i as f64 / (s - 1) as f64,
        (false, _) => (2 * i + 1) as f64 / s as f64 - 1.0,
    };
    // Rows (x, y[, z], 1) in row-major order of the spatial dims (D, H, W): x runs along the
    // last of them.
    let points = spatial
        .iter()
        .try_fold(1i64, |p, &s| p.checked_mul(s))
        .filter(|&p| p <= 1 << 24)
        .ok_or(format!("size {size:?} has more than 2^24 grid points, the most graphc builds at import"))?;
    let mut base = Vec::with_capacity(points as usize * (k + 1));
    for p in 0..points {
        let mut rest = p;
        let mut idx = vec![0; k];
        for d in (0..k).rev() {
            idx[d] = rest % spatial[d];
            rest /= spatial[d];
        }
        base.extend((0..k).rev().map(|d| coord(idx[d], spatial[d])));
        base.push(1.0);
    }
    let base = ndarray::Array2::from_shape_vec((points as usize, k + 1), base).map_err(|e| e.to_string())?;
    let base = imp.constant(kernels::cast(&Tensor::F64(base.into_dyn()), t.dtype))?;
    let grid = imp.emit1(NodeSpec::new(Op::MatMul, vec![base, theta]).attr("transpose_b", Attr::Bool(true)))?;
    let mut shape = vec![size[0]];
    shape.extend(&spatial);
    shape.push(k as i64);
    Ok(vec![imp.reshape(grid, shape)?])
}

/// How an output coordinate maps to an input coordinate along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coord {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// How nearest mode rounds a fractional input coordinate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize 10 and Upsample (onnxruntime's rule): truncate when upscaling, ceil when
    /// downscaling.
    Simple,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Nearest(Nearest),
    Linear,
    Cubic { a: f64 },
}

/// Everything that decides the indices and weights, once the output size is known.
#[derive(Clone, Copy, Debug)]
struct Interp {
    mode: Mode,
    coord: Coord,
    antialias: bool,
    exclude_outside: bool,
    extrapolation: f64,
    /// The roi is f32, and so is the reference's arithmetic on it (where it decides which
    /// outputs extrapolate and which pixel is nearest, the rounding shows).
    roi_f32: bool,
}

/// One resized axis: per output position, its source indices and weights (taps whose weight
/// is 0 left out, repeated indices merged), and whether it is extrapolated (takes
/// `extrapolation_value`; `tf_crop_and_resize` only).
struct AxisPlan {
    taps: Vec<Vec<(i64, f64)>>,
    extrapolated: Vec<bool>,
}

/// Resize 11 to 19.
fn resize(imp: &mut Importer, n: &NodeProto, version: i64) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let op = format!("Resize-{version}");
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let rank = dims.len();

    let mode_name = a.string("mode", "nearest");
    let mode = match mode_name.as_str() {
        "nearest" => Mode::Nearest(match a.string("nearest_mode", "round_prefer_floor").as_str() {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => {
                return Err(format!(
                    "{op}: nearest_mode '{other}' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil"
                ))
            }
        }),
        "linear" => Mode::Linear,
        "cubic" => Mode::Cubic { a: a.float("cubic_coeff_a", -0.75) as f64 },
        other => return Err(format!("{op}: mode '{other}' is not one of nearest, linear, cubic")),
    };
    let coord = match a.string("coordinate_transformation_mode", "half_pixel").as_str() {
        "half_pixel" => Coord::HalfPixel,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        "tf_half_pixel_for_nn" if version < 18 => Coord::TfHalfPixelForNn,
        "tf_half_pixel_for_nn" => {
            return Err(format!("{op}: coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed in Resize-18"))
        }
        "half_pixel_symmetric" if version >= 19 => Coord::HalfPixelSymmetric,
        "half_pixel_symmetric" => {
            return Err(format!("{op}: coordinate_transformation_mode 'half_pixel_symmetric' exists from Resize-19 on"))
        }
        other => return Err(format!("{op}: coordinate_transformation_mode '{other}' is not a known mode")),
    };
    let antialias = a.int("antialias", 0) != 0;
    if antialias && version < 18 {
        return Err(format!("{op}: antialias exists from Resize-18 on"));
    }
    if antialias && matches!(mode, Mode::Nearest(_)) {
        return Err(format!("{op}: antialias applies to modes linear and cubic only, not nearest"));
    }
    let mut interp = Interp {
        mode,
        coord,
        antialias,
        exclude_outside: a.int("exclude_outside", 0) != 0,
        extrapolation: a.float("extrapolation_value", 0.0) as f64,
        roi_f32: false,
    };

    // The resized axes (18+): scales, sizes and roi list theirs only.
    let axes: Vec<usize> = match a.ints("axes") {
        Some(axes) if version >= 18 => {
            let axes = axes.iter().map(|&ax| norm_axis(ax, rank)).collect::<Result<Vec<_>>>()?;
            for (i, ax) in axes.iter().enumerate() {
                if axes[..i].contains(ax) {
                    return Err(format!("{op}: axis {ax} is listed twice in axes"));
                }
            }
            axes
        }
        Some(_) => return Err(format!("{op}: the axes attribute exists from Resize-18 on")),
        None => (0..rank).collect(),
    };
    let policy = a.string("keep_aspect_ratio_policy", "stretch");
    if version < 18 && a.get("keep_aspect_ratio_policy").is_some() {
        return Err(format!("{op}: keep_aspect_ratio_policy exists from Resize-18 on"));
    }
    if !matches!(policy.as_str(), "stretch" | "not_larger" | "not_smaller") {
        return Err(format!(
            "{op}: keep_aspect_ratio_policy '{policy}' is not one of stretch, not_larger, not_smaller"
        ));
    }

    // An input present but with no elements counts as absent (11 requires roi and scales).
    let present = |imp: &Importer, i: usize| -> Result<bool> {
        Ok(match imp.opt_input(n, i)? {
            Some(v) => imp.shape(v)?.iter().product::<i64>() > 0,
            None => false,
        })
    };
    let scales = match present(imp, 2)? {
        true => imp.const_input(n, 2, "scales")?.map(|t| t.to_f64_vec()),
        false => None,
    };
    let sizes = if present(imp, 3)? { imp.const_ints(n, 3, "sizes")? } else { None };
    let known = |v: Vec<f64>, what: &str| -> Result<Vec<f64>> {
        if v.len() != axes.len() {
            return Err(format!("{op}: {what} has {} entries; the input has {} resized axes", v.len(), axes.len()));
        }
        let mut full = vec![1.0; rank];
        for (&ax, &s) in axes.iter().zip(&v) {
            full[ax] = s;
        }
        Ok(full)
    };
    let (scale, out): (Vec<f64>, Vec<i64>) = match (scales, sizes) {
        (Some(_), Some(_)) => return Err(format!("{op}: scales and sizes are both given; only one may be")),
        (None, None) => return Err(format!("{op}: one of scales (input 2) and sizes (input 3) is required")),
        (Some(s), None) => {
            let s = known(s, "scales")?;
            if let Some(bad) = s.iter().find(|&&s| !s.is_finite() || s <= 0.0) {
                return Err(format!("{op}: scale {bad} is not positive"));
            }
            let out = s.iter().zip(&dims).map(|(&s, &d)| (s * d as f64).floor() as i64).collect();
            (s, out)
        }
        (None, Some(z)) => {
            if let Some(bad) = z.iter().find(|&&z| z < 0) {
                return Err(format!("{op}: size {bad} is negative"));
            }
            let z = known(z.iter().map(|&z| z as f64).collect(), "sizes")?;
            let mut out: Vec<i64> = dims.clone();
            for &ax in &axes {
                out[ax] = z[ax] as i64;
            }
            let mut scale: Vec<f64> =
                out.iter().zip(&dims).map(|(&o, &d)| if d == 0 { 1.0 } else { o as f64 / d as f64 }).collect();
            if policy != "stretch" {
                let picked = axes.iter().map(|&ax| scale[ax]);
                let s = if policy == "not_larger" {
                    picked.fold(f64::INFINITY, f64::min)
                } else {
                    picked.fold(f64::NEG_INFINITY, f64::max)
                };
                for &ax in &axes {
                    scale[ax] = s;
                    out[ax] = (s * dims[ax] as f64 + 0.5) as i64;
                }
            }
            (scale, out)
        }
    };

    // roi: [starts..., ends...] over the resized axes; only tf_crop_and_resize reads it.
    let roi = if present(imp, 1)? {
        let r = match imp.const_input(n, 1, "roi") {
            Ok(t) => t.map(|t| {
                interp.roi_f32 = t.dtype() == DType::F32;
                t.to_f64_vec()
            }),
            Err(e) if coord == Coord::TfCropAndResize => return Err(format!("{op}: {e}")),
            Err(_) => None,
        };
        match r {
            Some(r) if r.len() != 2 * axes.len() => {
                return Err(format!(
                    "{op}: roi has {} entries; it needs 2 per resized axis ({})",
                    r.len(),
                    2 * axes.len()
                ))
            }
            Some(r) => {
                let mut full: Vec<(f64, f64)> = vec![(0.0, 1.0); rank];
                for (i, &ax) in axes.iter().enumerate() {
                    full[ax] = (r[i], r[axes.len() + i]);
                }
                Some(full)
            }
            None => None,
        }
    } else {
        None
    };
    if coord == Coord::TfCropAndResize && roi.is_none() {
        return Err(format!("{op}: coordinate_transformation_mode tf_crop_and_resize needs roi (input 1)"));
    }
    emit_resize(imp, &op, x, &dims, &axes, &scale, &out, roi.as_deref(), interp)
}

/// Resize 10: scales (input 1) only, modes nearest and linear, coordinates `asymmetric`.
fn resize_v10(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let scales = imp.const_input(n, 1, "scales")?.ok_or("input 1 (scales) is required")?.to_f64_vec();
    legacy(imp, n, "Resize-10", scales)
}

/// Upsample 7 (scales as an attribute) and 9 (as input 1).
fn upsample(imp: &mut Importer, n: &NodeProto, version: i64) -> Result<Vec<Value>> {
    let op = format!("Upsample-{version}");
    let scales = if version >= 9 {
        imp.const_input(n, 1, "scales")?.ok_or(format!("{op}: input 1 (scales) is required"))?.to_f64_vec()
    } else {
        let a = Attrs(n);
        let s = a.get("scales").map(|a| a.floats.clone()).unwrap_or_default();
        if s.is_empty() {
            return Err(format!("{op}: the scales attribute is required"));
        }
        s.iter().map(|&s| s as f64).collect()
    };
    legacy(imp, n, &op, scales)
}

/// Resize 10 and Upsample: scales for every axis, output dims floor(dim * scale).
fn legacy(imp: &mut Importer, n: &NodeProto, op: &str, scales: Vec<f64>) -> Result<Vec<Value>> {
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    if scales.len() != dims.len() {
        return Err(format!("{op}: scales has {} entries; the input has rank {}", scales.len(), dims.len()));
    }
    if let Some(bad) = scales.iter().find(|&&s| !s.is_finite() || s <= 0.0) {
        return Err(format!("{op}: scale {bad} is not positive"));
    }
    let mode = match Attrs(n).string("mode", "nearest").as_str() {
        "nearest" => Mode::Nearest(Nearest::Simple),
        "linear" | "bilinear" => Mode::Linear,
        other => return Err(format!("{op}: mode '{other}' is not one of nearest, linear")),
    };
    let interp = Interp {
        mode,
        coord: Coord::Asymmetric,
        antialias: false,
        exclude_outside: false,
        extrapolation: 0.0,
        roi_f32: false,
    };
    let out: Vec<i64> = scales.iter().zip(&dims).map(|(&s, &d)| (s * d as f64).floor() as i64).collect();
    let axes: Vec<usize> = (0..dims.len()).collect();
    emit_resize(imp, op, x, &dims, &axes, &scales, &out, None, interp)
}

/// The resize as IR, one axis after another in `axes`' order.
#[allow(clippy::too_many_arguments)]
fn emit_resize(
    imp: &mut Importer,
    op: &str,
    x: Value,
    dims: &[i64],
    axes: &[usize],
    scale: &[f64],
    out: &[i64],
    roi: Option<&[(f64, f64)]>,
    interp: Interp,
) -> Result<Vec<Value>> {
    let dtype = imp.ty(x)?.dtype;
    let mut cur = x;
    for &ax in axes {
        let (len, size) = (dims[ax], out[ax]);
        let r = roi.map(|r| r[ax]);
        // As the reference: an axis kept as it is is skipped.
        let unit = |v: f64, to: f64| (v - to).abs() <= 1e-9 * v.abs().max(to.abs());
        if unit(scale[ax], 1.0) && size == len && r.is_none_or(|(s, e)| unit(s, 0.0) && unit(e, 1.0)) {
            continue;
        }
        if len == 0 {
            if size == 0 {
                continue;
            }
            return Err(format!("{op}: axis {ax} has no elements and cannot be resized to {size}"));
        }
        let plan = plan_axis(len, size, scale[ax], r, interp);
        cur = emit_axis(imp, op, cur, ax, dtype, &plan, interp.extrapolation)?;
    }
    if cur == x {
        cur = imp.unary(Op::Identity, x)?;
    }
    Ok(vec![cur])
}

/// Indices and weights along one axis of `len` elements resized to `size` (the reference's
/// `_interpolate_1d_along_axis`).
fn plan_axis(len: i64, size: i64, scale: f64, roi: Option<(f64, f64)>, it: Interp) -> AxisPlan {
    let in_w = len as f64;
    let out_w = scale * in_w;
    let mut taps = Vec::with_capacity(size as usize);
    let mut extrapolated = Vec::with_capacity(size as usize);
    for y in 0..size {
        let yf = y as f64;
        let mut extra = false;
        let x_ori = match it.coord {
            Coord::AlignCorners => {
                if out_w == 1.0 {
                    0.0
                } else {
                    yf * (in_w - 1.0) / (out_w - 1.0)
                }
            }
            Coord::Asymmetric => yf / scale,
            Coord::TfCropAndResize => {
                let (s, e) = roi.unwrap_or((0.0, 1.0));
                // The reference's roi products and differences are f32 for an f32 roi.
                let (span, start) = if it.roi_f32 {
                    let (s, e, m) = (s as f32, e as f32, (len - 1) as f32);
                    ((e - s) as f64, (s * m) as f64)
                } else {
                    (e - s, s * (in_w - 1.0))
                };
                let x = if out_w == 1.0 {
                    if it.roi_f32 {
                        (span as f32 * (len - 1) as f32 / 2.0) as f64
                    } else {
                        span * (in_w - 1.0) / 2.0
                    }
                } else {
                    yf * span * (in_w - 1.0) / (out_w - 1.0)
                };
                let x = x + start;
                extra = x < 0.0 || x > in_w - 1.0;
                x
            }
            Coord::PytorchHalfPixel => {
                if out_w == 1.0 {
                    -0.5
                } else {
                    (yf + 0.5) / scale - 0.5
                }
            }
            Coord::HalfPixel => (yf + 0.5) / scale - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = size as f64 / out_w;
                let center = in_w / 2.0;
                let offset = center * (1.0 - adjustment);
                offset + (yf + 0.5) / scale - 0.5
            }
            Coord::TfHalfPixelForNn => (yf + 0.5) / scale,
        };
        extrapolated.push(extra);
        if extra {
            taps.push(vec![]);
            continue;
        }
        let floor = x_ori.floor();
        // In (0, 1]: an integer coordinate takes the pixel on its left with ratio 1.
        let ratio = if x_ori == floor { 1.0 } else { x_ori - floor };
        let mut coeffs =
            if it.antialias { antialiased(ratio, scale, it.mode) } else { coefficients(ratio, scale, it.mode) };
        let n = coeffs.len() as i64;
        let pad = (n + 1) / 2;
        let x_padded = x_ori + pad as f64;
        let p = x_padded.floor();
        let frac = x_padded - p;
        let offset = if n % 2 == 0 {
            if frac == 0.0 {
                -(n / 2)
            } else {
                -(n / 2) + 1
            }
        } else {
            let base = -((n - 1) / 2);
            if frac <= 0.5 {
                base
            } else {
                base + 1
            }
        };
        let start = p as i64 + offset - pad;
        if it.exclude_outside {
            for (k, c) in coeffs.iter_mut().enumerate() {
                let idx = start + k as i64;
                if idx < 0 || idx >= len {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeffs.iter().sum();
            let sum = if sum == 0.0 { 1.0 } else { sum };
            coeffs.iter_mut().for_each(|c| *c /= sum);
        }
        // Edge padding: indices outside clamp to the border.
        let mut row: Vec<(i64, f64)> = Vec::new();
        for (k, &c) in coeffs.iter().enumerate() {
            if c == 0.0 {
                continue;
            }
            let idx = (start + k as i64).clamp(0, len - 1);
            match row.iter_mut().find(|(i, _)| *i == idx) {
                Some((_, w)) => *w += c,
                None => row.push((idx, c)),
            }
        }
        taps.push(row);
    }
    AxisPlan { taps, extrapolated }
}

/// The weights of the taps around a coordinate whose distance past its left neighbour is
/// `ratio` (in (0, 1]).
fn coefficients(ratio: f64, scale: f64, mode: Mode) -> Vec<f64> {
    match mode {
        Mode::Nearest(rule) => {
            let right = if ratio == 1.0 {
                true
            } else {
                match rule {
                    Nearest::RoundPreferFloor => ratio > 0.5,
                    Nearest::RoundPreferCeil => ratio >= 0.5,
                    Nearest::Floor => false,
                    Nearest::Ceil => true,
                    Nearest::Simple => scale < 1.0,
                }
            };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        Mode::Linear => vec![1.0 - ratio, ratio],
        Mode::Cubic { a } => {
            let r = ratio;
            vec![
                ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                ((a + 2.0) * (1.0 - r) - (a + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
                ((a * ((1.0 - r) + 1.0) - 5.0 * a) * ((1.0 - r) + 1.0) + 8.0 * a) * ((1.0 - r) + 1.0) - 4.0 * a,
            ]
        }
    }
}

/// As [`coefficients`], with the antialiasing filter: the kernel stretched by 1 / scale when
/// downscaling (more taps), normalized to sum 1.
fn antialiased(ratio: f64, scale: f64, mode: Mode) -> Vec<f64> {
    let s = scale.min(1.0);
    let coeffs: Vec<f64> = match mode {
        Mode::Linear => {
            let start = (-1.0 / s).floor() as i64 + 1;
            let footprint = 2 - 2 * start;
            (start..start + footprint).map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect()
        }
        Mode::Cubic { a } => {
            let start = (-2.0 / s).floor() as i64 + 1;
            let end = 2 - start;
            (start..end)
                .map(|i| {
                    let x = (s * (i as f64 - ratio)).abs();
                    let (x2, x3) = (x * x, x * x * x);
                    if x <= 1.0 {
                        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                    } else if x < 2.0 {
                        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                })
                .collect()
        }
        Mode::Nearest(_) => return coefficients(ratio, scale, mode),
    };
    let sum: f64 = coeffs.iter().sum();
    coeffs.iter().map(|c| c / sum).collect()
}

/// One axis as IR: a gather where every output takes one element whole, else the weighted sum
/// of one gather per tap; then `extrapolation_value` where the axis extrapolates.
fn emit_axis(
    imp: &mut Importer,
    op: &str,
    x: Value,
    axis: usize,
    dtype: DType,
    plan: &AxisPlan,
    extrapolation: f64,
) -> Result<Value> {
    let rank = imp.shape(x)?.len();
    let size = plan.taps.len();
    let width = plan.taps.iter().map(Vec::len).max().unwrap_or(0);
    // The shape a per-output constant broadcasts along the axis with.
    let mut along = vec![1usize; rank];
    along[axis] = size;
    // Extrapolated outputs have no taps; the select below fills them.
    let one_hot =
        plan.taps.iter().zip(&plan.extrapolated).all(|(t, &e)| (e && t.is_empty()) || (t.len() == 1 && t[0].1 == 1.0));
    let mut result = if one_hot {
        let idx: Vec<i64> = plan.taps.iter().map(|t| t.first().map_or(0, |&(i, _)| i)).collect();
        gather(imp, x, axis, idx)?
    } else {
        if !dtype.is_float() {
            return Err(format!(
                "{op}: interpolating (not nearest) {dtype:?} tensors is not supported (only f32 and f64; graphc has no rounding op)"
            ));
        }
        let mut sum: Option<Value> = None;
        for k in 0..width {
            let idx: Vec<i64> = plan.taps.iter().map(|t| t.get(k).map_or(0, |&(i, _)| i)).collect();
            let w: Vec<f64> = plan.taps.iter().map(|t| t.get(k).map_or(0.0, |&(_, w)| w)).collect();
            let g = gather(imp, x, axis, idx)?;
            let term = if w.iter().all(|&w| w == 1.0) {
                g
            } else {
                let wt = imp.constant(per_output(&along, w, dtype)?)?;
                imp.binary(Op::Mul, g, wt)?
            };
            sum = Some(match sum {
                Some(s) => imp.binary(Op::Add, s, term)?,
                None => term,
            });
        }
        sum.expect("at least one tap")
    };
    if plan.extrapolated.iter().any(|&e| e) {
        let mask = ArrayD::from_shape_vec(IxDyn(&along), plan.extrapolated.clone()).map_err(|e| e.to_string())?;
        let mask = imp.constant(Tensor::Bool(mask))?;
        let value = if dtype.is_float() { extrapolation } else { extrapolation.round_ties_even() };
        let fill = imp.scalar(dtype, value)?;
        result = imp.emit1(NodeSpec::new(Op::Select, vec![mask, fill, result]))?;
    }
    Ok(result)
}

fn gather(imp: &mut Importer, x: Value, axis: usize, idx: Vec<i64>) -> Result<Value> {
    let t = imp.constant(Tensor::I64(ndarray::Array1::from(idx).into_dyn()))?;
    imp.emit1(NodeSpec::new(Op::Gather, vec![x, t]).attr("axis", Attr::Int(axis as i64)))
}

/// Per-output weights of `dtype`, shaped to broadcast along the axis.
fn per_output(shape: &[usize], w: Vec<f64>, dtype: DType) -> Result<Tensor> {
    let t = Tensor::F64(ArrayD::from_shape_vec(IxDyn(shape), w).map_err(|e| e.to_string())?);
    Ok(if dtype == DType::F64 { t } else { kernels::cast(&t, dtype) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interp(mode: Mode, coord: Coord) -> Interp {
        Interp { mode, coord, antialias: false, exclude_outside: false, extrapolation: 0.0, roi_f32: false }
    }

    #[test]
    fn nearest_picks_one_source_per_output() {
        // Upsample's rule: floor when upscaling, ceil when downscaling.
        let p = plan_axis(2, 4, 2.0, None, interp(Mode::Nearest(Nearest::Simple), Coord::Asymmetric));
        assert_eq!(p.taps, vec![vec![(0, 1.0)], vec![(0, 1.0)], vec![(1, 1.0)], vec![(1, 1.0)]]);
        let p = plan_axis(5, 3, 0.6, None, interp(Mode::Nearest(Nearest::Simple), Coord::Asymmetric));
        assert_eq!(p.taps, vec![vec![(0, 1.0)], vec![(2, 1.0)], vec![(4, 1.0)]]);
        // half_pixel, round_prefer_ceil: 4 -> 8 gives x = -0.25, 0.25, 0.75, ...
        let p = plan_axis(4, 8, 2.0, None, interp(Mode::Nearest(Nearest::RoundPreferCeil), Coord::HalfPixel));
        let idx: Vec<i64> = p.taps.iter().map(|t| t[0].0).collect();
        assert_eq!(idx, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn linear_weights_clamp_at_the_edges() {
        let p = plan_axis(2, 4, 2.0, None, interp(Mode::Linear, Coord::HalfPixel));
        // x = -0.25 (both taps clamp to 0), 0.25, 0.75, 1.25 (both clamp to 1).
        assert_eq!(p.taps[0], vec![(0, 1.0)]);
        assert_eq!(p.taps[1], vec![(0, 0.75), (1, 0.25)]);
        assert_eq!(p.taps[2], vec![(0, 0.25), (1, 0.75)]);
        assert_eq!(p.taps[3], vec![(1, 1.0)]);
    }

    #[test]
    fn antialias_widens_the_kernel_and_keeps_weights_normalized() {
        let mut it = interp(Mode::Linear, Coord::HalfPixel);
        it.antialias = true;
        let p = plan_axis(8, 2, 0.25, None, it);
        for t in &p.taps {
            assert!(t.len() > 2, "{t:?}");
            assert!((t.iter().map(|&(_, w)| w).sum::<f64>() - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn crop_and_resize_marks_outputs_outside_the_input() {
        let p = plan_axis(4, 3, 0.75, Some((-0.5, 0.5)), interp(Mode::Linear, Coord::TfCropAndResize));
        // x = -1.5, 0, 1.5.
        assert_eq!(p.extrapolated, vec![true, false, false]);
        assert!(p.taps[0].is_empty());
    }
}
