//! Which outputs of a sliding window read a given tap inside the input.

use crate::rows::zeros;
use crate::vectors::deinterleave;

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

/// A plane copied into a border, for a window of unit strides: `width` columns and `height`
/// rows (what the windows span, the padding included), then `spill` more elements that the
/// last taps of the last row's columns past the output read. With it, each tap (ky, kx) is
/// one loop over the whole output plane at the bordered width, reading from
/// [`Bordered::offset`]; [`Bordered::crop`] then drops the columns past the output's. Planes
/// of the zoo's models are 7 to 56 columns wide: loops of a row each are too short to
/// vectorize well.
pub(crate) struct Bordered {
    input: [usize; 2],
    out: [usize; 2],
    width: usize,
    height: usize,
    spill: usize,
    pads: [usize; 2],
    dilations: [usize; 2],
}

impl Bordered {
    /// For an input plane `[h, w]`, an output plane `[oh, ow]` and a window of `kernel` taps
    /// with padding `pads` before; None where the border would dwarf the plane (huge padding
    /// or dilation), where a loop over ranges is cheaper.
    pub fn new(
        input: [usize; 2],
        out: [usize; 2],
        kernel: [usize; 2],
        pads: [usize; 2],
        dilations: [usize; 2],
    ) -> Option<Bordered> {
        let span = |d: usize| kernel[d].checked_sub(1)?.checked_mul(dilations[d]);
        let (width, height) = (out[1].checked_add(span(1)?)?, out[0].checked_add(span(0)?)?);
        let spill = span(1)?;
        let len = width.checked_mul(height)?.checked_add(spill)?.checked_add(out[0].checked_mul(width)?)?;
        let plain = input[0] * input[1] + out[0] * out[1];
        (len <= 4 * plain + 4096).then_some(Bordered { input, out, width, height, spill, pads, dilations })
    }

    /// Elements of the bordered input plane.
    pub fn len(&self) -> usize {
        self.height * self.width + self.spill
    }

    /// Columns of a bordered row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Elements of an output plane at the bordered width.
    pub fn out_len(&self) -> usize {
        self.out[0] * self.width
    }

    /// Copies the input plane `src` into `into` (`len()` elements), `border` around it. Input
    /// row iy lands on bordered row iy + pad, column ix on ix + pad; what lies past the span
    /// no output reads.
    pub fn fill(&self, src: &[f32], border: f32, into: &mut [f32]) {
        let ([h, w], [py, px], width) = (self.input, self.pads, self.width);
        into.fill(border);
        let cols = w.min(width.saturating_sub(px));
        if cols == 0 {
            return;
        }
        for (iy, row) in src[..h * w].chunks_exact(w).enumerate().take(self.height.saturating_sub(py)) {
            into[(iy + py) * width + px..][..cols].copy_from_slice(&row[..cols]);
        }
    }

    /// Where tap (ky, kx) of output 0 lies in the bordered plane: output (oy, ox) at
    /// `oy * width + ox` reads `offset + oy * width + ox`.
    pub fn offset(&self, ky: usize, kx: usize) -> usize {
        ky * self.dilations[0] * self.width + kx * self.dilations[1]
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
        for (h, w) in [(1usize, 1usize), (3, 4), (5, 2)] {
            for k in [[1, 1], [2, 3], [3, 2]] {
                for pads in [[0, 0], [1, 2], [2, 1]] {
                    for dilations in [[1, 1], [2, 1], [1, 2]] {
                        let span = |d: usize| dilations[d] * (k[d] - 1) + 1;
                        // Padding after as much as before.
                        let (Some(oh), Some(ow)) =
                            ((h + 2 * pads[0] + 1).checked_sub(span(0)), (w + 2 * pads[1] + 1).checked_sub(span(1)))
                        else {
                            continue;
                        };
                        let b = Bordered::new([h, w], [oh, ow], k, pads, dilations).unwrap();
                        let src: Vec<f32> = (0..h * w).map(|i| i as f32 + 1.0).collect();
                        let mut plane = vec![f32::NAN; b.len()];
                        b.fill(&src, -1.0, &mut plane);
                        for (ky, kx, oy, ox) in (0..k[0]).flat_map(|ky| {
                            (0..k[1])
                                .flat_map(move |kx| (0..oh).flat_map(move |oy| (0..ow).map(move |ox| (ky, kx, oy, ox))))
                        }) {
                            let (iy, ix) = (
                                (oy + ky * dilations[0]) as isize - pads[0] as isize,
                                (ox + kx * dilations[1]) as isize - pads[1] as isize,
                            );
                            let inside = (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix);
                            let want = if inside { src[iy as usize * w + ix as usize] } else { -1.0 };
                            let got = plane[b.offset(ky, kx) + oy * b.width() + ox];
                            assert_eq!(got, want, "{h}x{w} k {k:?} pads {pads:?} dilations {dilations:?} tap ({ky},{kx}) output ({oy},{ox})");
                        }
                        let wide: Vec<usize> = (0..b.out_len()).collect();
                        let mut out = vec![0; oh * ow];
                        b.crop(&wide, &mut out);
                        let width = b.width();
                        let kept: Vec<usize> = (0..oh).flat_map(|oy| (0..ow).map(move |ox| oy * width + ox)).collect();
                        assert_eq!(out, kept);
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
        assert!(Bordered::new([3, 3], [1, 1], [m, 2], [0, 0], [m, 1]).is_none());
    }
}
