//! Convolution in 1, 2 and 3 spatial dims (1-D and 2-D as 3-D of depth and height 1, or of
//! depth 1) as matrix products on gemm: per image and group, the weight's
//! `[M/group, C/group*KD*KH*KW]` rows times the input's patches laid out as columns (im2col,
//! `[C/group*KD*KH*KW, OD*OH*OW]`), straight into the result's `[M/group, OD*OH*OW]` rows. A
//! 1x1 window of stride 1 without padding reads the input as it is.
//!
//! A transposed convolution (`conv_input_grad`) is the same product turned around: per image
//! and group, the weight's transpose times the gradient's rows gives the columns, which
//! col2im adds into the (zeroed) result where each tap lands inside it.
//!
//! The reference kernel skips taps in the padding rather than multiplying them by zero; the
//! two differ only where a weight is infinite or NaN (0 * inf is NaN), so such weights with
//! padding take an exact loop instead.

use crate::entry::{matmul_into, Product};
use crate::kernel::{run_epilogue, LoopKernel};
use crate::rows::PARALLEL_FLOPS;
use crate::vectors::{fold, weighted_taps};
use crate::window::{outputs_inside, Bordered, Phases};
use graphc_plan::ConvGeometry;
use graphc_runtime::{Operands, Tensor};
use smallvec::SmallVec;

/// Whether no element is infinite or NaN: an exponent-bits test over every element, which
/// (unlike a search that stops at the first) vectorizes.
fn all_finite(v: &[f32]) -> bool {
    v.iter().fold(0u32, |a, x| a | u32::from(x.to_bits() & 0x7f80_0000 == 0x7f80_0000)) == 0
}

/// Whether some element is NaN (a test over every element, which vectorizes).
fn any_nan(v: &[f32]) -> bool {
    v.iter().fold(false, |a, x| a | x.is_nan())
}

/// Patch matrices larger than four times this many elements (16 MB, more than the caches
/// hold beside the input and result) are made a slab of output rows of about this many at a
/// time (see `ConvKernel::products`); smaller ones whole, as one product.
const PATCH_SLAB: usize = 1 << 20;

/// The input position of tap `k` (dilation `d`) of the window at output `o` (stride `s`,
/// padding `p` before): negative or past the end in the padding.
fn at(o: usize, s: usize, k: usize, d: usize, p: usize) -> i128 {
    o as i128 * s as i128 + k as i128 * d as i128 - p as i128
}

/// A convolution the plan took (`graphc_plan::ConvPlan`): its geometry, the operands that are
/// its input and weight, and its epilogue.
#[derive(Debug)]
pub struct ConvKernel {
    /// The operands that are the input and the weight.
    pub x: usize,
    pub w: usize,
    /// The generated elementwise epilogue over the result's rows, and the operands it reads
    /// besides the result.
    pub epilogue: Option<(LoopKernel, Vec<usize>)>,
    pub geometry: ConvGeometry,
}

/// The sizes of one convolution, checked against each other.
struct Sizes {
    n: usize,
    c: usize,
    d: usize,
    h: usize,
    w: usize,
    m: usize,
    cg: usize,
    kd: usize,
    kh: usize,
    kw: usize,
    od: usize,
    oh: usize,
    ow: usize,
    /// Some window reaches into the padding.
    padded: bool,
}

impl ConvKernel {
    /// The sizes of the geometry's 5-D views (a 2-D convolution's with depth 1, a 1-D one's
    /// with depth and height 1), checked against each other.
    fn sizes(&self) -> Result<Sizes, String> {
        let geometry = || {
            format!(
                "a conv of {} by {} into {} in {} groups",
                self.geometry.input, self.geometry.weight, self.geometry.out, self.geometry.group
            )
        };
        // The dims the graph's tensors lack are one tap over a size of 1 (`dims` checks).
        let [[n, c, d, h, w], [m, cg, kd, kh, kw], [n2, m2, od, oh, ow]] = self.geometry.dims().ok_or_else(geometry)?;
        if n2 != n
            || m2 != m
            || self.geometry.group == 0
            || c != cg * self.geometry.group
            || m % self.geometry.group != 0
        {
            return Err(geometry());
        }
        let mut s = Sizes { n, c, d, h, w, m, cg, kd, kh, kw, od, oh, ow, padded: false };
        s.padded = self.geometry.pads != [0, 0, 0] || self.reaches_beyond(&s);
        Ok(s)
    }

    pub fn run(&self, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
        let all = operands.all();
        let (Some(xt), Some(wt)) = (all.get(self.x), all.get(self.w)) else {
            return Err("conv operands are missing".into());
        };
        // A transposed convolution reads the forward one's result (its gradient).
        let (read, result) = if self.geometry.transposed {
            (&self.geometry.out, &self.geometry.input)
        } else {
            (&self.geometry.input, &self.geometry.out)
        };
        for (i, (t, ty)) in [(xt, read), (wt, &self.geometry.weight)].into_iter().enumerate() {
            if !t.is_of(ty) {
                return Err(format!("compiled kernel input {i} is {} where the kernel was compiled for {ty}", t.ty()));
            }
        }
        let x = xt.f32_elements(None).map_err(|e| format!("input 0: {e}"))?;
        let wv = wt.f32_elements(None).map_err(|e| format!("input 1: {e}"))?;
        let s = self.sizes()?;
        let (p, k, mg) = (s.od * s.oh * s.ow, s.cg * s.kd * s.kh * s.kw, s.m / self.geometry.group);
        // The whole convolution's work splits across threads (its epilogue, depthwise planes,
        // products spread whole) where it is enough; one product of a group by itself only
        // where that product is.
        let parallel = s.n * s.m * k * p >= PARALLEL_FLOPS && graphc_runtime::may_split();
        let threads = if mg * k * p >= PARALLEL_FLOPS && parallel { rayon::current_num_threads() } else { 1 };
        if self.geometry.transposed {
            let mut out = operands.alloc_f32_filled(s.n * s.c * s.d * s.h * s.w)?;
            self.transposed(&x, &wv, &s, &mut out, threads, operands)?;
            return match &self.epilogue {
                None => Ok(vec![Tensor::from_f32(out, result)?]),
                Some((lk, used)) => run_epilogue(lk, used, operands, out, parallel),
            };
        }
        // Every path below writes every element of the result.
        let mut out = operands.alloc_f32_filled(s.n * s.m * p)?;
        if out.is_empty() {
            // Nothing to compute (and no rows to split the work by).
        } else if s.cg == 1 {
            // Depthwise: one input channel per output channel, so one product per channel
            // would be a 1-row gemm; taps straight over the planes instead.
            // A plane costs about as much again as 4096 multiply-adds (its border, its
            // calls): 960 planes of 7x7 split across threads though their taps alone would not.
            let planes = s.n * s.m;
            let parallel = s.n * s.m * k * p + planes * 4096 >= PARALLEL_FLOPS && graphc_runtime::may_split();
            self.depthwise(&x, &wv, &s, &mut out, parallel);
        } else if s.padded && wv.len() <= out.len() && !all_finite(&wv) {
            self.exact(&x, &wv, &s, &mut out);
        } else {
            self.products(&x, &wv, &s, &mut out, threads, operands)?;
            // Weights larger than the result (a deep layer's, read from memory on every call)
            // are checked only where the products could have gone wrong: a tap in the padding
            // times an infinite or NaN weight is a NaN term, so a result with no NaN is right.
            if s.padded && wv.len() > out.len() && any_nan(&out) && !all_finite(&wv) {
                self.exact(&x, &wv, &s, &mut out);
            }
        }
        match &self.epilogue {
            None => Ok(vec![Tensor::from_f32(out, result)?]),
            Some((lk, used)) => run_epilogue(lk, used, operands, out, parallel),
        }
    }

    /// The convolution as products on gemm, into `out`.
    fn products(
        &self,
        x: &[f32],
        wv: &[f32],
        s: &Sizes,
        out: &mut [f32],
        threads: usize,
        operands: &Operands<'_>,
    ) -> Result<(), String> {
        let (p, k, mg) = (s.od * s.oh * s.ow, s.cg * s.kd * s.kh * s.kw, s.m / self.geometry.group);
        let direct = self.direct(s);
        let volume = s.d * s.h * s.w;
        let image = s.c * volume;
        // The weight's rows and the input's channels of image `img`, group `g`.
        let factors = |img: usize, g: usize| {
            (&wv[g * mg * k..][..mg * k], &x[img * image + g * s.cg * volume..][..s.cg * volume])
        };
        let blocks = s.n * self.geometry.group;
        if direct
            && threads == 1
            && blocks > 1
            && blocks.saturating_mul(mg * k * p) >= PARALLEL_FLOPS
            && graphc_runtime::may_split()
        {
            // Products each too small to split (ShuffleNet's 1x1 convolutions of 4 groups, 60
            // rows each), spread across the threads whole: one per image and group.
            use rayon::prelude::*;
            return out.par_chunks_exact_mut(mg * p).enumerate().try_for_each(|(i, dst)| {
                let (a, b) = factors(i / self.geometry.group, i % self.geometry.group);
                matmul_into(a, b, dst, Product { m: mg, k, n: p, transpose_a: false, transpose_b: false }, 1)
            });
        }
        // Patches past four PATCH_SLABs are made and multiplied a slab of output rows at a
        // time (a [64, 128, 128] input's 3x3 patches are 38 MB, a [64, 8, 28, 28] one's 3x3x3
        // 43 MB; a slab's stay in cache between im2col and the product), each slab's product
        // into a buffer of its own, copied into the result's rows. One slab: the whole result.
        let out_rows = s.od * s.oh;
        let whole = direct || k * out_rows * s.ow <= 4 * PATCH_SLAB;
        let slab = if whole { out_rows } else { (PATCH_SLAB / (k * s.ow).max(1)).clamp(1, out_rows) };
        let cols = slab * s.ow;
        // The patch matrix from the session's pool: a step after the first touches no fresh
        // pages for it.
        let mut col: Vec<f32> = if direct { Vec::new() } else { operands.alloc_f32_filled(k * cols)? };
        let mut part: Vec<f32> = if slab < out_rows { operands.alloc_f32_filled(mg * cols)? } else { Vec::new() };
        let phases = self.phases(s);
        let mut phased: Vec<f32> = match &phases {
            Some(phases) => operands.alloc_f32_filled(phases.split_len(s.cg * volume))?,
            None => Vec::new(),
        };
        for img in 0..s.n {
            for g in 0..self.geometry.group {
                let (a, xs) = factors(img, g);
                let dst = &mut out[(img * s.m + g * mg) * p..][..mg * p];
                if direct {
                    let product = Product { m: mg, k, n: p, transpose_a: false, transpose_b: false };
                    matmul_into(a, xs, dst, product, threads)?;
                    continue;
                }
                let split = phases.as_ref().map(|phases| {
                    phases.split(xs, &mut phased, threads > 1);
                    (phases, &phased[..])
                });
                for r0 in (0..out_rows).step_by(slab) {
                    let r1 = (r0 + slab).min(out_rows);
                    let n = (r1 - r0) * s.ow;
                    let col = &mut col[..k * n];
                    self.im2col(xs, s, col, r0..r1, split, threads > 1);
                    let product = Product { m: mg, k, n, transpose_a: false, transpose_b: false };
                    if slab == out_rows {
                        matmul_into(a, col, dst, product, threads)?;
                        continue;
                    }
                    let part = &mut part[..mg * n];
                    matmul_into(a, col, part, product, threads)?;
                    for (row, from) in dst.chunks_exact_mut(p).zip(part.chunks_exact(n)) {
                        row[r0 * s.ow..][..n].copy_from_slice(from);
                    }
                }
            }
        }
        operands.recycle_f32(col);
        operands.recycle_f32(part);
        operands.recycle_f32(phased);
        Ok(())
    }

    /// Whether the window is one tap of stride 1 reading the input as it is (a 1x1
    /// convolution): the patches are the input itself.
    fn direct(&self, s: &Sizes) -> bool {
        s.kd == 1
            && s.kh == 1
            && s.kw == 1
            && self.geometry.strides == [1, 1, 1]
            && !s.padded
            && (s.od, s.oh, s.ow) == (s.d, s.h, s.w)
    }

    /// Whether some window reaches past the input's end (into the padding after it).
    fn reaches_beyond(&self, s: &Sizes) -> bool {
        let end = |o: usize, k: usize, d: usize| {
            (o as i128 - 1) * self.geometry.strides[d] as i128 + (k as i128 - 1) * self.geometry.dilations[d] as i128
        };
        end(s.od, s.kd, 0) >= self.geometry.pads[0] as i128 + s.d as i128
            || end(s.oh, s.kh, 1) >= self.geometry.pads[1] as i128 + s.h as i128
            || end(s.ow, s.kw, 2) >= self.geometry.pads[2] as i128 + s.w as i128
    }

    /// How [`Self::im2col`] splits input rows into phases, if it does:
    /// where more than one tap reads each column (`kw` above the column stride, a strided
    /// stem's 7x7 window).
    fn phases(&self, s: &Sizes) -> Option<Phases> {
        Phases::new(s.w, self.geometry.strides[2]).filter(|_| s.kw > self.geometry.strides[2])
    }

    /// The patches of one image's group of channels `xs` (`[cg, d, h, w]`) for the output
    /// rows `slab` (of the `od * oh` rows of every output depth, one after another) as the
    /// columns of `col` (`[cg*kd*kh*kw, slab.len()*ow]`, every element written), zero where a
    /// tap falls in the padding. Each row of `col` is one tap of one channel, and the part of
    /// it for one output depth reads one input plane (or none, in the padding):
    /// the output rows and columns whose tap is inside the input are ranges, copied whole,
    /// and only the rest is zeroed; the rows split across threads when `parallel`. With a
    /// column stride, the input rows are read from their phases (`split`, the rows of `xs`
    /// split) where [`Self::phases`] gave them (each tap's columns then one contiguous run),
    /// else copied with the stride.
    fn im2col(
        &self,
        xs: &[f32],
        s: &Sizes,
        col: &mut [f32],
        slab: std::ops::Range<usize>,
        split: Option<(&Phases, &[f32])>,
        parallel: bool,
    ) {
        use rayon::prelude::*;
        let ([sz, sy, sx], [pz, py, px], [dz, dy, dx]) =
            (self.geometry.strides, self.geometry.pads, self.geometry.dilations);
        let rows: Vec<_> = (0..s.kh).map(|ky| outputs_inside(s.oh, s.h, sy, ky, dy, py)).collect();
        let columns: Vec<_> = (0..s.kw).map(|kx| outputs_inside(s.ow, s.w, sx, kx, dx, px)).collect();
        let plane_in = s.h * s.w;
        let p = slab.len() * s.ow;
        let tap = |(r, dst): (usize, &mut [f32])| {
            let (ci, kz, ky, kx) = (r / (s.kd * s.kh * s.kw), r / (s.kh * s.kw) % s.kd, r / s.kw % s.kh, r % s.kw);
            let ((y0, y1, iy0), (x0, x1, ix0)) = (rows[ky], columns[kx]);
            let mut at_row = slab.start;
            while at_row < slab.end {
                // Output rows r0..r1 of output depth oz, at their place in `dst`.
                let (oz, r0) = (at_row / s.oh, at_row % s.oh);
                let r1 = (r0 + slab.end - at_row).min(s.oh);
                let dst = &mut dst[(at_row - slab.start) * s.ow..][..(r1 - r0) * s.ow];
                at_row += r1 - r0;
                let iz = at(oz, sz, kz, dz, pz);
                if iz < 0 || iz >= s.d as i128 {
                    dst.fill(0.0);
                    continue;
                }
                // The input plane these output rows read (its index among the group's planes).
                let pi = ci * s.d + iz as usize;
                let plane = &xs[pi * plane_in..][..plane_in];
                // The rows of r0..r1 whose tap is inside the input.
                let (a, b) = (y0.clamp(r0, r1), y1.clamp(r0, r1));
                dst[..(a - r0) * s.ow].fill(0.0);
                dst[(b - r0) * s.ow..].fill(0.0);
                // Rows as wide as the input's, read at unit strides: the tap's outputs inside
                // are the input plane shifted by one offset, so one copy from the first inside
                // output to the last (rows of 7 to 56 columns in the zoo's models, a copy each,
                // cost more than they move); the columns past either side of each row, which
                // it fills from the neighbouring rows, are zeroed below as for any other tap.
                let shifted = sx == 1 && sy == 1 && s.ow == s.w && x0 < x1 && a < b;
                if shifted {
                    let (start, end) = ((a - r0) * s.ow + x0, (b - 1 - r0) * s.ow + x1);
                    let from = (iy0 + a - y0) * s.w + ix0;
                    dst[start..end].copy_from_slice(&plane[from..from + (end - start)]);
                }
                for oy in a..b {
                    let iy = iy0 + (oy - y0) * sy;
                    let row = &mut dst[(oy - r0) * s.ow..][..s.ow];
                    row[..x0].fill(0.0);
                    row[x1..].fill(0.0);
                    if shifted {
                        continue;
                    }
                    let d = &mut row[x0..x1];
                    if let Some((phases, phased)) = split {
                        let row = &phased[(pi * s.h + iy) * phases.row_len()..][..phases.row_len()];
                        d.copy_from_slice(&row[phases.at(ix0)..][..x1 - x0]);
                    } else if sx == 1 {
                        d.copy_from_slice(&plane[iy * s.w + ix0..][..x1 - x0]);
                    } else {
                        for (o, &v) in d.iter_mut().zip(plane[iy * s.w + ix0..].iter().step_by(sx)) {
                            *o = v;
                        }
                    }
                }
            }
        };
        if parallel {
            col.par_chunks_exact_mut(p).enumerate().for_each(tap);
        } else {
            col.chunks_exact_mut(p).enumerate().for_each(tap);
        }
    }

    /// A convolution whose groups each read one input channel (`C/group = 1`), output plane
    /// by output plane, f32 sums in tap order (kz, ky, kx).
    ///
    /// With finite weights, each input plane of the channel is copied into a zero border
    /// split by the strides ([`Bordered`]), so that each tap is one run over the whole output
    /// plane at the bordered width, and one call sums every tap of an output plane with the
    /// sums in registers (`weighted_taps`; the columns past the output's are dropped after).
    /// Products of the border's zeros add +0 or -0 to sums that started at +0, which leaves
    /// them as they were: the results are those of a loop that skips the taps in the padding
    /// (as the reference does, though it sums in f64), bit for bit. Otherwise (a weight
    /// infinite or NaN, whose product with the border would be NaN, or a border that would
    /// dwarf the plane) each tap adds `w * input row` to the output rows it reaches, over the
    /// output columns whose input column is inside (a range, from the geometry).
    fn depthwise(&self, x: &[f32], wv: &[f32], s: &Sizes, out: &mut [f32], parallel: bool) {
        let ([sz, sy, sx], [pz, py, px], [dz, dy, dx]) =
            (self.geometry.strides, self.geometry.pads, self.geometry.dilations);
        let mg = s.m / self.geometry.group;
        let (plane_in, plane_out, taps_per) = (s.h * s.w, s.oh * s.ow, s.kd * s.kh * s.kw);
        // Per kx: the output columns whose tap is inside the input, and the first one's input column.
        let columns: Vec<_> = (0..s.kw).map(|kx| outputs_inside(s.ow, s.w, sx, kx, dx, px)).collect();
        let bordered = all_finite(wv)
            .then(|| Bordered::new([s.h, s.w], [s.oh, s.ow], [s.kh, s.kw], [py, px], [dy, dx], [sy, sx]))
            .flatten();
        // Where each tap (ky, kx) reads in a bordered plane.
        let offsets: SmallVec<[usize; 32]> = match &bordered {
            Some(b) => (0..s.kh).flat_map(|ky| (0..s.kw).map(move |kx| b.offset(ky, kx))).collect(),
            None => SmallVec::new(),
        };
        // The input depths output depth `oz` reads, with their taps.
        let depths = |oz: usize| {
            (0..s.kd).filter_map(move |kz| {
                let iz = at(oz, sz, kz, dz, pz);
                (iz >= 0 && iz < s.d as i128).then_some((kz, iz as usize))
            })
        };
        let volume = |(i, dst): (usize, &mut [f32])| {
            let (img, m) = (i / s.m, i % s.m);
            let channel = img * s.c + m / mg;
            let src = &x[channel * s.d * plane_in..][..s.d * plane_in];
            let taps = &wv[m * taps_per..][..taps_per];
            if let Some(b) = &bordered {
                // The channel's input planes bordered one after another, then an output plane
                // at the bordered width.
                let len = b.len();
                crate::rows::with_scratch(s.d * len + b.out_len(), &mut |scratch| {
                    let (planes, wide) = scratch.split_at_mut(s.d * len);
                    for (plane, src) in planes.chunks_exact_mut(len).zip(src.chunks_exact(plane_in)) {
                        b.fill(src, 0.0, plane);
                    }
                    let mut list: SmallVec<[usize; 32]> = SmallVec::new();
                    let per_depth = offsets.len();
                    for (oz, dst) in dst.chunks_exact_mut(plane_out).enumerate() {
                        // The depth taps inside the input are a range of kz: their weights are
                        // one run of the channel's. One tap on the first plane (any 2-D
                        // convolution) reads at the offsets as they are.
                        let mut inside = depths(oz);
                        let (weights, at): (&[f32], &[usize]) = match inside.next() {
                            None => (&[], &[]),
                            Some((0, 0)) if s.kd == 1 => (taps, &offsets),
                            Some((kz, iz)) => {
                                list.clear();
                                list.extend(offsets.iter().map(|&at| iz * len + at));
                                for (_, iz) in inside {
                                    list.extend(offsets.iter().map(|&at| iz * len + at));
                                }
                                (&taps[kz * per_depth..][..list.len()], &list)
                            }
                        };
                        weighted_taps(wide, planes, weights, at);
                        b.crop(wide, dst);
                    }
                });
                return;
            }
            for (oz, dst) in dst.chunks_exact_mut(plane_out).enumerate() {
                dst.fill(0.0);
                for (kz, iz) in depths(oz) {
                    let rows = &src[iz * plane_in..][..plane_in];
                    for ky in 0..s.kh {
                        for oy in 0..s.oh {
                            let iy = at(oy, sy, ky, dy, py);
                            if iy < 0 || iy >= s.h as i128 {
                                continue;
                            }
                            let row = &rows[iy as usize * s.w..][..s.w];
                            let orow = &mut dst[oy * s.ow..][..s.ow];
                            for (kx, &(lo, hi, ix0)) in columns.iter().enumerate() {
                                let w = taps[(kz * s.kh + ky) * s.kw + kx];
                                for (o, &v) in orow[lo..hi].iter_mut().zip(row[ix0..].iter().step_by(sx)) {
                                    *o += w * v;
                                }
                            }
                        }
                    }
                }
            }
        };
        let p = s.od * plane_out;
        if parallel {
            use rayon::prelude::*;
            out.par_chunks_exact_mut(p).enumerate().for_each(volume);
        } else {
            out.chunks_exact_mut(p).enumerate().for_each(volume);
        }
    }

    /// The reference's loop (taps in the padding skipped, f64 sums), for weights that are
    /// not all finite.
    fn exact(&self, x: &[f32], wv: &[f32], s: &Sizes, out: &mut [f32]) {
        let mg = s.m / self.geometry.group;
        let ([sz, sy, sx], [pz, py, px], [dz, dy, dx]) =
            (self.geometry.strides, self.geometry.pads, self.geometry.dilations);
        let inside = |o: usize, st: usize, k: usize, dl: usize, pd: usize, size: usize| {
            let i = at(o, st, k, dl, pd);
            (i >= 0 && i < size as i128).then_some(i as usize)
        };
        let mut i = 0;
        for img in 0..s.n {
            for m in 0..s.m {
                let g = m / mg;
                for oz in 0..s.od {
                    for oy in 0..s.oh {
                        for ox in 0..s.ow {
                            let mut acc = 0.0f64;
                            for c in 0..s.cg {
                                let channel = img * s.c + g * s.cg + c;
                                for kz in 0..s.kd {
                                    let Some(iz) = inside(oz, sz, kz, dz, pz, s.d) else { continue };
                                    for ky in 0..s.kh {
                                        let Some(iy) = inside(oy, sy, ky, dy, py, s.h) else { continue };
                                        for kx in 0..s.kw {
                                            let Some(ix) = inside(ox, sx, kx, dx, px, s.w) else { continue };
                                            let xi = ((channel * s.d + iz) * s.h + iy) * s.w + ix;
                                            let wi = (((m * s.cg + c) * s.kd + kz) * s.kh + ky) * s.kw + kx;
                                            acc += f64::from(x[xi]) * f64::from(wv[wi]);
                                        }
                                    }
                                }
                            }
                            out[i] = acc as f32;
                            i += 1;
                        }
                    }
                }
            }
        }
    }

    /// The transposed convolution (`conv_input_grad`) of gradient `dy` (`[N, M, OD, OH, OW]`)
    /// by weight `wv` into `out` (`[N, C, D, H, W]`, every element written): per image and
    /// group, the weight's transpose (`[C/group*KD*KH*KW, M/group]`, read through strides)
    /// times the gradient's `[M/group, OD*OH*OW]` rows gives one column per output position
    /// and row per tap of a channel, which col2im adds into the zeroed result where the tap
    /// lands inside it (a 1x1 window of stride 1 without padding: the product is the
    /// result). Every term of the reference's sums is a term here (no tap in the padding is
    /// multiplied by anything: its column entries are dropped), so infinities and NaNs come
    /// out where the reference has them; the sums are f32 in another order.
    fn transposed(
        &self,
        dy: &[f32],
        wv: &[f32],
        s: &Sizes,
        out: &mut [f32],
        threads: usize,
        operands: &Operands<'_>,
    ) -> Result<(), String> {
        use rayon::prelude::*;
        let (p, k, mg) = (s.od * s.oh * s.ow, s.cg * s.kd * s.kh * s.kw, s.m / self.geometry.group);
        let volume = s.d * s.h * s.w;
        if out.is_empty() {
            return Ok(());
        }
        let product = Product { m: k, k: mg, n: p, transpose_a: true, transpose_b: false };
        // The weight's rows and the gradient's channels of image `img`, group `g`.
        let factors = |img: usize, g: usize| (&wv[g * mg * k..][..mg * k], &dy[(img * s.m + g * mg) * p..][..mg * p]);
        if self.direct(s) {
            for img in 0..s.n {
                for g in 0..self.geometry.group {
                    let (a, b) = factors(img, g);
                    let dst = &mut out[(img * s.c + g * s.cg) * volume..][..s.cg * volume];
                    matmul_into(a, b, dst, product, threads)?;
                }
            }
            return Ok(());
        }
        out.fill(0.0);
        let ([sz, sy, sx], [pz, py, px], [dz, dy_, dx]) =
            (self.geometry.strides, self.geometry.pads, self.geometry.dilations);
        let rows: Vec<_> = (0..s.kh).map(|ky| outputs_inside(s.oh, s.h, sy, ky, dy_, py)).collect();
        let columns: Vec<_> = (0..s.kw).map(|kx| outputs_inside(s.ow, s.w, sx, kx, dx, px)).collect();
        let taps = s.kd * s.kh * s.kw;
        let plane_out = s.oh * s.ow;
        let mut col = operands.alloc_f32_filled(k * p)?;
        // One channel's taps, in order, added into its `[d, h, w]` volume of the result.
        let channel = |(ci, dst): (usize, &mut [f32]), col: &[f32]| {
            for t in 0..taps {
                let (kz, ky, kx) = (t / (s.kh * s.kw), t / s.kw % s.kh, t % s.kw);
                let src = &col[(ci * taps + t) * p..][..p];
                let ((y0, y1, iy0), (x0, x1, ix0)) = (rows[ky], columns[kx]);
                for (oz, src) in src.chunks_exact(plane_out).enumerate() {
                    let iz = at(oz, sz, kz, dz, pz);
                    if iz < 0 || iz >= s.d as i128 {
                        continue;
                    }
                    let plane = &mut dst[iz as usize * s.h * s.w..][..s.h * s.w];
                    for (j, oy) in (y0..y1).enumerate() {
                        let iy = iy0 + j * sy;
                        let from = &src[oy * s.ow + x0..][..x1 - x0];
                        if sx == 1 {
                            fold(&mut plane[iy * s.w + ix0..][..x1 - x0], from, |o, v| o + v);
                        } else {
                            for (o, &v) in plane[iy * s.w + ix0..].iter_mut().step_by(sx).zip(from) {
                                *o += v;
                            }
                        }
                    }
                }
            }
        };
        let parallel = threads > 1 && s.cg > 1;
        for img in 0..s.n {
            for g in 0..self.geometry.group {
                let (a, b) = factors(img, g);
                matmul_into(a, b, &mut col, product, threads)?;
                let dst = &mut out[(img * s.c + g * s.cg) * volume..][..s.cg * volume];
                if parallel {
                    dst.par_chunks_exact_mut(volume).enumerate().for_each(|c| channel(c, &col));
                } else {
                    dst.chunks_exact_mut(volume).enumerate().for_each(|c| channel(c, &col));
                }
            }
        }
        operands.recycle_f32(col);
        Ok(())
    }
}
