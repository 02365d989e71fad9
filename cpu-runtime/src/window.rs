//! Which outputs of a sliding window read a given tap inside the input.

use crate::rows::zeros;
use crate::vectors::{deinterleave, split_pairs};
use smallvec::SmallVec;

/// For tap `k` (dilation `d`) along a dim of `size` read by `outputs` windows (stride `s`,
/// padding `p` before): the outputs `lo..hi` whose tap lies inside the input (a range, since
/// positions grow with the output), and the first one's input position. Computed in 128 bits
/// from the geometry alone: sizes and attributes each fit 64 bits, their products not.
pub(crate) fn outputs_inside(
    outputs: usize,
    size: usize,
    s: usize,
    k: usize,
    d: usize,
    p: usize,
) -> (usize, usize, usize) {
    let (s, base) = (s.max(1) as i128, k as i128 * d as i128 - p as i128);
    // Output o reads position o*s + base: inside from ceil(-base/s) until ceil((size-base)/s).
    let ceil_div = |a: i128| -(-a).div_euclid(s);
    let lo = ceil_div(-base).clamp(0, outputs as i128);
    let hi = ceil_div(size as i128 - base).clamp(lo, outputs as i128);
    let first = if lo < hi { (lo * s + base) as usize } else { 0 };
    (lo as usize, hi as usize, first)
}

/// A plane copied into a border and split by the window's strides, so that each tap (ky, kx)
/// is one run over the whole output plane: the bordered plane (what the windows span, the
/// padding included) is cut into `sy * sx` sub-planes, sub-plane (ry, rx) holding the
/// bordered rows ry, ry + sy, ... and of each the columns rx, rx + sx, ...; output (oy, ox)
/// at `oy * width + ox` of an output plane at the sub-planes' `width` then reads tap (ky, kx)
/// at [`Bordered::offset`] plus that. [`Bordered::crop`] drops the columns past the
/// output's. Planes of the zoo's models are 7 to 112 columns wide: loops of a row each are
/// too short to vectorize well, and a strided read does not vectorize at all.
pub(crate) struct Bordered {
    input: [usize; 2],
    out: [usize; 2],
    /// Rows and columns of a sub-plane.
    height: usize,
    width: usize,
    /// The bordered plane's rows and columns (before the split).
    spans: [usize; 2],
    pads: [usize; 2],
    dilations: [usize; 2],
    strides: [usize; 2],
    /// Per sub-plane, the rows `[0]..[1]` and columns `[2]..[3]` where the input lands (the
    /// rest is border), worked out once: the divisions would cost more than a small plane's
    /// copy. Inline up to strides 2x2, so making one allocates nothing.
    inside: SmallVec<[[usize; 4]; 4]>,
}

/// Outputs at the sub-planes' width are computed in whole blocks of this many.
const BLOCK: usize = 16;

impl Bordered {
    /// For an input plane `[h, w]`, an output plane `[oh, ow]` and a window of `kernel` taps
    /// with padding `pads` before, dilations and strides; None where the border would dwarf
    /// the plane (huge padding, dilation or stride), where a loop over ranges is cheaper.
    pub fn new(
        input: [usize; 2],
        out: [usize; 2],
        kernel: [usize; 2],
        pads: [usize; 2],
        dilations: [usize; 2],
        strides: [usize; 2],
    ) -> Option<Bordered> {
        // What the windows span along dim d: the last output's last tap, plus one.
        let span = |d: usize| {
            let last = out[d].checked_sub(1)?.checked_mul(strides[d])?;
            last.checked_add(kernel[d].checked_sub(1)?.checked_mul(dilations[d])?)?.checked_add(1)
        };
        if out[0] == 0 || out[1] == 0 || strides.contains(&0) {
            return None;
        }
        let spans = [span(0)?, span(1)?];
        let (height, width) = (spans[0].div_ceil(strides[0]), spans[1].div_ceil(strides[1]));
        let len =
            strides[0].checked_mul(strides[1])?.checked_mul(height.checked_mul(width)?)?.checked_add(width + BLOCK)?;
        let plain = input[0] * input[1] + out[0] * out[1];
        if len.checked_add(out[0].checked_mul(width)?)? > 4 * plain + 4096 {
            return None;
        }
        // The input's rows and columns that some window reaches, and the sub-plane's indices
        // j whose bordered position j * stride + phase lies among them (padding before).
        let reached = [input[0].min(spans[0].saturating_sub(pads[0])), input[1].min(spans[1].saturating_sub(pads[1]))];
        let range = |d: usize, phase: usize, end: usize| {
            let hi = (pads[d] + reached[d]).saturating_sub(phase).div_ceil(strides[d]).min(end);
            (pads[d].saturating_sub(phase).div_ceil(strides[d]).min(hi), hi)
        };
        let inside = (0..strides[0] * strides[1])
            .map(|plane| {
                let ((ilo, ihi), (lo, hi)) =
                    (range(0, plane / strides[1], height), range(1, plane % strides[1], width));
                [ilo, ihi, lo, hi]
            })
            .collect();
        Some(Bordered { input, out, height, width, spans, pads, dilations, strides, inside })
    }

    /// Elements of the bordered input plane, its sub-planes one after another and then room
    /// for the last runs' overreach (see [`Bordered::out_len`]).
    pub fn len(&self) -> usize {
        self.strides[0] * self.strides[1] * self.height * self.width + self.width + BLOCK
    }

    /// Columns of a sub-plane's row: the row pitch of an output plane at the bordered width.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Elements of an output plane at the bordered width, rounded up to whole blocks of 16:
    /// a run of this many from any tap's offset stays inside the bordered plane (a tap's rows
    /// end inside its sub-plane; the rest is the overreach `len` leaves room for).
    pub fn out_len(&self) -> usize {
        (self.out[0] * self.width).next_multiple_of(BLOCK)
    }

    /// Copies the input plane `src` into `into` (`len()` elements), `border` around it. Input
    /// row iy lands on bordered row iy + pad, column ix on ix + pad; what lies past the span
    /// no output reads.
    pub fn fill(&self, src: &[f32], border: f32, into: &mut [f32]) {
        let ([h, w], [py, px], [sy, sx]) = (self.input, self.pads, self.strides);
        // The input's rows and columns that some window reaches.
        let (rows, cols) = (h.min(self.spans[0].saturating_sub(py)), w.min(self.spans[1].saturating_sub(px)));
        let (width, sub) = (self.width, self.height * self.width);
        // The border only, around where the input lands: in each sub-plane, the rows before
        // and after the input's (whole), and the columns before and after its on the rest;
        // all of it at once for narrow rows, where that is one call and not a few per row.
        let (planes, rest) = into.split_at_mut(sy * sx * sub);
        rest.fill(border);
        if width < 32 {
            planes.fill(border);
        } else {
            for (rows_of, &[ilo, ihi, lo, hi]) in planes.chunks_exact_mut(sub).zip(&self.inside) {
                rows_of[..ilo * width].fill(border);
                rows_of[ihi * width..].fill(border);
                for row in rows_of[ilo * width..ihi * width].chunks_exact_mut(width) {
                    row[..lo].fill(border);
                    row[hi..].fill(border);
                }
            }
        }
        if cols == 0 {
            return;
        }
        // Input rows iy0, iy0 + sy, ... land on rows i0, i0 + 1, ... of sub-planes (ry, _).
        for iy0 in 0..sy.min(rows) {
            let (ry, i0) = ((iy0 + py) % sy, (iy0 + py) / sy);
            let from = src[iy0 * w..].chunks(w).step_by(sy).take((rows - iy0).div_ceil(sy));
            for (i, row) in (i0..).zip(from) {
                let (start, row) = ((ry * sx * self.height + i) * width, &row[..cols]);
                match sx {
                    1 => planes[start + px..][..cols].copy_from_slice(row),
                    2 => {
                        // Even input columns land in sub-plane px % 2, odd ones in the other.
                        let (first, second) = planes[start..].split_at_mut(sub);
                        let (even, odd) = if px % 2 == 0 { (first, second) } else { (second, first) };
                        split_pairs(row, &mut even[px / 2..], &mut odd[px.div_ceil(2)..]);
                    }
                    _ => {
                        // Input columns ix0, ix0 + sx, ... land on one row of one sub-plane.
                        for ix0 in 0..sx.min(cols) {
                            let c = ix0 + px;
                            let dst = &mut planes[start + c % sx * sub + c / sx..];
                            for (j, d) in dst[..(cols - ix0).div_ceil(sx)].iter_mut().enumerate() {
                                *d = row[ix0 + j * sx];
                            }
                        }
                    }
                }
            }
        }
    }

    /// Where tap (ky, kx) of output 0 lies in the bordered plane: output (oy, ox) at
    /// `oy * width + ox` reads `offset + oy * width + ox`.
    pub fn offset(&self, ky: usize, kx: usize) -> usize {
        let ([sy, sx], [dy, dx]) = (self.strides, self.dilations);
        let (y, x) = (ky * dy, kx * dx);
        ((y % sy * sx + x % sx) * self.height + y / sy) * self.width + x / sx
    }

    /// The output plane `dst` (`[oh, ow]`) from one at the bordered width.
    pub fn crop<T: Copy>(&self, wide: &[T], dst: &mut [T]) {
        let ow = self.out[1];
        if ow == 0 {
            return;
        }
        for (d, a) in dst.chunks_exact_mut(ow).zip(wide.chunks_exact(self.width)) {
            d.copy_from_slice(&a[..ow]);
        }
    }
}

/// Rows of `width` columns read with a column stride above 1, split into the stride's phases:
/// phase `q` holds columns `q, q + stride, q + 2*stride, ...` in order, each phase `len`
/// long (the last ones may end a column short, that element unused). A tap's columns
/// `ix, ix + stride, ...` are then one contiguous run of one phase, from [`Phases::at`], so
/// the loops over them vectorize (a strided read does not).
pub(crate) struct Phases {
    stride: usize,
    count: usize,
    len: usize,
    width: usize,
}

impl Phases {
    /// For rows of `width` columns and a column `stride`; None at unit stride or no columns.
    pub fn new(width: usize, stride: usize) -> Option<Phases> {
        (stride > 1 && width > 0).then(|| Phases {
            stride,
            count: stride.min(width),
            len: width.div_ceil(stride),
            width,
        })
    }

    /// Elements of a split row (at most twice a row's: fewer phases than the stride when the
    /// stride passes the width).
    pub fn row_len(&self) -> usize {
        self.count * self.len
    }

    /// Where column `ix` lies in its split row.
    pub fn at(&self, ix: usize) -> usize {
        ix % self.stride * self.len + ix / self.stride
    }

    /// Elements of `src_len` elements' rows split ([`Phases::split`]'s result).
    pub fn split_len(&self, src_len: usize) -> usize {
        src_len / self.width * self.row_len()
    }

    /// `dst` made the rows of `src` (rows of `width`), each split into a row of `row_len()`,
    /// across the threads when `parallel`. A buffer of the split's length (from
    /// [`Phases::split_len`]) is written over, not cleared first: the unused last elements of
    /// short phases keep what they held.
    pub fn split(&self, src: &[f32], dst: &mut Vec<f32>, parallel: bool) {
        use rayon::prelude::*;
        let len = self.split_len(src.len());
        if dst.len() != len {
            zeros(dst, len);
        }
        let row = |(src, dst): (&[f32], &mut [f32])| deinterleave(src, dst, self.stride, self.len);
        if parallel {
            src.par_chunks_exact(self.width).zip(dst.par_chunks_exact_mut(self.row_len())).for_each(row);
        } else {
            src.chunks_exact(self.width).zip(dst.chunks_exact_mut(self.row_len())).for_each(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_the_outputs_inside_on_every_small_geometry() {
        for outputs in 0..7 {
            for size in 0..6 {
                for s in 1..4 {
                    for k in 0..4 {
                        for d in 1..3 {
                            for p in 0..5 {
                                let pos = |o: usize| o as i128 * s as i128 + k as i128 * d as i128 - p as i128;
                                let inside: Vec<usize> =
                                    (0..outputs).filter(|&o| (0..size as i128).contains(&pos(o))).collect();
                                let (lo, hi, first) = outputs_inside(outputs, size, s, k, d, p);
                                assert_eq!((lo..hi).collect::<Vec<_>>(), inside, "{outputs} {size} {s} {k} {d} {p}");
                                if lo < hi {
                                    assert_eq!(first as i128, pos(lo));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_tap_of_a_bordered_plane_reads_the_input_or_the_border() {
        // Rows narrower than 32 columns, bordered whole, and wider ones, around the input only.
        for (h, w) in [(1usize, 1usize), (3, 4), (5, 2), (7, 9), (3, 40)] {
            for k in [[1, 1], [2, 3], [3, 2], [3, 3]] {
                for pads in [[0, 0], [1, 2], [2, 1]] {
                    for dilations in [[1, 1], [2, 1], [1, 2]] {
                        for strides in [[1, 1], [2, 2], [1, 3], [3, 2]] {
                            let span = |d: usize| dilations[d] * (k[d] - 1) + 1;
                            // Padding after as much as before.
                            let outs = |d: usize, size: usize| {
                                (size + 2 * pads[d]).checked_sub(span(d)).map(|r| r / strides[d] + 1)
                            };
                            let (Some(oh), Some(ow)) = (outs(0, h), outs(1, w)) else {
                                continue;
                            };
                            let b = Bordered::new([h, w], [oh, ow], k, pads, dilations, strides).unwrap();
                            let src: Vec<f32> = (0..h * w).map(|i| i as f32 + 1.0).collect();
                            let mut plane = vec![f32::NAN; b.len()];
                            b.fill(&src, -1.0, &mut plane);
                            let case =
                                format!("{h}x{w} k {k:?} pads {pads:?} dilations {dilations:?} strides {strides:?}");
                            for ky in 0..k[0] {
                                for kx in 0..k[1] {
                                    // A tap's run of out_len() stays inside the plane.
                                    assert!(b.offset(ky, kx) + b.out_len() <= b.len(), "{case}");
                                    for (oy, ox) in (0..oh).flat_map(|oy| (0..ow).map(move |ox| (oy, ox))) {
                                        let (iy, ix) = (
                                            (oy * strides[0] + ky * dilations[0]) as isize - pads[0] as isize,
                                            (ox * strides[1] + kx * dilations[1]) as isize - pads[1] as isize,
                                        );
                                        let inside = (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix);
                                        let want = if inside { src[iy as usize * w + ix as usize] } else { -1.0 };
                                        let got = plane[b.offset(ky, kx) + oy * b.width() + ox];
                                        assert_eq!(got, want, "{case} tap ({ky},{kx}) output ({oy},{ox})");
                                    }
                                }
                            }
                            let wide: Vec<usize> = (0..b.out_len()).collect();
                            let mut out = vec![0; oh * ow];
                            b.crop(&wide, &mut out);
                            let width = b.width();
                            let kept: Vec<usize> =
                                (0..oh).flat_map(|oy| (0..ow).map(move |ox| oy * width + ox)).collect();
                            assert_eq!(out, kept);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn each_column_of_a_split_row_is_where_at_says() {
        for width in 1..12 {
            for stride in 2..14 {
                let p = Phases::new(width, stride).unwrap();
                let rows = 3;
                let src: Vec<f32> = (0..rows * width).map(|i| i as f32).collect();
                // A buffer of another length, and one of the split's length full of NaNs
                // (written over, not cleared: every column must still land).
                for (parallel, len) in [(false, 3), (true, 3), (false, rows * p.row_len()), (true, rows * p.row_len())]
                {
                    let mut dst = vec![f32::NAN; len];
                    p.split(&src, &mut dst, parallel);
                    assert_eq!(dst.len(), rows * p.row_len());
                    for r in 0..rows {
                        for ix in 0..width {
                            assert_eq!(
                                dst[r * p.row_len() + p.at(ix)],
                                src[r * width + ix],
                                "{width} {stride} ({r},{ix})"
                            );
                        }
                        // A tap's columns are one run: ix and ix + stride are neighbours.
                        for ix in 0..width.saturating_sub(stride) {
                            assert_eq!(p.at(ix + stride), p.at(ix) + 1);
                        }
                    }
                    assert!(p.row_len() <= 2 * width);
                }
            }
        }
        assert!(Phases::new(5, 1).is_none() && Phases::new(0, 2).is_none());
    }

    #[test]
    fn huge_geometry_does_not_overflow() {
        let m = i64::MAX as usize;
        assert_eq!(outputs_inside(3, 5, m, m, m, m), (0, 0, 0));
        assert_eq!(outputs_inside(4, 10, 1, 0, 1, m), (4, 4, 0));
        assert!(Bordered::new([3, 3], [1, 1], [m, 2], [0, 0], [m, 1], [1, 1]).is_none());
        assert!(Bordered::new([3, 3], [2, 2], [2, 2], [0, 0], [1, 1], [m, m]).is_none());
    }
}
