//! Sliding-window kernels: convolution and pooling over `[N, C, spatial...]`, written as plain
//! loops over output positions and window taps (the geometry comes from `graphc_ir::window`).

use super::elem::{Float, Num};
use super::error::KernelError;
use crate::tensor::Tensor;
use graphc_ir::window::Window;
use graphc_ir::{Attrs, Op, TensorType};
use ndarray::{ArrayD, IxDyn};

fn geometry(attrs: &Attrs, kernel: Vec<u64>) -> Result<Window, KernelError> {
    Window::from_attrs(attrs, kernel).map_err(KernelError::new)
}

/// The row-major multi-index of flat position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize], out: &mut [usize]) {
    for d in (0..shape.len()).rev() {
        out[d] = i % shape[d];
        i /= shape[d];
    }
}

/// The input position (in unpadded coordinates) of tap `k` of the window at output `o`, per
/// spatial dim; `None` when it falls in the padding or beyond.
fn tap(w: &Window, o: &[usize], k: &[usize], dims: &[usize], pos: &mut [usize]) -> TapKind {
    let mut kind = TapKind::Inside;
    for i in 0..o.len() {
        // Strides, pads and dilations may each be near i64::MAX (the type rule checks only that
        // the geometry fits 64 bits), so positions are computed in 128 bits.
        let p = o[i] as i128 * w.strides[i] as i128 - w.pads_begin[i] as i128 + k[i] as i128 * w.dilations[i] as i128;
        if p < 0 || p >= dims[i] as i128 {
            let padded_end = dims[i] as i128 + w.pads_end[i] as i128;
            if p >= padded_end {
                return TapKind::Beyond;
            }
            kind = TapKind::Padding;
        } else {
            pos[i] = p as usize;
        }
    }
    kind
}

#[derive(PartialEq)]
enum TapKind {
    Inside,
    /// In the explicit padding.
    Padding,
    /// Past the end padding (only `ceil_mode` windows reach there).
    Beyond,
}

/// Flat offset of `[n, c, pos...]` in a row-major `[N, C, dims...]` array.
fn offset(n: usize, c: usize, channels: usize, pos: &[usize], dims: &[usize]) -> usize {
    let mut off = n * channels + c;
    for (p, d) in pos.iter().zip(dims) {
        off = off * d + p;
    }
    off
}

pub fn conv(x: &Tensor, w: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Tensor, KernelError> {
    match (x, w) {
        (Tensor::F32(x), Tensor::F32(w)) => Ok(Tensor::F32(conv_float(x, w, attrs, result)?)),
        (Tensor::F64(x), Tensor::F64(w)) => Ok(Tensor::F64(conv_float(x, w, attrs, result)?)),
        _ => Err(KernelError::new(format!("conv of {} and {}", x.dtype(), w.dtype()))),
    }
}

fn conv_float<T: Float>(
    x: &ArrayD<T>,
    w: &ArrayD<T>,
    attrs: &Attrs,
    result: &TensorType,
) -> Result<ArrayD<T>, KernelError> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let out_shape: Vec<usize> = result.shape.iter().map(|&d| d as usize).collect();
    let win = geometry(attrs, ws[2..].iter().map(|&k| k as u64).collect())?;
    let group = attrs.int("group").unwrap_or(1).max(1) as usize;
    let (n_batch, c_in, m_out) = (xs[0], xs[1], ws[0]);
    let (c_per, m_per) = (c_in / group, m_out / group);
    let (dims, kdims, odims) = (&xs[2..], &ws[2..], &out_shape[2..]);
    let (x, w) = (x.as_standard_layout(), w.as_standard_layout());
    let (xv, wv) = (x.as_slice().expect("standard layout"), w.as_slice().expect("standard layout"));
    let taps: usize = kdims.iter().product();
    let positions: usize = odims.iter().product();
    let mut out = crate::tensor::try_vec(result.num_elements().unwrap_or(u64::MAX), result).map_err(KernelError)?;
    let (mut o, mut k, mut pos) = (vec![0; odims.len()], vec![0; kdims.len()], vec![0; dims.len()]);
    for n in 0..n_batch {
        for m in 0..m_out {
            let g = m / m_per;
            for op in 0..positions {
                unravel(op, odims, &mut o);
                let mut acc = 0.0f64;
                for c in 0..c_per {
                    for t in 0..taps {
                        unravel(t, kdims, &mut k);
                        if tap(&win, &o, &k, dims, &mut pos) == TapKind::Inside {
                            let xi = offset(n, g * c_per + c, c_in, &pos, dims);
                            let wi = offset(m, c, c_per, &k, kdims);
                            acc += xv[xi].to_f64() * wv[wi].to_f64();
                        }
                    }
                }
                out.push(T::from_f64(acc));
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| KernelError::new(format!("conv result: {e}")))
}

/// `max_pool {indices = true}`: the maxima and their flat indices into the input.
pub fn max_pool_with_indices(x: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Vec<Tensor>, KernelError> {
    let kernel: Vec<u64> = attrs.ints("kernel").unwrap_or_default().iter().map(|&k| k as u64).collect();
    let win = geometry(attrs, kernel)?;
    fn run<T: Num>(x: &ArrayD<T>, win: &Window, result: &TensorType) -> Result<(ArrayD<T>, ArrayD<i64>), KernelError>
    where
        ArrayD<T>: Into<Tensor>,
    {
        // Window values are paired with their flat input offsets by visiting the input of
        // offsets alongside it.
        let offsets = ArrayD::from_shape_vec(IxDyn(x.shape()), (0..x.len() as i64).collect::<Vec<_>>())
            .map_err(|e| KernelError::new(e.to_string()))?;
        let idx = each_window(&offsets, win, result, |taps| {
            let mut best: Option<i64> = None;
            let xs = x.as_standard_layout();
            let xv = xs.as_slice().expect("standard layout");
            for (_, o) in taps {
                if let Some(o) = o {
                    let better = match best {
                        None => true,
                        Some(b) => {
                            let (v, bv) = (xv[o as usize], xv[b as usize]);
                            !bv.is_nan() && (v.is_nan() || v > bv)
                        }
                    };
                    if better {
                        best = Some(o);
                    }
                }
            }
            best.unwrap_or(-1)
        })?;
        let xs = x.as_standard_layout();
        let xv = xs.as_slice().expect("standard layout");
        let values = idx.mapv(|i| if i < 0 { T::LOWEST } else { xv[i as usize] });
        Ok((values, idx))
    }
    macro_rules! each {
        ($($v:ident),*) => {
            match x {
                $(Tensor::$v(a) => {
                    let (v, i) = run(a, &win, result)?;
                    (Tensor::$v(v), i)
                })*
                _ => return Err(KernelError::new(format!("max_pool is not defined on {}", x.dtype()))),
            }
        };
    }
    let (v, i) = each!(F32, F64, I8, I16, I32, I64, U8, U16, U32, U64);
    Ok(vec![v, Tensor::I64(i)])
}

pub fn pool(op: Op, x: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Tensor, KernelError> {
    let kernel: Vec<u64> = attrs.ints("kernel").unwrap_or_default().iter().map(|&k| k as u64).collect();
    let win = geometry(attrs, kernel)?;
    let include_pad = attrs.bool("count_include_pad").unwrap_or(false);
    match (op, x) {
        (Op::MaxPool, Tensor::F32(a)) => Ok(Tensor::F32(pool_max(a, &win, result)?)),
        (Op::MaxPool, Tensor::F64(a)) => Ok(Tensor::F64(pool_max(a, &win, result)?)),
        (Op::MaxPool, Tensor::I32(a)) => Ok(Tensor::I32(pool_max(a, &win, result)?)),
        (Op::MaxPool, Tensor::I64(a)) => Ok(Tensor::I64(pool_max(a, &win, result)?)),
        (Op::MaxPool, Tensor::I8(a)) => Ok(Tensor::I8(pool_max(a, &win, result)?)),
        (Op::MaxPool, Tensor::U8(a)) => Ok(Tensor::U8(pool_max(a, &win, result)?)),
        (Op::AvgPool, Tensor::F32(a)) => Ok(Tensor::F32(pool_avg(a, &win, include_pad, result)?)),
        (Op::AvgPool, Tensor::F64(a)) => Ok(Tensor::F64(pool_avg(a, &win, include_pad, result)?)),
        _ => Err(KernelError::new(format!("'{}' is not defined on {}", op.name(), x.dtype()))),
    }
}

/// Visits every output element with the values and kinds of its window's taps.
fn each_window<T: Copy>(
    x: &ArrayD<T>,
    win: &Window,
    result: &TensorType,
    mut reduce: impl FnMut(&mut dyn Iterator<Item = (TapKind, Option<T>)>) -> T,
) -> Result<ArrayD<T>, KernelError> {
    let xs = x.shape().to_vec();
    let out_shape: Vec<usize> = result.shape.iter().map(|&d| d as usize).collect();
    let (dims, odims) = (&xs[2..], &out_shape[2..]);
    let kdims: Vec<usize> = win.kernel.iter().map(|&k| k as usize).collect();
    let x = x.as_standard_layout();
    let xv = x.as_slice().expect("standard layout");
    let taps: usize = kdims.iter().product();
    let positions: usize = odims.iter().product();
    let mut out = crate::tensor::try_vec(result.num_elements().unwrap_or(u64::MAX), result).map_err(KernelError)?;
    let mut o = vec![0; odims.len()];
    for n in 0..xs[0] {
        for c in 0..xs[1] {
            for op in 0..positions {
                unravel(op, odims, &mut o);
                let mut k = vec![0; kdims.len()];
                let mut pos = vec![0; dims.len()];
                let mut it = (0..taps).map(|t| {
                    unravel(t, &kdims, &mut k);
                    let kind = tap(win, &o, &k, dims, &mut pos);
                    let v = (kind == TapKind::Inside).then(|| xv[offset(n, c, xs[1], &pos, dims)]);
                    (kind, v)
                });
                out.push(reduce(&mut it));
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| KernelError::new(format!("pool result: {e}")))
}

fn pool_max<T: Num>(x: &ArrayD<T>, win: &Window, result: &TensorType) -> Result<ArrayD<T>, KernelError> {
    each_window(x, win, result, |taps| taps.filter_map(|(_, v)| v).fold(T::LOWEST, T::max_nan))
}

fn pool_avg<T: Float>(
    x: &ArrayD<T>,
    win: &Window,
    include_pad: bool,
    result: &TensorType,
) -> Result<ArrayD<T>, KernelError> {
    each_window(x, win, result, |taps| {
        let (mut sum, mut count) = (0.0f64, 0usize);
        for (kind, v) in taps {
            match kind {
                TapKind::Inside => {
                    sum += v.map_or(0.0, T::to_f64);
                    count += 1;
                }
                TapKind::Padding if include_pad => count += 1,
                _ => {}
            }
        }
        T::from_f64(if count == 0 { f64::NAN } else { sum / count as f64 })
    })
}

/// The sizes a gradient kernel works with, checked against each other: `x` (the forward op's
/// input shape), `y` (its output, the gradient operand's shape), and the window's output size
/// for `x`, so loops never index out of their buffers.
fn check_forward(op: &str, win: &Window, x: &[usize], y: &[usize], channels: usize) -> Result<(), KernelError> {
    let bad = || KernelError::new(format!("{op}: an input of shape {x:?} does not give an output of shape {y:?}"));
    if x.len() < 3 || y.len() != x.len() || win.kernel.len() != x.len() - 2 || x[0] != y[0] || y[1] != channels {
        return Err(bad());
    }
    let spatial: Vec<u64> = x[2..].iter().map(|&d| d as u64).collect();
    let out = win.output_dims(&spatial).map_err(|e| KernelError::new(format!("{op}: {e}")))?;
    if out.iter().zip(&y[2..]).any(|(&o, &d)| o != d as u64) {
        return Err(bad());
    }
    Ok(())
}

/// The channel counts of a conv of `x` by `w` in `group` groups: `(C/group, M/group)`, checked.
fn conv_groups(op: &str, x: &[usize], w: &[usize], group: i64) -> Result<(usize, usize), KernelError> {
    let g = usize::try_from(group).ok().filter(|&g| g >= 1);
    match g {
        Some(g)
            if w.len() == x.len()
                && x.len() >= 3
                && x[1].is_multiple_of(g)
                && w[0].is_multiple_of(g)
                && w[1].checked_mul(g) == Some(x[1]) =>
        {
            Ok((x[1] / g, w[0] / g))
        }
        _ => Err(KernelError::new(format!("{op}: an input {x:?} and a weight {w:?} do not fit {group} group(s)"))),
    }
}

fn shape_of(result: &TensorType) -> Vec<usize> {
    result.shape.iter().map(|&d| d as usize).collect()
}

/// Visits every (output position, tap) pair of a conv of an input `[N, C, dims...]` by a
/// weight `[M, C/group, kdims...]` whose tap lies inside the input, with the flat offsets of the
/// input element, the weight element and the output element: the conv's multiply-adds, each
/// once, in the same order as `conv`.
fn each_product(
    win: &Window,
    x: &[usize],
    w: &[usize],
    y: &[usize],
    c_per: usize,
    m_per: usize,
    mut visit: impl FnMut(usize, usize, usize),
) {
    let (dims, kdims, odims) = (&x[2..], &w[2..], &y[2..]);
    let taps: usize = kdims.iter().product();
    let positions: usize = odims.iter().product();
    let (mut o, mut k, mut pos) = (vec![0; odims.len()], vec![0; kdims.len()], vec![0; dims.len()]);
    for n in 0..x[0] {
        for m in 0..w[0] {
            let g = m / m_per;
            for op in 0..positions {
                unravel(op, odims, &mut o);
                let yi = (n * w[0] + m) * positions + op;
                for c in 0..c_per {
                    for t in 0..taps {
                        unravel(t, kdims, &mut k);
                        if tap(win, &o, &k, dims, &mut pos) == TapKind::Inside {
                            visit(offset(n, g * c_per + c, x[1], &pos, dims), offset(m, c, c_per, &k, kdims), yi);
                        }
                    }
                }
            }
        }
    }
}

fn conv_window(attrs: &Attrs, w: &[usize]) -> Result<Window, KernelError> {
    geometry(attrs, w.get(2..).unwrap_or_default().iter().map(|&k| k as u64).collect())
}

/// conv's adjoint in its input: every product `x[xi] * w[wi]` that made `y[yi]` sends
/// `dy[yi] * w[wi]` back to `dx[xi]` (sums in f64).
pub fn conv_input_grad(dy: &Tensor, w: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Tensor, KernelError> {
    fn run<T: Float>(
        dy: &ArrayD<T>,
        w: &ArrayD<T>,
        attrs: &Attrs,
        result: &TensorType,
    ) -> Result<ArrayD<T>, KernelError> {
        let (x, ws, ys) = (shape_of(result), w.shape().to_vec(), dy.shape().to_vec());
        let win = conv_window(attrs, &ws)?;
        let (c_per, m_per) = conv_groups("conv_input_grad", &x, &ws, attrs.int("group").unwrap_or(1))?;
        check_forward("conv_input_grad", &win, &x, &ys, ws[0])?;
        let (dy, w) = (dy.as_standard_layout(), w.as_standard_layout());
        let (dyv, wv) = (dy.as_slice().expect("standard layout"), w.as_slice().expect("standard layout"));
        let n = result.num_elements().unwrap_or(u64::MAX);
        let mut acc = crate::tensor::filled(n, 0.0f64, result).map_err(KernelError)?;
        each_product(&win, &x, &ws, &ys, c_per, m_per, |xi, wi, yi| acc[xi] += dyv[yi].to_f64() * wv[wi].to_f64());
        finish(acc, &x)
    }
    match (dy, w) {
        (Tensor::F32(a), Tensor::F32(b)) => Ok(Tensor::F32(run(a, b, attrs, result)?)),
        (Tensor::F64(a), Tensor::F64(b)) => Ok(Tensor::F64(run(a, b, attrs, result)?)),
        _ => Err(KernelError::new(format!("conv_input_grad of {} and {}", dy.dtype(), w.dtype()))),
    }
}

/// conv's adjoint in its weight: every product `x[xi] * w[wi]` that made `y[yi]` sends
/// `x[xi] * dy[yi]` back to `dw[wi]` (sums in f64).
pub fn conv_filter_grad(x: &Tensor, dy: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Tensor, KernelError> {
    fn run<T: Float>(
        x: &ArrayD<T>,
        dy: &ArrayD<T>,
        attrs: &Attrs,
        result: &TensorType,
    ) -> Result<ArrayD<T>, KernelError> {
        let (xs, ws, ys) = (x.shape().to_vec(), shape_of(result), dy.shape().to_vec());
        let win = conv_window(attrs, &ws)?;
        let (c_per, m_per) = conv_groups("conv_filter_grad", &xs, &ws, attrs.int("group").unwrap_or(1))?;
        check_forward("conv_filter_grad", &win, &xs, &ys, ws[0])?;
        let (x, dy) = (x.as_standard_layout(), dy.as_standard_layout());
        let (xv, dyv) = (x.as_slice().expect("standard layout"), dy.as_slice().expect("standard layout"));
        let n = result.num_elements().unwrap_or(u64::MAX);
        let mut acc = crate::tensor::filled(n, 0.0f64, result).map_err(KernelError)?;
        each_product(&win, &xs, &ws, &ys, c_per, m_per, |xi, wi, yi| acc[wi] += xv[xi].to_f64() * dyv[yi].to_f64());
        finish(acc, &ws)
    }
    match (x, dy) {
        (Tensor::F32(a), Tensor::F32(b)) => Ok(Tensor::F32(run(a, b, attrs, result)?)),
        (Tensor::F64(a), Tensor::F64(b)) => Ok(Tensor::F64(run(a, b, attrs, result)?)),
        _ => Err(KernelError::new(format!("conv_filter_grad of {} and {}", x.dtype(), dy.dtype()))),
    }
}

/// avg_pool's adjoint: each window's gradient, divided by the count avg_pool divided by, goes
/// to every input position of the window (sums in f64).
pub fn avg_pool_grad(dy: &Tensor, attrs: &Attrs, result: &TensorType) -> Result<Tensor, KernelError> {
    let kernel: Vec<u64> = attrs.ints("kernel").unwrap_or_default().iter().map(|&k| k as u64).collect();
    let win = geometry(attrs, kernel)?;
    let include_pad = attrs.bool("count_include_pad").unwrap_or(false);
    fn run<T: Float>(
        dy: &ArrayD<T>,
        win: &Window,
        include_pad: bool,
        result: &TensorType,
    ) -> Result<ArrayD<T>, KernelError> {
        let (xs, ys) = (shape_of(result), dy.shape().to_vec());
        check_forward("avg_pool_grad", win, &xs, &ys, xs.get(1).copied().unwrap_or(0))?;
        let dy = dy.as_standard_layout();
        let dyv = dy.as_slice().expect("standard layout");
        let (dims, odims) = (&xs[2..], &ys[2..]);
        let kdims: Vec<usize> = win.kernel.iter().map(|&k| k as usize).collect();
        let taps: usize = kdims.iter().product();
        let positions: usize = odims.iter().product();
        let n = result.num_elements().unwrap_or(u64::MAX);
        let mut acc = crate::tensor::filled(n, 0.0f64, result).map_err(KernelError)?;
        let (mut o, mut k, mut pos) = (vec![0; odims.len()], vec![0; kdims.len()], vec![0; dims.len()]);
        let mut inside = Vec::with_capacity(taps);
        for b in 0..xs[0] {
            for c in 0..xs[1] {
                for op in 0..positions {
                    unravel(op, odims, &mut o);
                    inside.clear();
                    let mut count = 0usize;
                    for t in 0..taps {
                        unravel(t, &kdims, &mut k);
                        match tap(win, &o, &k, dims, &mut pos) {
                            TapKind::Inside => {
                                inside.push(offset(b, c, xs[1], &pos, dims));
                                count += 1;
                            }
                            TapKind::Padding if include_pad => count += 1,
                            _ => {}
                        }
                    }
                    // A window with nothing counted (avg_pool's NaN) reaches no input.
                    if count > 0 {
                        let share = dyv[(b * xs[1] + c) * positions + op].to_f64() / count as f64;
                        for &i in &inside {
                            acc[i] += share;
                        }
                    }
                }
            }
        }
        finish(acc, &xs)
    }
    match dy {
        Tensor::F32(a) => Ok(Tensor::F32(run(a, &win, include_pad, result)?)),
        Tensor::F64(a) => Ok(Tensor::F64(run(a, &win, include_pad, result)?)),
        _ => Err(KernelError::new(format!("avg_pool_grad is defined on floats, not {}", dy.dtype()))),
    }
}

/// f64 sums rounded once to the result's dtype.
fn finish<T: Float>(acc: Vec<f64>, shape: &[usize]) -> Result<ArrayD<T>, KernelError> {
    ArrayD::from_shape_vec(IxDyn(shape), acc.into_iter().map(T::from_f64).collect())
        .map_err(|e| KernelError::new(format!("gradient result: {e}")))
}
