//! The unsafe code of the CPU backend's run half that matters: calling generated code (the
//! other is `math.rs`'s `no_mangle`, which only names functions). Generated code
//! checks nothing, so everything it will touch is checked here against the extents its plan
//! reads and writes before each call; every function here is safe whatever buffers it is
//! given, and making an [`Entry`] is the one `unsafe` step (its contract ties the code to the
//! extents).
#![allow(unsafe_code)]

pub use graphc_plan::Product;
use smallvec::SmallVec;
use std::any::Any;
use std::sync::Arc;

/// A generated kernel: `fn(inputs, outputs, row_begin, row_end, scratch)` with the platform's C
/// convention, over rows `row_begin..row_end` of its plan's `[rows, cols]` view.
pub type KernelFn = unsafe extern "C" fn(*const *const f32, *const *mut f32, i64, i64, *mut f32);

/// How many elements a kernel touches in each buffer, from its plan: it is never called on
/// shorter ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Extents {
    /// The rows of the plan's `[rows, cols]` view; a call runs some of them.
    pub rows: usize,
    /// Per input: one past the last element read over all rows.
    pub ins: Vec<usize>,
    /// Per output: one past the last element written over all rows.
    pub outs: Vec<usize>,
    /// Scratch elements (a row per cached step).
    pub scratch: usize,
    /// The inputs an output may be written over (read element for element in the output's
    /// layout, each element before it is written): only these may be passed as
    /// [`In::Output`], since for any other input one row block would read what another is
    /// writing.
    pub in_place: Vec<usize>,
}

/// A kernel's entry point, the extents of the buffers it runs on, and the owner of its code.
pub struct Entry {
    f: KernelFn,
    extents: Extents,
    /// Keeps the code mapped as long as the entry exists (the code of several kernels may be
    /// one allocation, freed when the last of them is dropped).
    _code: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("extents", &self.extents).finish_non_exhaustive()
    }
}

/// A kernel input: a buffer of its own, or output `k`'s buffer, already holding the input
/// and written over in place (as the plan allows: it reads each element before writing it).
#[derive(Debug)]
pub enum In<'a> {
    Slice(&'a [f32]),
    Output(usize),
}

impl Entry {
    /// An entry point for generated code.
    ///
    /// # Safety
    /// `f` must be a function with [`KernelFn`]'s signature that, called on row ranges within
    /// `extents.rows` with input pointers valid for reads of `extents.ins` elements each, output
    /// pointers valid for writes of `extents.outs` elements each and a scratch of
    /// `extents.scratch` elements, touches nothing else (no access beyond those extents, no
    /// reads of output elements it has not written unless that output is also passed as the
    /// input it overwrites, which it may only be for an input in `extents.in_place`, read
    /// element for element in the output's layout and each element before it is written), writes every output element of the rows it runs, and is safe to
    /// call from several threads at once on disjoint rows. Its code must stay mapped and
    /// unchanged as long as `code` lives.
    pub unsafe fn new(f: KernelFn, extents: Extents, code: Arc<dyn Any + Send + Sync>) -> Entry {
        Entry { f, extents, _code: code }
    }

    /// The extents the kernel was generated for.
    pub fn extents(&self) -> &Extents {
        &self.extents
    }

    /// Runs the kernel on the row ranges `blocks` (on rayon's threads when there are
    /// several) after checking every buffer, the rows and the scratch against the plan's
    /// extents; a mismatch is an error, never a call. Outputs not read in place are
    /// cleared and grown to their extents, and hold the kernel's results afterwards.
    pub fn run(
        &self,
        ins: &[In<'_>],
        outs: &mut [Vec<f32>],
        blocks: &[(usize, usize)],
        scratch: impl Fn(usize, &mut dyn FnMut(&mut [f32])) + Sync,
    ) -> Result<(), String> {
        let e = &self.extents;
        if ins.len() != e.ins.len() || outs.len() != e.outs.len() {
            return Err(format!(
                "{} inputs and {} outputs where the kernel takes {} and {}",
                ins.len(),
                outs.len(),
                e.ins.len(),
                e.outs.len()
            ));
        }
        let mut end = 0;
        for &(r0, r1) in blocks {
            if r0 < end || r1 < r0 || r1 > e.rows {
                return Err(format!("rows {r0}..{r1} of a kernel over {} rows, after row {end}", e.rows));
            }
            end = r1;
        }
        if blocks.iter().map(|&(r0, r1)| r1 - r0).sum::<usize>() != e.rows {
            return Err(format!("rows {blocks:?} do not cover the kernel's {} rows", e.rows));
        }
        let mut in_place: SmallVec<[usize; 4]> = SmallVec::new();
        for (i, x) in ins.iter().enumerate() {
            if let In::Output(k) = *x {
                if !e.in_place.contains(&i) {
                    return Err(format!("input {i} may not be written over in place"));
                }
                if e.outs.get(k) != Some(&e.ins[i]) || in_place.contains(&k) {
                    return Err(format!("input {i} cannot be read from output {k}"));
                }
                in_place.push(k);
            }
        }
        for (k, v) in outs.iter_mut().enumerate() {
            if in_place.contains(&k) {
                if v.len() < e.outs[k] {
                    return Err(format!("output {k} has {} elements where the kernel writes {}", v.len(), e.outs[k]));
                }
            } else {
                v.clear();
                v.reserve(e.outs[k]);
            }
        }
        let mut in_ptrs: SmallVec<[*const f32; 8]> = SmallVec::with_capacity(ins.len());
        for (i, (x, &need)) in ins.iter().zip(&e.ins).enumerate() {
            let (p, len) = match *x {
                In::Slice(s) => (s.as_ptr(), s.len()),
                In::Output(k) => {
                    let v = outs.get(k).ok_or_else(|| format!("input {i} reads output {k}, which is missing"))?;
                    (v.as_ptr(), v.len())
                }
            };
            if len < need {
                return Err(format!("input {i} has {len} elements where the kernel reads {need}"));
            }
            in_ptrs.push(p);
        }
        let out_ptrs: SmallVec<[*mut f32; 4]> = outs.iter_mut().map(|v| v.as_mut_ptr()).collect();
        let bufs = &Pointers { ins: in_ptrs, outs: out_ptrs };
        let call = |(r0, r1): (usize, usize)| {
            let mut ok = Err(String::new());
            scratch(e.scratch, &mut |s: &mut [f32]| {
                ok = if s.len() < e.scratch {
                    Err(format!("a scratch of {} elements where the kernel uses {}", s.len(), e.scratch))
                } else {
                    // SAFETY: `self.f` meets `Entry::new`'s contract for `e` and its code is
                    // mapped (`self` holds its owner). Every input pointer is valid for reads and every output
                    // pointer for writes of the extents the plan touches (checked or
                    // reserved above; the buffers live and are not otherwise used until
                    // `run` returns), the rows are within the plan's and disjoint between
                    // blocks (checked above), so concurrent calls write disjoint elements;
                    // outputs are distinct vectors, and an input aliases an output only
                    // where `e.in_place` allows it (checked above, one input per output, of
                    // the output's extent); the scratch is exclusively borrowed
                    // and long enough.
                    unsafe { (self.f)(bufs.ins.as_ptr(), bufs.outs.as_ptr(), r0 as i64, r1 as i64, s.as_mut_ptr()) };
                    Ok(())
                };
            });
            ok
        };
        if blocks.len() == 1 {
            call(blocks[0])?;
        } else {
            let errors = std::sync::Mutex::new(Vec::new());
            rayon::scope(|s| {
                for &block in blocks {
                    let (call, errors) = (&call, &errors);
                    s.spawn(move |_| {
                        if let Err(e) = call(block) {
                            errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                        }
                    });
                }
            });
            if let Some(e) = errors.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().next() {
                return Err(e);
            }
        }
        for (k, v) in outs.iter_mut().enumerate() {
            if !in_place.contains(&k) {
                // SAFETY: the capacity was reserved above, and the kernel wrote every
                // element up to the extent: all rows ran (they cover 0..rows, disjoint),
                // each writing its row of every output, through raw pointers (nothing
                // uninitialized was read through a reference).
                unsafe { v.set_len(e.outs[k]) };
            }
        }
        Ok(())
    }
}

/// The pointer arrays a kernel takes.
struct Pointers {
    ins: SmallVec<[*const f32; 8]>,
    outs: SmallVec<[*mut f32; 4]>,
}

// SAFETY: the pointers are only dereferenced by kernels on disjoint output rows while the
// buffers they point into live (the calls happen inside `Entry::run`, which borrows them).
unsafe impl Send for Pointers {}
unsafe impl Sync for Pointers {}

/// Transposed factors of at least this many elements are packed row-major before the product.
const REPACK_ELEMENTS: usize = 4096;

/// `src` stored row-major `[rows, cols]`, transposed into `dst`, row-major `[cols, rows]`:
/// 8 x 8 blocks moved through registers (whole 32-byte row pieces read and written), a band of
/// 8 destination rows at a time, the bands split across `threads`.
fn transpose_into(src: &[f32], rows: usize, cols: usize, threads: usize, dst: &mut [f32]) {
    use rayon::prelude::*;
    const B: usize = 8;
    // `out`: destination rows [c0, c0 + its height), that is source columns c0.. .
    let band = |(band, out): (usize, &mut [f32])| {
        let c0 = band * B;
        let h = out.len() / rows.max(1);
        let mut r0 = 0;
        while r0 + B <= rows && h == B {
            let mut block = [[0.0f32; B]; B];
            for (i, line) in block.iter_mut().enumerate() {
                line.copy_from_slice(&src[(r0 + i) * cols + c0..(r0 + i) * cols + c0 + B]);
            }
            for j in 0..B {
                let piece: [f32; B] = std::array::from_fn(|i| block[i][j]);
                out[j * rows + r0..j * rows + r0 + B].copy_from_slice(&piece);
            }
            r0 += B;
        }
        // The last rows, and a last band narrower than a block.
        for r in r0..rows {
            for j in 0..h {
                out[j * rows + r] = src[r * cols + c0 + j];
            }
        }
    };
    let bands = dst.chunks_mut(B * rows.max(1)).enumerate();
    if threads > 1 && rows * cols >= 1 << 16 {
        bands.collect::<Vec<_>>().into_par_iter().for_each(band);
    } else {
        bands.for_each(band);
    }
}

/// The factors packed row-major (see [`transpose_into`]) where `p` says they are stored transposed
/// and `repack` asks, each into a buffer of this thread's, which lives as long as the thread:
/// a product after the first touches no fresh pages for them; then `f` on them.
///
/// The buffers are taken out of the thread-local for the call, not borrowed: while this thread
/// waits for the threads it split the work with, rayon may run another step's product on it,
/// which then finds none and packs into buffers of its own.
fn with_packed<R>(
    a: &[f32],
    b: &[f32],
    p: Product,
    repack: [bool; 2],
    threads: usize,
    f: impl FnOnce(&[f32], &[f32]) -> R,
) -> R {
    use std::cell::Cell;
    thread_local! {
        static PACKED: [Cell<Vec<f32>>; 2] = const { [Cell::new(Vec::new()), Cell::new(Vec::new())] };
    }
    let (mut pa, mut pb) = PACKED.with(|[pa, pb]| (pa.take(), pb.take()));
    let [sa, sb] = [p.lhs_shape(), p.rhs_shape()];
    if repack[0] {
        pa.resize(a.len(), 0.0);
        transpose_into(a, sa[0], sa[1], threads, &mut pa);
    }
    if repack[1] {
        pb.resize(b.len(), 0.0);
        transpose_into(b, sb[0], sb[1], threads, &mut pb);
    }
    let r = f(if repack[0] { &pa } else { a }, if repack[1] { &pb } else { b });
    PACKED.with(|[ka, kb]| {
        ka.set(pa);
        kb.set(pb);
    });
    r
}

#[cfg(test)]
mod transpose_tests {
    #[test]
    fn transposes_every_shape() {
        for (rows, cols) in [(1, 1), (1, 9), (9, 1), (8, 8), (13, 17), (16, 24), (33, 7), (300, 260)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            for threads in [1, 2] {
                let mut t = vec![0.0; rows * cols];
                super::transpose_into(&src, rows, cols, threads, &mut t);
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(t[c * rows + r], src[r * cols + c], "[{rows},{cols}] at ({r},{c})");
                    }
                }
            }
        }
    }
}

/// `c = a b` for `a`, `b` stored row-major as `p` says (`[m, k]` or, transposed, `[k, m]`;
/// `[k, n]` or `[n, k]`) and `c: [m, n]` row-major; `c` is cleared and filled. The lengths
/// are checked against the stored shapes, so this is safe to call with any buffers.
pub fn matmul(a: &[f32], b: &[f32], c: &mut Vec<f32>, p: Product, threads: usize) -> Result<(), String> {
    let mn = p.m.checked_mul(p.n).ok_or("a product too large to index")?;
    c.clear();
    c.reserve(mn);
    // SAFETY: `c` has room for m*n elements (reserved just above); `product` writes every
    // one of them when it succeeds (and the length stays 0 when it fails).
    unsafe {
        product(a, b, c.as_mut_ptr(), p, threads)?;
        c.set_len(mn);
    }
    Ok(())
}

/// [`matmul`] into a slice of exactly m*n elements (a block of a larger result).
pub fn matmul_into(a: &[f32], b: &[f32], c: &mut [f32], p: Product, threads: usize) -> Result<(), String> {
    if Some(c.len()) != p.m.checked_mul(p.n) {
        return Err(format!("a result of {} elements for a [{}, {}] product", c.len(), p.m, p.n));
    }
    // SAFETY: `c` holds the m*n elements `product` writes.
    unsafe { product(a, b, c.as_mut_ptr(), p, threads) }
}

/// A product of one row (`m` = 1, a matrix-vector product): gemm packs its factors for a
/// block of rows it does not have, so one row goes through the plain loops of
/// [`crate::vectors`] instead, over blocks of columns split across `threads` where the
/// right-hand factor is large.
///
/// # Safety
/// `c` must hold `n` elements; `a` and `b` have been checked to hold the factors.
unsafe fn row_product(a: &[f32], b: &[f32], c: *mut f32, p: Product, threads: usize) -> Result<(), String> {
    let (k, n) = (p.k, p.n);
    // SAFETY: the caller's promise.
    let c = unsafe { std::slice::from_raw_parts_mut(c, n) };
    let block = |c0: usize, out: &mut [f32]| {
        if p.transpose_b {
            crate::vectors::row_by_columns(a, &b[c0 * k..(c0 + out.len()) * k], out);
        } else {
            out.fill(0.0);
            crate::vectors::row_by_rows(a, &b[c0..], n, out);
        }
    };
    let parts = if threads > 1 && k * n >= crate::rows::PARALLEL_FLOPS { threads.min(n / 64).max(1) } else { 1 };
    if parts == 1 {
        block(0, c);
    } else {
        use rayon::prelude::*;
        let width = n.div_ceil(parts).next_multiple_of(16);
        c.par_chunks_mut(width).enumerate().for_each(|(i, out)| block(i * width, out));
    }
    Ok(())
}

/// Products with fewer columns than this are split across threads here (see [`product`]).
const SPLIT_COLUMNS: usize = 2048;

/// A block of a product's result: rows `r0..r1` of columns `c0..c1`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Block {
    rows: (usize, usize),
    cols: (usize, usize),
}

/// Blocks of an `m` x `n` product for `threads` threads. Each block's gemm packs its part of
/// both factors itself, so a split by rows packs the whole right-hand factor in every block
/// and a split by columns the whole left-hand one: the split repeats the smaller factor,
/// [`GRAIN`] rows or columns a block at least (one block where there are not twice that),
/// column blocks on whole vectors.
fn split(m: usize, n: usize, threads: usize) -> Vec<Block> {
    let parts = |len: usize| threads.min(len / GRAIN).max(1);
    if m >= n {
        let p = parts(m);
        (0..p).map(|t| Block { rows: (m * t / p, m * (t + 1) / p), cols: (0, n) }).collect()
    } else {
        let p = parts(n);
        let edge = |t: usize| if t == p { n } else { (n * t / p).next_multiple_of(16).min(n) };
        (0..p).map(|t| Block { rows: (0, m), cols: (edge(t), edge(t + 1)) }).collect()
    }
}

/// The fewest rows or columns of a block of a split product.
const GRAIN: usize = 32;

/// The result's buffer, written by several threads at disjoint blocks.
struct Shared(*mut f32);

// SAFETY: only dereferenced (by gemm, and the +0 pass) at blocks one thread writes alone, while the
// buffer lives.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The element `i` past the start.
    ///
    /// # Safety
    /// `i` must be within the buffer.
    unsafe fn at(&self, i: usize) -> *mut f32 {
        unsafe { self.0.add(i) }
    }
}

/// The product into the m*n elements at `c`, every one written when it returns Ok.
///
/// # Safety
/// `c` must be valid for writes of m*n elements.
unsafe fn product(a: &[f32], b: &[f32], c: *mut f32, p: Product, threads: usize) -> Result<(), String> {
    let Product { m, k, n, .. } = p;
    let elements = |[r, c]: [usize; 2]| r.checked_mul(c);
    let (sa, sb) = (p.lhs_shape(), p.rhs_shape());
    if Some(a.len()) != elements(sa) || Some(b.len()) != elements(sb) {
        return Err(format!(
            "factors of {} and {} elements for a product of f32[{},{}]{} and f32[{},{}]{}",
            a.len(),
            b.len(),
            sa[0],
            sa[1],
            if p.transpose_a { " (transposed)" } else { "" },
            sb[0],
            sb[1],
            if p.transpose_b { " (transposed)" } else { "" },
        ));
    }
    if m == 1 && k > 0 && n > 0 {
        // SAFETY: as this call's: `c` holds the n elements of the one row.
        return unsafe { row_product(a, b, c, p, threads) };
    }
    // gemm reads a transposed factor at a fraction of its rate (measured on AVX-512: a
    // [256,1024] x [1024,1024]^T product at half the plain one's, a [256,10] x [1024,10]^T one
    // at a twentieth); packing it row-major first costs one pass over it, as BLAS's own
    // packing does.
    let repack = [p.transpose_a && m * k >= REPACK_ELEMENTS, p.transpose_b && k * n >= REPACK_ELEMENTS];
    if repack.contains(&true) {
        let plain = Product { transpose_a: p.transpose_a && !repack[0], transpose_b: p.transpose_b && !repack[1], ..p };
        // SAFETY: as this call's.
        return with_packed(a, b, p, repack, threads, |a, b| unsafe { product(a, b, c, plain, threads) });
    }
    if m == 0 || n == 0 {
        // An empty result: nothing to write (and no block may point past an empty buffer).
        return Ok(());
    }
    // Every stride and extent as gemm's isize (the buffers' lengths bound them, but a zero
    // dimension leaves the others unbounded).
    let signed =
        |x: usize| isize::try_from(x).map_err(|_| format!("a [{m},{k}] x [{k},{n}] product too large to index"));
    let (a_rs, a_cs) = p.lhs_strides();
    let (b_rs, b_cs) = p.rhs_strides();
    let (a_rs, a_cs, b_rs, b_cs, c_rs) = (signed(a_rs)?, signed(a_cs)?, signed(b_rs)?, signed(b_cs)?, signed(n)?);
    signed(m)?;
    signed(k)?;
    // gemm splits a product across threads at every block of its depth, waiting twice per
    // block; with few columns and a long depth (a 3x3 convolution's [256, 2304] x [2304, 196])
    // its threads wait more than they compute (222-423 GFLOP/s on 2 AVX-512 cores, varying
    // from run to run with the threads' wake-ups, where this split got 440-460). Such products
    // are split here instead, by rows or by columns ([`split`]): one single-threaded gemm per
    // block, one wait in all. gemm's own split stays where there are many columns, where it
    // measured up to 10% ahead.
    let whole = Block { rows: (0, m), cols: (0, n) };
    let blocks = if threads > 1 && n < SPLIT_COLUMNS { split(m, n, threads) } else { vec![whole] };
    let parallelism =
        if threads > 1 && blocks.len() == 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    let c = Shared(c);
    let run = |Block { rows: (r0, r1), cols: (c0, c1) }: Block| {
        // SAFETY: gemm reads lhs element (i, p), i < r1 - r0, p < k, at `a + (r0 + i)*a_rs +
        // p*a_cs`, at most (m-1)k + (k-1) = mk - 1 untransposed and (m-1) + (k-1)m = mk - 1
        // transposed, within `a`'s m*k elements (checked above); rhs element (p, j), j < c1 -
        // c0, at `b + p*b_rs + (c0 + j)*b_cs`, likewise within `b`'s k*n; `c` holds m*n
        // elements (the caller's promise), row-major, and rows r0..r1 of columns c0..c1 of it
        // are written by this call alone (the blocks are disjoint). With read_dst false gemm
        // does not read `c` (dst = alpha dst + beta a b, alpha unused) and writes every
        // element of the block.
        unsafe {
            gemm::gemm(
                r1 - r0,
                c1 - c0,
                k,
                c.at(r0 * n + c0),
                1,
                c_rs,
                false,
                a.as_ptr().wrapping_offset(r0 as isize * a_rs),
                a_cs,
                a_rs,
                b.as_ptr().wrapping_offset(c0 as isize * b_cs),
                b_cs,
                b_rs,
                0.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        // The reference sums from +0, so its zeros are +0 (in round-to-nearest a sum that
        // starts at +0 is never -0); gemm may leave -0 (a single term -0 * x), whose sign a
        // later division turns into the other infinity. Adding +0 changes nothing else.
        for r in r0..r1 {
            // SAFETY: row r's columns c0..c1 are within `c` and this block's alone.
            let row = unsafe { std::slice::from_raw_parts_mut(c.at(r * n + c0), c1 - c0) };
            for x in row {
                *x += 0.0;
            }
        }
    };
    match blocks.as_slice() {
        [one] => run(*one),
        _ => rayon::scope(|s| {
            for &block in &blocks {
                let run = &run;
                s.spawn(move |_| run(block));
            }
        }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never called: every case below fails its checks first.
    unsafe extern "C" fn never(_: *const *const f32, _: *const *mut f32, _: i64, _: i64, _: *mut f32) {
        unreachable!("the checks reject the call")
    }

    fn entry(in_place: Vec<usize>) -> Entry {
        let extents = Extents { rows: 2, ins: vec![6, 3], outs: vec![6, 2], scratch: 0, in_place };
        // SAFETY: the entry is only run with arguments its checks reject, so `never` is not
        // called.
        unsafe { Entry::new(never, extents, Arc::new(())) }
    }

    #[test]
    fn only_the_inputs_the_plan_allows_are_written_over() {
        let scratch = |len: usize, f: &mut dyn FnMut(&mut [f32])| f(&mut vec![0.0; len]);
        let b = [0.0f32; 3];
        let run = |e: &Entry, ins: &[In<'_>]| {
            let mut outs = vec![vec![0.0f32; 6], vec![0.0f32; 2]];
            e.run(ins, &mut outs, &[(0, 2)], scratch)
        };
        // Input 1 (a broadcast row) over output 0: other row blocks would read what one writes.
        let e = entry(vec![0]);
        let err = run(&e, &[In::Slice(&[0.0; 6]), In::Output(0)]).unwrap_err();
        assert!(err.contains("input 1 may not be written over"), "{err}");
        // Input 0 over the per-row output 1, which is shorter than it.
        let err = run(&e, &[In::Output(1), In::Slice(&b)]).unwrap_err();
        assert!(err.contains("cannot be read from output 1"), "{err}");
        // Nothing may be written over in place when the plan allows nothing.
        let e = entry(vec![]);
        let err = run(&e, &[In::Output(0), In::Slice(&b)]).unwrap_err();
        assert!(err.contains("input 0 may not be written over"), "{err}");
    }

    /// `a b` summed in f64 from the stored buffers, each read through its flag.
    fn naive(a: &[f32], b: &[f32], p: Product) -> Vec<f32> {
        let Product { m, k, n, transpose_a, transpose_b } = p;
        let at = |i: usize, t: usize| if transpose_a { a[t * m + i] } else { a[i * k + t] };
        let bt = |t: usize, j: usize| if transpose_b { b[j * k + t] } else { b[t * n + j] };
        (0..m * n)
            .map(|x| (0..k).map(|t| f64::from(at(x / n, t)) * f64::from(bt(t, x % n))).sum::<f64>() as f32)
            .collect()
    }

    #[test]
    fn transposed_factors_are_read_through_their_strides() {
        // (7, 33, 200): fewer rows than columns, split by columns on 4 threads. One row takes
        // the row loops: whole quads of rows and a rest, 16-lane dots and a rest, and
        // (1, 1030, 1031) column blocks on 4 threads.
        let shapes = [(1, 1, 1), (3, 5, 4), (7, 1, 9), (1, 13, 1), (65, 33, 17), (7, 33, 200), (0, 3, 100)];
        for (m, k, n) in shapes.into_iter().chain([(1, 37, 301), (1, 4, 17), (1, 1030, 1031), (1, 16, 3)]) {
            for (transpose_a, transpose_b) in [(false, false), (true, false), (false, true), (true, true)] {
                let p = Product { m, k, n, transpose_a, transpose_b };
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
                let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 13) as f32 - 6.0) / 8.0).collect();
                for threads in [1, 4] {
                    let mut c = vec![9.0; 3];
                    matmul(&a, &b, &mut c, p, threads).unwrap();
                    let want = naive(&a, &b, p);
                    assert_eq!(c.len(), m * n);
                    for (i, (x, y)) in c.iter().zip(&want).enumerate() {
                        assert!((x - y).abs() <= 1e-5 * k as f32, "{p:?}, element {i}: {x} vs {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_cover_the_result_once() {
        for (m, n) in
            [(0, 5), (5, 0), (1, 1), (31, 200), (64, 64), (65, 64), (100, 70), (1000, 49), (32, 784), (7, 100)]
        {
            for threads in [1, 2, 3, 16] {
                let blocks = split(m, n, threads);
                let mut seen = vec![0u8; m * n];
                for b in &blocks {
                    assert!(b.rows.0 < b.rows.1 || m == 0, "{m}x{n}, {threads} threads: {blocks:?}");
                    assert!(b.cols.0 < b.cols.1 || n == 0, "{m}x{n}, {threads} threads: {blocks:?}");
                    for r in b.rows.0..b.rows.1 {
                        for c in b.cols.0..b.cols.1 {
                            seen[r * n + c] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "{m}x{n}, {threads} threads: {blocks:?}");
                assert!(blocks.len() <= threads);
                // The smaller factor is the one each block packs whole.
                assert!(blocks.iter().all(|b| if m >= n { b.cols == (0, n) } else { b.rows == (0, m) }), "{blocks:?}");
            }
        }
    }

    #[test]
    fn factors_are_checked_against_their_stored_shapes() {
        let p = Product { m: 2, k: 3, n: 4, transpose_a: true, transpose_b: false };
        assert_eq!((p.lhs_shape(), p.rhs_shape()), ([3, 2], [3, 4]));
        let mut c = Vec::new();
        let err = matmul(&[0.0; 6], &[0.0; 11], &mut c, p, 1).unwrap_err();
        assert!(err.contains("f32[3,2] (transposed) and f32[3,4]"), "{err}");
        let p = Product { transpose_a: false, transpose_b: true, ..p };
        let err = matmul(&[0.0; 5], &[0.0; 12], &mut c, p, 1).unwrap_err();
        assert!(err.contains("f32[2,3] and f32[4,3] (transposed)"), "{err}");
    }
}
