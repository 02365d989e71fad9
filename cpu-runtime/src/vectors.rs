//! The run half's hot loops, each compiled for AVX-512, for AVX2 with FMA, and for the x86-64
//! baseline, the widest the host has chosen at the first call (the rest of the crate is built
//! for the baseline, whose loops use 4-lane SSE vectors). Callers pass whole rows or planes,
//! so the choice (an atomic load) is made once per row, not per element.

use multiversion::multiversion;

/// `acc[i] = f(acc[i], taps[i])` over the shorter of the two.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn fold<A: Copy>(acc: &mut [A], taps: &[f32], f: impl Fn(A, f32) -> A) {
    for (a, &v) in acc.iter_mut().zip(taps) {
        *a = f(*a, v);
    }
}

/// [`fold`] over a window's rows: for each input row, each column tap `(lo, hi, ix)` folds
/// the row's elements from `at(ix)` on, every `step`-th, into `acc[lo..hi]`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn fold_rows<'a, A: Copy>(
    acc: &mut [A],
    rows: impl Iterator<Item = &'a [f32]>,
    columns: &[(usize, usize, usize)],
    at: impl Fn(usize) -> usize,
    step: usize,
    f: impl Fn(A, f32) -> A,
) {
    for row in rows {
        for &(lo, hi, ix) in columns {
            let acc = &mut acc[lo..hi];
            if step == 1 {
                for (a, &v) in acc.iter_mut().zip(&row[at(ix)..][..hi - lo]) {
                    *a = f(*a, v);
                }
            } else {
                for (a, &v) in acc.iter_mut().zip(row[at(ix)..].iter().step_by(step)) {
                    *a = f(*a, v);
                }
            }
        }
    }
}

/// One row `src` split into `dst`: phase `q` (of `dst.len() / len`, each `len` long) holds
/// columns `q, q + stride, ...`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn deinterleave(src: &[f32], dst: &mut [f32], stride: usize, len: usize) {
    if stride == 2 {
        let (even, odd) = dst.split_at_mut(len);
        split_pairs(src, even, odd);
    } else {
        for (q, phase) in dst.chunks_exact_mut(len).enumerate() {
            for (o, &v) in phase.iter_mut().zip(src[q..].iter().step_by(stride)) {
                *o = v;
            }
        }
    }
}

/// The even columns of `src` into `even`, the odd ones into `odd`, from the start of each
/// (`even` at least half of `src`, rounded up; `odd` at least half, rounded down): pairs,
/// which vectorize as a whole-vector deinterleave.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn split_pairs(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    // Blocks of 16 pairs, then of 8, 4, 2 and 1: fixed sizes, which the compiler turns into
    // shuffles (a loop over the rest would be gathers, slow for a row's few last pairs).
    #[inline(always)]
    fn blocks<const N: usize>(src: &mut &[f32], even: &mut &mut [f32], odd: &mut &mut [f32]) {
        while src.len() >= 2 * N {
            let (from, e, o) = (&src[..2 * N], &mut even[..N], &mut odd[..N]);
            for i in 0..N {
                e[i] = from[2 * i];
                o[i] = from[2 * i + 1];
            }
            *src = &src[2 * N..];
            *even = &mut std::mem::take(even)[N..];
            *odd = &mut std::mem::take(odd)[N..];
        }
    }
    let (mut src, mut even, mut odd) = (src, even, odd);
    blocks::<16>(&mut src, &mut even, &mut odd);
    blocks::<8>(&mut src, &mut even, &mut odd);
    blocks::<4>(&mut src, &mut even, &mut odd);
    blocks::<2>(&mut src, &mut even, &mut odd);
    blocks::<1>(&mut src, &mut even, &mut odd);
    if let [last] = src {
        even[0] = *last;
    }
}

/// `c[j] += Σ_p a[p] · b[p·n + j]` for `c` of `n` (a row times a row-major `[k, n]` matrix,
/// `n = c.len()`, `k = a.len()`), four rows of `b` per pass over `c`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn row_by_rows(a: &[f32], b: &[f32], n: usize, c: &mut [f32]) {
    let width = c.len();
    let quads = a.len() / 4 * 4;
    for p in (0..quads).step_by(4) {
        let (x0, x1, x2, x3) = (a[p], a[p + 1], a[p + 2], a[p + 3]);
        let rows =
            (&b[p * n..][..width], &b[(p + 1) * n..][..width], &b[(p + 2) * n..][..width], &b[(p + 3) * n..][..width]);
        for ((((y, &r0), &r1), &r2), &r3) in c.iter_mut().zip(rows.0).zip(rows.1).zip(rows.2).zip(rows.3) {
            *y += x0 * r0 + x1 * r1 + x2 * r2 + x3 * r3;
        }
    }
    for (p, &x) in a.iter().enumerate().skip(quads) {
        for (y, &r) in c.iter_mut().zip(&b[p * n..][..width]) {
            *y += x * r;
        }
    }
}

/// `c[j] = Σ_p a[p] · b[j·k + p]` (a row times the transpose of a row-major `[n, k]` matrix,
/// `k = a.len()`): one dot product per row of `b`, summed in 16 lanes.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn row_by_columns(a: &[f32], b: &[f32], c: &mut [f32]) {
    const LANES: usize = 16;
    let k = a.len();
    for (y, row) in c.iter_mut().zip(b.chunks_exact(k.max(1))) {
        let mut acc = [0.0f32; LANES];
        let (head, tail) = (a.chunks_exact(LANES), row.chunks_exact(LANES));
        let (ra, rb) = (head.remainder(), tail.remainder());
        for (x, v) in head.zip(tail) {
            for l in 0..LANES {
                acc[l] += x[l] * v[l];
            }
        }
        let mut sum = acc.iter().sum::<f32>();
        for (x, v) in ra.iter().zip(rb) {
            sum += x * v;
        }
        *y = sum;
    }
}

/// `out[j] = Σ_t w_t · src[o_t + j]` over the taps' weights `w` and offsets `o` (as many),
/// each product rounded and added in tap order to a sum that starts at +0 (the reference's
/// f32 sum), 128, 64 and then 16 outputs at a time with the sums held in registers across all
/// the taps: a depthwise window's whole plane in one call, where a pass over the plane per tap
/// would load and store every sum once per tap. Every `o_t + out.len()` must lie inside `src`.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx512dq+avx2+avx+fma+sse4.2", "x86_64+avx2+avx+fma+sse4.2"))]
pub(crate) fn weighted_taps(out: &mut [f32], src: &[f32], w: &[f32], o: &[usize]) {
    #[inline(always)]
    fn block<const N: usize>(out: &mut [f32], src: &[f32], w: &[f32], o: &[usize]) {
        let mut acc = [0.0f32; N];
        for (&w, &o) in w.iter().zip(o) {
            let s = &src[o..][..N];
            for i in 0..N {
                acc[i] += w * s[i];
            }
        }
        out[..N].copy_from_slice(&acc);
    }
    let n = out.len();
    let mut j = 0;
    while j + 128 <= n {
        block::<128>(&mut out[j..], &src[j..], w, o);
        j += 128;
    }
    while j + 64 <= n {
        block::<64>(&mut out[j..], &src[j..], w, o);
        j += 64;
    }
    while j + 16 <= n {
        block::<16>(&mut out[j..], &src[j..], w, o);
        j += 16;
    }
    for (k, y) in out.iter_mut().enumerate().skip(j) {
        *y = w.iter().zip(o).fold(0.0, |a, (&w, &t)| a + w * src[t + k]);
    }
}
