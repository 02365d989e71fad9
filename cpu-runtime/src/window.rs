//! Which outputs of a sliding window read a given tap inside the input.

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
    fn huge_geometry_does_not_overflow() {
        let m = i64::MAX as usize;
        assert_eq!(outputs_inside(3, 5, m, m, m, m), (0, 0, 0));
        assert_eq!(outputs_inside(4, 10, 1, 0, 1, m), (4, 4, 0));
    }
}
