//! Max and average pooling in 1, 2 and 3 spatial dims (1-D and 2-D as 3-D of depth and height
//! 1, or of depth 1), plane by plane: per output position and spatial dim, the
//! window's taps inside the input form one range (positions grow with the tap), found from the
//! geometry, so no tap in the padding is visited. Results equal the reference kernel's bit
//! for bit: the same taps in the same order, maxima folded from -inf with NaN winning,
//! averages summed in f64.

use crate::rows::with_scratch;
use crate::rows::PARALLEL_ELEMENTS;
use crate::vectors::{fold, fold_rows};
use crate::window::{outputs_inside, Bordered, Phases};
use graphc_plan::PoolPlan;
use graphc_runtime::{Operands, Tensor};

/// The pooling a [`PoolPlan`] planned.
#[derive(Debug)]
pub struct PoolKernel {
    pub plan: PoolPlan,
}

/// One output position's taps along one spatial dim: those in `lo..hi` fall inside the
/// input, the first `counted` are not past the end padding (what `count_include_pad`
/// counts).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Taps {
    lo: usize,
    hi: usize,
    counted: usize,
}

/// The taps of each of `outputs` windows along a dim of `size`. Attributes may each be near
/// i64::MAX, so positions are computed in 128 bits, and from the geometry alone (a window
/// may be far larger than the input).
fn taps(outputs: usize, size: u64, kernel: u64, stride: u64, pad_begin: u64, pad_end: u64, dilation: u64) -> Vec<Taps> {
    let (size, kernel, d) = (size as i128, kernel as i128, dilation as i128);
    let ceil_div = |a: i128| -(-a).div_euclid(d);
    (0..outputs)
        .map(|o| {
            // Tap k of this window is at position start + k*d.
            let start = o as i128 * stride as i128 - pad_begin as i128;
            let lo = ceil_div(-start).clamp(0, kernel);
            let hi = if size - 1 - start < 0 { 0 } else { ((size - 1 - start).div_euclid(d) + 1).clamp(0, kernel) };
            let counted = ceil_div(size + pad_end as i128 - start).clamp(0, kernel);
            Taps { lo: lo as usize, hi: hi.max(lo) as usize, counted: counted as usize }
        })
        .collect()
}

impl PoolKernel {
    pub fn run(&self, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        let all = operands.all();
        let (1, Some(xt)) = (all.len(), all.first()) else {
            return Err(format!("{} operands where a pool takes 1", all.len()));
        };
        if !xt.is_of(&p.input) {
            return Err(format!(
                "compiled kernel input 0 is {} where the kernel was compiled for {}",
                xt.ty(),
                p.input
            ));
        }
        let x = xt.f32_elements(None).map_err(|e| format!("input 0: {e}"))?;
        // The 5-D views (a 2-D pool's with depth 1, a 1-D one's with depth and height 1, its
        // window one tap over them: `dims` checks).
        let w = &p.window;
        let Some([xs, ys]) = p.dims().filter(|[xs, ys]| xs[..2] == ys[..2]) else {
            return Err(format!("a 1-D, 2-D or 3-D pool of {} into {}", p.input, p.out));
        };
        let along = |i: usize| {
            taps(ys[2 + i], xs[2 + i] as u64, w.kernel[i], w.strides[i], w.pads_begin[i], w.pads_end[i], w.dilations[i])
        };
        let (tz, ty, tx) = (along(0), along(1), along(2));
        let (dp, h, wd) = (xs[2], xs[3], xs[4]);
        let ([sz, sy, sx], [pz, py, px], [dz, dy, dx]) = (
            [w.strides[0] as usize, w.strides[1] as usize, w.strides[2] as usize],
            [w.pads_begin[0] as usize, w.pads_begin[1] as usize, w.pads_begin[2] as usize],
            [w.dilations[0] as usize, w.dilations[1] as usize, w.dilations[2] as usize],
        );
        let max = p.op == graphc_ir::Op::MaxPool;
        let include_pad = p.count_include_pad;
        let ow = tx.len();
        // Whole output rows at a time, tap by tap (each output still takes its taps in
        // (ky, kx) order): column `kx` reaches the outputs whose input column is inside, a
        // range (contiguous in the phases of a strided input, below, or read with the
        // stride). Only the columns some output reaches are visited: the union of the
        // outputs' tap ranges, which a huge stride or window leaves as small as the outputs
        // and the input, not as large as the attributes.
        let columns: Vec<(usize, usize, usize)> = {
            let mut spans: Vec<(usize, usize)> = tx.iter().filter(|t| t.lo < t.hi).map(|t| (t.lo, t.hi)).collect();
            spans.sort_unstable();
            let mut reached: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
            for (lo, hi) in spans {
                match reached.last_mut() {
                    Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                    _ => reached.push((lo, hi)),
                }
            }
            reached
                .into_iter()
                .flat_map(|(lo, hi)| lo..hi)
                .map(|kx| outputs_inside(ow, wd, sx, kx, dx, px))
                .filter(|&(lo, hi, _)| lo < hi)
                .collect()
        };
        // Output row `oy` of output depth `oz` of a plane: input `src` (`[d, h, w]`) into
        // `out_row` (`[ow]`). Taps inside the input are in bounds: the ranges were derived
        // from these very sizes. A
        // maximum takes a tap when it is not NaN yet and the tap is NaN or larger (written
        // without short cuts, so the row loops vectorize).
        let take = |a: f32, v: f32| if !a.is_nan() & (v.is_nan() | (v > a)) { v } else { a };
        let divide = |total: f64, t_z: &Taps, t_y: &Taps, t_x: &Taps| {
            let count = if include_pad {
                t_z.counted * t_y.counted * t_x.counted
            } else {
                (t_z.hi - t_z.lo) * (t_y.hi - t_y.lo) * (t_x.hi - t_x.lo)
            };
            if count == 0 {
                f32::NAN
            } else {
                (total / count as f64) as f32
            }
        };
        // With a column stride, the input's rows split into the stride's phases, so that
        // each tap's columns are one contiguous run (`split` rows of `width`; column ix at
        // `at(ix)`), where the windows read every column at least once on average: a window
        // narrower than its stride reads a fraction of the input, read with the stride
        // instead of copied whole.
        let phases = Phases::new(wd, sx).filter(|_| w.kernel[2] >= sx as u64);
        let width = phases.as_ref().map_or(wd, Phases::row_len);
        let at = |ix: usize| phases.as_ref().map_or(ix, |p| p.at(ix));
        let step = if phases.is_some() { 1 } else { sx };
        let pool_row = |src: &[f32], oz: usize, oy: usize, out_row: &mut [f32]| {
            let (t_z, t_y) = (tz[oz], ty[oy]);
            // The window's rows of input plane `kz` (in the taps' order: depth by depth, each
            // depth's rows folded by a call of their own, one call for a 2-D or 1-D pool).
            let rows = |kz: usize| {
                let plane = &src[(oz * sz + kz * dz - pz) * h * width..][..h * width];
                (t_y.lo..t_y.hi).map(move |ky| &plane[(oy * sy + ky * dy - py) * width..][..width])
            };
            if max {
                out_row.fill(f32::NEG_INFINITY);
                for kz in t_z.lo..t_z.hi {
                    fold_rows(out_row, rows(kz), &columns, at, step, take);
                }
            } else {
                let mut sum = vec![0.0f64; ow];
                for kz in t_z.lo..t_z.hi {
                    fold_rows(&mut sum, rows(kz), &columns, at, step, |a: f64, v| a + f64::from(v));
                }
                for ((o, &total), t_x) in out_row.iter_mut().zip(&sum).zip(&tx) {
                    *o = divide(total, &t_z, &t_y, t_x);
                }
            }
        };
        let len = ys.iter().product::<usize>();
        // Every path below writes every element of the result.
        let mut out = operands.alloc_f32_filled(len)?;
        if len == 0 {
            return Ok(vec![Tensor::from_f32(out, &p.out)?]);
        }
        let (od, oh, plane_in) = (tz.len(), ty.len(), h * wd);
        let taps_per_window = w.kernel[0]
            .min(dp as u64)
            .saturating_mul(w.kernel[1].min(h as u64))
            .saturating_mul(w.kernel[2].min(wd as u64));
        let work = (len as u64).saturating_mul(taps_per_window);
        let parallel = work >= PARALLEL_ELEMENTS as u64 && graphc_runtime::may_split();
        // Several planes of one depth (1-D and 2-D pools): plane by plane, each in a border
        // (split by the strides) that no maximum or sum notices (-inf, or +0 added to a sum that
        // started at +0), every tap one loop over the whole plane in the same (ky, kx) order:
        // the row path's results, bit for bit.
        let kernel = [usize::try_from(w.kernel[1]), usize::try_from(w.kernel[2])];
        let flat = dp == 1 && od == 1 && w.kernel[0] == 1 && w.pads_begin[0] == 0 && w.pads_end[0] == 0;
        let bordered = match kernel {
            [Ok(kh), Ok(kw)] if flat && len > oh * ow => {
                Bordered::new([h, wd], [oh, ow], [kh, kw], [py, px], [dy, dx], [sy, sx]).map(|b| (b, kh, kw))
            }
            _ => None,
        };
        if let Some((b, kh, kw)) = bordered {
            let plane = |(i, dst): (usize, &mut [f32])| {
                let src = &x[i * plane_in..][..plane_in];
                let mut sum = vec![0.0f64; if max { 0 } else { b.out_len() }];
                with_scratch(b.len() + b.out_len(), &mut |scratch| {
                    let (input, acc) = scratch.split_at_mut(b.len());
                    b.fill(src, if max { f32::NEG_INFINITY } else { 0.0 }, input);
                    if max {
                        acc.fill(f32::NEG_INFINITY);
                    }
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let taps = &input[b.offset(ky, kx)..];
                            if max {
                                fold(acc, taps, take);
                            } else {
                                fold(&mut sum, taps, |a: f64, v| a + f64::from(v));
                            }
                        }
                    }
                    if max {
                        b.crop(acc, dst);
                    } else {
                        for (oy, out_row) in dst.chunks_exact_mut(ow).enumerate() {
                            for (ox, o) in out_row.iter_mut().enumerate() {
                                *o = divide(sum[oy * b.width() + ox], &tz[0], &ty[oy], &tx[ox]);
                            }
                        }
                    }
                });
            };
            if parallel {
                use rayon::prelude::*;
                out.par_chunks_exact_mut(oh * ow).enumerate().for_each(plane);
            } else {
                out.chunks_exact_mut(oh * ow).enumerate().for_each(plane);
            }
            return Ok(vec![Tensor::from_f32(out, &p.out)?]);
        }
        // Row by row of every plane, across the threads when there is enough work (one plane,
        // as a local response normalization's pool over channels, splits too).
        let mut split = Vec::new();
        if let Some(phases) = &phases {
            split = operands.alloc_f32_filled(phases.split_len(x.len()))?;
            phases.split(&x, &mut split, parallel);
        }
        let src: &[f32] = if phases.is_some() { &split } else { &x };
        let row = |(i, out_row): (usize, &mut [f32])| {
            let plane = i / (od * oh);
            pool_row(&src[plane * dp * h * width..][..dp * h * width], i / oh % od, i % oh, out_row)
        };
        if parallel && len > ow {
            use rayon::prelude::*;
            out.par_chunks_exact_mut(ow).enumerate().for_each(row);
        } else {
            out.chunks_exact_mut(ow).enumerate().for_each(row);
        }
        operands.recycle_f32(split);
        Ok(vec![Tensor::from_f32(out, &p.out)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The taps by visiting each one, as the reference does.
    fn visited(outputs: usize, size: u64, k: u64, s: u64, pb: u64, pe: u64, d: u64) -> Vec<Taps> {
        (0..outputs)
            .map(|o| {
                let pos = |t: u64| o as i128 * s as i128 - pb as i128 + t as i128 * d as i128;
                let inside: Vec<u64> = (0..k).filter(|&t| (0..size as i128).contains(&pos(t))).collect();
                let counted = (0..k).filter(|&t| pos(t) < size as i128 + pe as i128).count();
                match (inside.first(), inside.last()) {
                    (Some(&lo), Some(&hi)) => Taps { lo: lo as usize, hi: hi as usize + 1, counted },
                    _ => {
                        let t = taps(o + 1, size, k, s, pb, pe, d)[o];
                        assert_eq!(t.lo, t.hi, "an empty range at output {o}");
                        Taps { lo: t.lo, hi: t.lo, counted }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn tap_ranges_are_the_taps_inside_on_every_small_geometry() {
        for size in 1..6 {
            for k in 1..5 {
                for s in 1..4 {
                    for pb in 0..4 {
                        for pe in 0..4 {
                            for d in 1..4 {
                                let outputs = 7;
                                assert_eq!(
                                    taps(outputs, size, k, s, pb, pe, d),
                                    visited(outputs, size, k, s, pb, pe, d),
                                    "size {size} kernel {k} stride {s} pads {pb},{pe} dilation {d}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn huge_geometry_is_arithmetic_not_a_walk() {
        const M: u64 = i64::MAX as u64;
        let t = taps(2, 3, M, M, M, M, 1);
        assert_eq!(t[0], Taps { lo: M as usize, hi: M as usize, counted: M as usize });
    }
}
