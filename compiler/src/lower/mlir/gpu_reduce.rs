//! Pooling and column reductions on the GPU: a thread per output element folds its window or
//! its column, in the order the run half's CPU kernels do (a pool's taps inside the input in
//! (ky, kx) order, maxima from -inf with NaN winning, sums in f64; a column's rows in order
//! from -0 in f64), so the results are theirs and the reference's, bit for bit (but for
//! NaNs' payloads: a GPU's f64 arithmetic returns its canonical NaN).
//!
//! The same body also comes as a CPU function ([`cpu_twin`]) over the same threads, which the
//! tests run against the reference interpreter on machines without a GPU.

use super::emit::{Emitter, Lanes};
use crate::lower::plan::{ColumnPlan, PoolPlan};
use graphc_cpu_runtime::Extents;
use graphc_ir::{Op, TensorType};

/// What a reduction kernel computes.
#[derive(Clone, Debug)]
pub enum Reduction {
    Pool(PoolPlan),
    Columns(ColumnPlan),
}

/// Every size and window attribute of a pool the GPU kernel runs is below this, so that its
/// index arithmetic (a position is at most an output index times a stride, plus a tap times a
/// dilation) stays far inside i64. The CPU kernel takes any (it computes in 128 bits).
const WINDOW_LIMIT: u64 = 1 << 31;

impl Reduction {
    /// The type of its one operand.
    pub fn input(&self) -> &TensorType {
        match self {
            Reduction::Pool(p) => &p.input,
            Reduction::Columns(p) => &p.input,
        }
    }

    /// The type of its one result.
    pub fn out(&self) -> &TensorType {
        match self {
            Reduction::Pool(p) => &p.out,
            Reduction::Columns(p) => &p.out,
        }
    }
}

/// The fewest columns a column reduction needs to run on the GPU: a thread sums each column
/// in order (the CPU's order, so the sums are the CPU's), so fewer columns leave the GPU
/// nearly idle while one thread walks the rows.
pub const MIN_GPU_COLUMNS: usize = 256;

/// Whether the GPU kernel runs `r`; the error says why not.
pub fn check(r: &Reduction) -> Result<(), String> {
    let p = match r {
        Reduction::Columns(c) if c.batch * c.cols < MIN_GPU_COLUMNS => {
            return Err(format!(
                "{} columns: a column reduction needs {MIN_GPU_COLUMNS} or more on the GPU (a thread each)",
                c.batch * c.cols
            ))
        }
        Reduction::Columns(_) => return Ok(()),
        Reduction::Pool(p) => p,
    };
    let w = &p.window;
    if p.planar().is_none() {
        return Err("only 2-D and 1-D pools have a GPU kernel".into());
    }
    let values = p.input.shape.iter().chain(&w.kernel).chain(&w.strides).chain(&w.pads_begin).chain(&w.pads_end);
    if values.chain(&w.dilations).any(|&v| v >= WINDOW_LIMIT) {
        return Err(format!("a pool's sizes and window attributes must be below {WINDOW_LIMIT} on the GPU"));
    }
    Ok(())
}

/// The `[rows, cols]` view of the result the run half checks and the threads cover (a thread
/// per element): a pool's output rows by their width; a column reduction's one row (of every
/// batch index's columns).
pub fn view(r: &Reduction) -> (usize, usize) {
    match r {
        Reduction::Pool(p) => {
            let [_, out] = pool_dims(p);
            (out[..3].iter().product(), out[3])
        }
        Reduction::Columns(p) => (1, p.batch * p.cols),
    }
}

/// What the kernel reads and writes, as the CPU kernels' extents (the rows are the view's).
pub fn extents(r: &Reduction) -> Extents {
    let count = |t: &TensorType| t.shape.iter().map(|&d| d as usize).product::<usize>();
    Extents {
        rows: view(r).0,
        ins: vec![count(r.input())],
        outs: vec![count(r.out())],
        scratch: 0,
        in_place: Vec::new(),
    }
}

/// The kernel as a `gpu.func` named `name`: the input's pointer, the result's, the scratch's
/// (unused) and the view's row count; thread `t` of the grid computes element `t`.
pub fn gpu_reduce_kernel(r: &Reduction, name: &str) -> Result<String, String> {
    check(r)?;
    Ok(Emitter::per_element_gpu(name, 1, view(r).1, &mut |e, t, ins, y| element(e, r, t, &ins[0], y)))
}

/// The kernel as a CPU function named `name` with the CPU kernels' signature over the view's
/// rows: each row's threads one after another, each running the GPU kernel's body.
pub fn cpu_twin(r: &Reduction, name: &str) -> Result<String, String> {
    check(r)?;
    Ok(Emitter::per_element_twin(name, 1, view(r).1, &mut |e, t, ins, y| element(e, r, t, &ins[0], y)))
}

/// Element `t` of the result: `y[t]` from `x`.
fn element(e: &mut Emitter, r: &Reduction, t: &str, x: &str, y: &str) {
    let v = match r {
        Reduction::Pool(p) => pool_element(e, p, t, x),
        Reduction::Columns(p) => column_element(e, p, t, x),
    };
    let at = e.gep(y, t);
    e.store(&v, &at, Lanes(1));
}

/// Column `t`'s sum (or mean), `t` counting the columns of every batch index: its rows in
/// order, in f64 from -0.
fn column_element(e: &mut Emitter, p: &ColumnPlan, t: &str, x: &str) -> String {
    let zero = e.op("arith.constant -0.0 : f64");
    let cols = e.i64c(p.cols as i64);
    let b = e.op(&format!("arith.divsi {t}, {cols} : i64"));
    let c = e.op(&format!("arith.remsi {t}, {cols} : i64"));
    let base = e.imul(&b, (p.rows * p.cols) as i64);
    let base = e.iadd(&base, &c);
    let (lo, hi) = (e.i64c(0), e.i64c(p.rows as i64));
    let sum = fold(e, (&lo, &hi), &zero, "f64", &mut |e, row, acc| {
        let off = e.imul(row, p.cols as i64);
        let off = e.iadd(&off, &base);
        let at = e.gep(x, &off);
        let v = e.load(&at, Lanes(1));
        let v = e.op(&format!("arith.extf {v} : f32 to f64"));
        e.op(&format!("arith.addf {acc}, {v} : f64"))
    });
    let total = if p.op == Op::ReduceMean {
        let rows = e.op(&format!("arith.constant {}.0 : f64", p.rows));
        e.op(&format!("arith.divf {sum}, {rows} : f64"))
    } else {
        sum
    };
    e.op(&format!("arith.truncf {total} : f64 to f32"))
}

/// One output position's taps along a spatial dim (i64): the first and one past the last
/// inside the input (`lo <= hi`), how many are not past the end padding, and the position of
/// tap 0.
struct Taps {
    lo: String,
    hi: String,
    counted: String,
    start: String,
}

/// A pool's input and result as the 4-D views its window indexes (a 1-D pool's with height 1);
/// [`check`] refused any other. Its window's attributes are the plan's 3-D ones, of which the
/// last two (height, width) are these views' spatial dims.
fn pool_dims(p: &PoolPlan) -> [[usize; 4]; 2] {
    p.planar().expect("a pool the GPU runs is 2-D or 1-D")
}

/// The taps of output position `o` along spatial dim `a` (0: height, 1: width) of `p`.
fn taps(e: &mut Emitter, p: &PoolPlan, a: usize, o: &str) -> Taps {
    let w = &p.window;
    // The window's attributes are per dim of the plan's 5-D view (depth first).
    let wa = a + 1;
    let (size, kernel, d) = (pool_dims(p)[0][2 + a] as i64, w.kernel[wa] as i64, w.dilations[wa] as i64);
    let scaled = e.imul(o, w.strides[wa] as i64);
    let pad = e.i64c(w.pads_begin[wa] as i64);
    let start = e.op(&format!("arith.subi {scaled}, {pad} : i64"));
    let zero = e.i64c(0);
    let k = e.i64c(kernel);
    let clamp = |e: &mut Emitter, v: &str| {
        let v = e.op(&format!("arith.maxsi {v}, {zero} : i64"));
        e.op(&format!("arith.minsi {v}, {k} : i64"))
    };
    // Tap j is at start + j*d: the first inside is ceil(-start / d), the last floor((size - 1
    // - start) / d), the last before the end padding ceil((size + pad_end - start) / d) - 1.
    let neg = e.op(&format!("arith.subi {zero}, {start} : i64"));
    let lo = ceil_div(e, &neg, d);
    let lo = clamp(e, &lo);
    let last = e.i64c(size - 1);
    let rest = e.op(&format!("arith.subi {last}, {start} : i64"));
    let dc = e.i64c(d);
    let q = e.op(&format!("arith.divsi {rest}, {dc} : i64"));
    let one = e.i64c(1);
    let q = e.op(&format!("arith.addi {q}, {one} : i64"));
    let before = e.op(&format!("arith.cmpi slt, {rest}, {zero} : i64"));
    let hi = e.op(&format!("arith.select {before}, {zero}, {q} : i64"));
    let hi = clamp(e, &hi);
    let hi = e.op(&format!("arith.maxsi {hi}, {lo} : i64"));
    let end = e.i64c(size + w.pads_end[wa] as i64);
    let to_end = e.op(&format!("arith.subi {end}, {start} : i64"));
    let counted = ceil_div(e, &to_end, d);
    let counted = clamp(e, &counted);
    Taps { lo, hi, counted, start }
}

/// `ceil(a / d)` for any i64 `a` and `d >= 1`.
fn ceil_div(e: &mut Emitter, a: &str, d: i64) -> String {
    let zero = e.i64c(0);
    let dc = e.i64c(d);
    let up = e.i64c(d - 1);
    let raised = e.op(&format!("arith.addi {a}, {up} : i64"));
    let positive = e.op(&format!("arith.divsi {raised}, {dc} : i64"));
    let neg = e.op(&format!("arith.subi {zero}, {a} : i64"));
    let q = e.op(&format!("arith.divsi {neg}, {dc} : i64"));
    let negative = e.op(&format!("arith.subi {zero}, {q} : i64"));
    let above = e.op(&format!("arith.cmpi sgt, {a}, {zero} : i64"));
    e.op(&format!("arith.select {above}, {positive}, {negative} : i64"))
}

/// Output element `t` of pool `p` of `x`: its window's taps inside the input in (ky, kx)
/// order; a maximum from -inf that a NaN tap wins, or an average of f64 sums over the taps
/// inside the input (or, with `count_include_pad`, those not past the end padding), NaN
/// for a window with none.
fn pool_element(e: &mut Emitter, p: &PoolPlan, t: &str, x: &str) -> String {
    let [input, out] = pool_dims(p);
    let dims: Vec<i64> = out.iter().map(|&d| d as i64).collect();
    let (h, w) = (input[2] as i64, input[3] as i64);
    let ow = e.i64c(dims[3]);
    let oh = e.i64c(dims[2]);
    let ox = e.op(&format!("arith.remsi {t}, {ow} : i64"));
    let r = e.op(&format!("arith.divsi {t}, {ow} : i64"));
    let oy = e.op(&format!("arith.remsi {r}, {oh} : i64"));
    let plane = e.op(&format!("arith.divsi {r}, {oh} : i64"));
    let (ty, tx) = (taps(e, p, 0, &oy), taps(e, p, 1, &ox));
    let base = e.imul(&plane, h * w);
    let max = p.op == Op::MaxPool;
    let (init, ty_name) =
        if max { (e.op("arith.constant 0xFF800000 : f32"), "f32") } else { (e.op("arith.constant 0.0 : f64"), "f64") };
    let (dy, dx) = (p.window.dilations[1] as i64, p.window.dilations[2] as i64);
    let acc = fold(e, (&ty.lo, &ty.hi), &init, ty_name, &mut |e, ky, acc| {
        let iy = e.imul(ky, dy);
        let iy = e.iadd(&ty.start, &iy);
        let row = e.imul(&iy, w);
        let row = e.iadd(&base, &row);
        fold(e, (&tx.lo, &tx.hi), acc, ty_name, &mut |e, kx, acc| {
            let ix = e.imul(kx, dx);
            let ix = e.iadd(&tx.start, &ix);
            let off = e.iadd(&row, &ix);
            let at = e.gep(x, &off);
            let v = e.load(&at, Lanes(1));
            if max {
                // Take the tap when the maximum is not NaN yet and the tap is NaN or larger.
                let a_ok = e.op(&format!("arith.cmpf ord, {acc}, {acc} : f32"));
                let v_nan = e.op(&format!("arith.cmpf uno, {v}, {v} : f32"));
                let larger = e.op(&format!("arith.cmpf ogt, {v}, {acc} : f32"));
                let wins = e.op(&format!("arith.ori {v_nan}, {larger} : i1"));
                let take = e.op(&format!("arith.andi {a_ok}, {wins} : i1"));
                e.op(&format!("arith.select {take}, {v}, {acc} : f32"))
            } else {
                let v = e.op(&format!("arith.extf {v} : f32 to f64"));
                e.op(&format!("arith.addf {acc}, {v} : f64"))
            }
        })
    });
    if max {
        return acc;
    }
    let (ny, nx) = if p.count_include_pad {
        (ty.counted.clone(), tx.counted.clone())
    } else {
        (
            e.op(&format!("arith.subi {}, {} : i64", ty.hi, ty.lo)),
            e.op(&format!("arith.subi {}, {} : i64", tx.hi, tx.lo)),
        )
    };
    let count = e.op(&format!("arith.muli {ny}, {nx} : i64"));
    let countf = e.op(&format!("arith.sitofp {count} : i64 to f64"));
    let mean = e.op(&format!("arith.divf {acc}, {countf} : f64"));
    let mean = e.op(&format!("arith.truncf {mean} : f64 to f32"));
    let zero = e.i64c(0);
    let none = e.op(&format!("arith.cmpi eq, {count}, {zero} : i64"));
    let nan = e.op("arith.constant 0x7FC00000 : f32");
    e.op(&format!("arith.select {none}, {nan}, {mean} : f32"))
}

/// `scf.for %kN = lo to hi` (i64, step 1) carrying one value of type `ty` from `init`: the
/// value after the last trip, each trip's being `body(e, %kN, the value carried in)`.
fn fold(
    e: &mut Emitter,
    (lo, hi): (&str, &str),
    init: &str,
    ty: &str,
    body: &mut dyn FnMut(&mut Emitter, &str, &str) -> String,
) -> String {
    let one = e.i64c(1);
    let id = e.next;
    e.next += 1;
    let (k, a) = (format!("%k{id}"), format!("%a{id}"));
    e.line(&format!("%r{id} = scf.for {k} = {lo} to {hi} step {one} iter_args({a} = {init}) -> ({ty}) : i64 {{"));
    e.depth += 1;
    let next = body(e, &k, &a);
    e.line(&format!("scf.yield {next} : {ty}"));
    e.depth -= 1;
    e.line("}");
    format!("%r{id}")
}
