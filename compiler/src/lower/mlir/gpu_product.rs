//! Matrix products and convolutions on the GPU: a tiled kernel. A convolution is one product
//! per image and group (implicit GEMM): the group's weights `[M/group, C/group*KH*KW]` times
//! the image's patches `[C/group*KH*KW, OH*OW]`, whose elements are staged straight from the
//! input through the window's geometry (zeros in the padding), never laid out in memory.
//! Each block of [`THREADS`] threads computes a [`TILE`] x [`TILE`] tile of one product; for each [`DEPTH`]-deep step along k its threads
//! stage a tile of either factor in shared memory (each element read from global memory once
//! per block), wait at a barrier, and each thread adds their products into the 4 x 4 elements
//! it owns (rows `ty + 16i`, columns `tx + 16j`: consecutive threads read consecutive shared
//! words and write consecutive columns). A per-element epilogue (bias, activation) runs in the
//! same kernel on each element after its product is in place.
//!
//! The same phases also come as a CPU function ([`cpu_twin`]) that runs a block's threads one
//! after another between the barriers, each thread's accumulators kept in memory: the tests
//! run it against the reference interpreter, so what the two share (staging, accumulating,
//! the bounds, the epilogue) is checked on machines without a GPU. What only the GPU kernel
//! has (block and thread ids, the barriers, the shared globals) is checked by `ptxas`.

use super::emit::{gpu_scratch_per_row, gpu_threads_per_element, Emitter, Lanes};
use crate::lower::plan::{ConvPlan, Epilogue, MatMulPlan};
use graphc_cpu_runtime::Extents;
use graphc_ir::{DType, TensorType};
use std::fmt::Write;

/// The rows and columns of the product a block computes.
pub const TILE: usize = 64;
/// The k-extent of the factors' tiles a block stages in shared memory at a time.
pub const DEPTH: usize = 16;
/// Threads per block: `SIDE` x `SIDE`, each computing `EACH` x `EACH` elements.
pub const THREADS: usize = SIDE * SIDE;
const SIDE: usize = 16;
const EACH: usize = TILE / SIDE;
/// Elements of either factor a block stages per step.
const STAGED: usize = TILE * DEPTH;
/// The stride of a tile's rows (one per depth) in shared memory: one more than a row holds,
/// so that the 32 threads of a warp storing consecutive depths hit different banks.
const ROW: usize = TILE + 1;
/// Elements of either factor's tile in shared memory.
const SHARED: usize = DEPTH * ROW;
const _: () = assert!(STAGED.is_multiple_of(THREADS) && TILE.is_multiple_of(SIDE));

/// What the tiled kernel computes.
#[derive(Clone, Debug)]
pub enum Contraction {
    MatMul(MatMulPlan),
    /// A convolution, as a product per image and group.
    Conv(ConvPlan),
}

/// The products a contraction is: `batches` of `[m, k] x [k, n]`, batch `b`'s stored from
/// element `b * m * n` of the result. A convolution's batch `b` is image `b / groups`, group
/// `b % groups`.
#[derive(Clone, Copy, Debug)]
struct Dims {
    m: usize,
    n: usize,
    k: usize,
    batches: usize,
    groups: usize,
}

impl Contraction {
    fn dims(&self) -> Dims {
        match self {
            Contraction::MatMul(p) => Dims { m: p.m, n: p.n, k: p.k, batches: 1, groups: 1 },
            Contraction::Conv(c) => {
                let g = &c.geometry;
                let [_, w, out] = conv_dims(c);
                Dims {
                    m: w[0] / g.group,
                    n: out[2] * out[3],
                    k: w[1] * w[2] * w[3],
                    batches: out[0] * g.group,
                    groups: g.group,
                }
            }
        }
    }

    /// Whether elementwise ops follow it in the same kernel (reading it from scratch).
    pub fn has_epilogue(&self) -> bool {
        self.epilogue().is_some()
    }

    fn epilogue(&self) -> Option<&Epilogue> {
        match self {
            Contraction::MatMul(p) => p.epilogue.as_ref(),
            Contraction::Conv(c) => c.epilogue.as_ref(),
        }
    }

    /// The node's operands that are the lhs and the rhs: a convolution's weights and input.
    fn factors(&self) -> (usize, usize) {
        match self {
            Contraction::MatMul(p) => (p.lhs, p.rhs),
            Contraction::Conv(c) => (c.w, c.x),
        }
    }

    /// The types of the lhs and rhs operands, as stored.
    fn factor_types(&self) -> (TensorType, TensorType) {
        match self {
            Contraction::MatMul(p) => {
                let product = p.product();
                let stored = |[r, c]: [usize; 2]| TensorType::new(DType::F32, [r as u64, c as u64]);
                (stored(product.lhs_shape()), stored(product.rhs_shape()))
            }
            Contraction::Conv(c) => (c.geometry.weight.clone(), c.geometry.input.clone()),
        }
    }

    /// The contraction's own result (what an epilogue reads as its input 0).
    fn product_type(&self) -> TensorType {
        match self {
            Contraction::MatMul(p) => TensorType::new(DType::F32, [p.m as u64, p.n as u64]),
            Contraction::Conv(c) => c.geometry.out.clone(),
        }
    }
}

/// A convolution's input, weight and result as the 4-D views its window indexes (a 1-D
/// convolution's with height 1); [`operand_types`] refused a 3-D or transposed one. Its
/// window is the geometry's `[1..]` (height, width; index 0 is the 5-D view's depth).
fn conv_dims(c: &ConvPlan) -> [[usize; 4]; 3] {
    c.geometry.planar().expect("a conv the GPU runs is a 2-D or 1-D forward one")
}

/// A plan's tensor sizes, which its plan has checked fit in memory.
fn sizes(t: &TensorType) -> Vec<usize> {
    t.shape.iter().map(|&d| d as usize).collect()
}

fn elements(t: &TensorType) -> usize {
    sizes(t).iter().product()
}

/// Blocks a launch of `c`'s kernel has: one per tile of each product.
pub fn blocks(c: &Contraction) -> usize {
    let d = c.dims();
    d.batches * d.m.div_ceil(TILE) * d.n.div_ceil(TILE)
}

/// The `[rows, cols]` view of the kernel's results (the last dim by the rest), as the run
/// half checks them.
pub fn view(c: &Contraction) -> (usize, usize) {
    let out = result_types(c).0;
    let cols = out.shape.last().map_or(1, |&d| d as usize);
    (elements(&out) / cols.max(1), cols)
}

/// What the kernel reads and writes, as the CPU kernels' extents (the rows are the launch's
/// blocks): per operand of the node, one past the last element read; per result its
/// elements; and the contraction's result in scratch where an epilogue reads it.
pub fn extents(c: &Contraction, operands: usize) -> Extents {
    let mut ins = vec![0; operands];
    let mut reach = |i: usize, r: usize| {
        if let Some(x) = ins.get_mut(i) {
            *x = (*x).max(r);
        }
    };
    let ((lhs, rhs), (lt, rt)) = (c.factors(), c.factor_types());
    reach(lhs, elements(&lt));
    reach(rhs, elements(&rt));
    if let Some((ep, used)) = c.epilogue() {
        let e = graphc_cpu_runtime::describe::extents(ep);
        for (j, &i) in used.iter().enumerate() {
            reach(i, e.ins.get(j + 1).copied().unwrap_or(usize::MAX));
        }
    }
    let total = elements(&c.product_type());
    let scratch = if c.epilogue().is_some() { total } else { 0 };
    Extents { rows: blocks(c), ins, outs: vec![total; result_count(c)], scratch, in_place: Vec::new() }
}

/// Whether the kernels index this contraction: 2-D factors, and 2-D or 1-D forward
/// convolutions (their 4-D views, [`crate::lower::plan::ConvGeometry::planar`]); an error saying why not.
fn check(c: &Contraction) -> Result<(), String> {
    match c {
        Contraction::MatMul(p) if p.batch.is_some() => Err("the GPU's products take 2-D factors".into()),
        Contraction::Conv(cp) if cp.geometry.planar().is_none() => {
            Err("only 2-D and 1-D forward convolutions have a GPU kernel".into())
        }
        _ => Ok(()),
    }
}

/// What each operand of the contraction's node must be when the kernel runs: its type, and
/// whether it is expanded to the result's shape first (a broadcast the epilogue's indexing
/// cannot express); an error when one operand would be read in two ways, or when the epilogue
/// is not per element (a row reduction needs the whole row: such products stay on the CPU).
pub fn operand_types(c: &Contraction, operands: &[TensorType]) -> Result<Vec<(TensorType, bool)>, String> {
    check(c)?;
    let mut roles: Vec<Option<(TensorType, bool)>> = vec![None; operands.len()];
    let mut give = |i: usize, ty: TensorType, materialize: bool| -> Result<(), String> {
        let slot = roles.get_mut(i).ok_or_else(|| format!("the kernel reads operand {i} of {}", operands.len()))?;
        match slot {
            Some(had) if *had != (ty.clone(), materialize) => {
                Err(format!("operand {i} is read as {} and as {ty}", had.0))
            }
            _ => {
                *slot = Some((ty, materialize));
                Ok(())
            }
        }
    };
    let ((lhs, rhs), (lt, rt)) = (c.factors(), c.factor_types());
    give(lhs, lt, false)?;
    give(rhs, rt, false)?;
    if let Some((ep, used)) = c.epilogue() {
        if !gpu_threads_per_element(ep) || gpu_scratch_per_row(ep) != 0 {
            return Err("the epilogue reduces rows".into());
        }
        if ep.out != c.product_type() || ep.inputs.len() != used.len() + 1 {
            return Err("the epilogue does not cover the product".into());
        }
        for (j, &i) in used.iter().enumerate() {
            give(i, ep.input_types[j + 1].clone(), ep.inputs[j + 1].materialize)?;
        }
    }
    // An operand nothing reads is passed as it comes.
    Ok(roles.into_iter().zip(operands).map(|(r, ty)| r.unwrap_or((ty.clone(), false))).collect())
}

/// The kernel as a `gpu.func` named `name` (its two shared tiles are globals before it): a
/// pointer per operand of the node (`operands` of them), per result and for the scratch (the
/// contraction's result, when an epilogue reads it), then the row count (unused), as every
/// GPU kernel of a module takes them; launched as [`blocks`] blocks of [`THREADS`] threads.
pub fn gpu_product_kernel(c: &Contraction, operands: usize, name: &str) -> Result<String, String> {
    check(c)?;
    let results = result_count(c);
    let mut e = Emitter::thread(3);
    for tile in ["a", "b"] {
        let _ = writeln!(
            e.out,
            "    llvm.mlir.global internal @{name}_{tile}() {{addr_space = 3 : i32, alignment = 16 : i64}} : !llvm.array<{SHARED} x f32>"
        );
    }
    // The kernel's indexing assumes its block size: the driver refuses any other launch.
    let (ins, outs) = e.gpu_function(name, operands, results, &format!("nvvm.reqntid = array<i32: {THREADS}, 1, 1>"));
    let shared = "!llvm.ptr<3>";
    let a_tile = e.op(&format!("llvm.mlir.addressof @{name}_a : {shared}"));
    let b_tile = e.op(&format!("llvm.mlir.addressof @{name}_b : {shared}"));
    let k = Kernel { c, d: c.dims(), shared, a_tile, b_tile, ins, outs };
    let blk = e.op("gpu.block_id x");
    let blk = e.op(&format!("arith.index_cast {blk} : index to i64"));
    let t = e.op("gpu.thread_id x");
    let t = e.op(&format!("arith.index_cast {t} : index to i64"));
    let at = k.origin(&mut e, &blk)?;
    let (tx, ty) = k.coords(&mut e, &t);
    let zero = e.op("arith.constant 0.0 : f32");
    let (lo, depth) = (e.i64c(0), e_i64(&mut e, k.d.k));
    let acc = k.carried_loop(&mut e, (&lo, &depth, DEPTH), &vec![zero; EACH * EACH], &mut |e, k0, acc| {
        k.stage(e, &t, &at, k0);
        e.line("gpu.barrier");
        let next = k.accumulate(e, &tx, &ty, acc)?;
        e.line("gpu.barrier");
        Ok(next)
    })?;
    k.finish(&mut e, &tx, &ty, &at, &acc)?;
    e.line("gpu.return");
    e.out.push_str("    }\n");
    Ok(e.out)
}

/// The kernel as a CPU function named `name` with the CPU kernels' signature, whose rows are
/// the launch's blocks: each block's threads run one after another between the barriers,
/// their tiles on the stack and their accumulators in memory. It reads and writes what the
/// GPU kernel does (the contraction's result in scratch when there is an epilogue), so a test
/// can check the GPU kernel's indexing against the reference on any machine.
pub fn cpu_twin(c: &Contraction, operands: usize, name: &str) -> Result<String, String> {
    check(c)?;
    let results = result_count(c);
    let mut e = Emitter::cpu_thread(2);
    e.cpu_function(name);
    let ins = e.pointers("%ins", operands);
    let outs = e.pointers("%outs", results);
    let stack = |e: &mut Emitter, len: usize| {
        let n = e.i64c(len as i64);
        e.op(&format!("llvm.alloca {n} x f32 : (i64) -> !llvm.ptr"))
    };
    let (a_tile, b_tile) = (stack(&mut e, SHARED), stack(&mut e, SHARED));
    let accs = stack(&mut e, THREADS * EACH * EACH);
    let k = Kernel { c, d: c.dims(), shared: "!llvm.ptr", a_tile, b_tile, ins, outs };
    let blk = k.open_loop(&mut e, "%row_begin", "%row_end", 1);
    let at = k.origin(&mut e, &blk)?;
    let zero = e.op("arith.constant 0.0 : f32");
    k.each_thread(&mut e, &accs, &mut |e, _, _, acc_at| {
        store_accs(e, acc_at, &vec![zero.clone(); EACH * EACH]);
        Ok(())
    })?;
    let depth = e_i64(&mut e, k.d.k);
    let lo = e.i64c(0);
    let k0 = k.open_loop(&mut e, &lo, &depth, DEPTH);
    let (lo, hi) = (e.i64c(0), e.i64c(THREADS as i64));
    let t = k.open_loop(&mut e, &lo, &hi, 1);
    k.stage(&mut e, &t, &at, &k0);
    k.close_loop(&mut e);
    k.each_thread(&mut e, &accs, &mut |e, tx, ty, acc_at| {
        let acc = load_accs(e, acc_at);
        let next = k.accumulate(e, tx, ty, &acc)?;
        store_accs(e, acc_at, &next);
        Ok(())
    })?;
    k.close_loop(&mut e);
    k.each_thread(&mut e, &accs, &mut |e, tx, ty, acc_at| {
        let acc = load_accs(e, acc_at);
        k.finish(e, tx, ty, &at, &acc)
    })?;
    k.close_loop(&mut e);
    e.line("return");
    e.out.push_str("  }\n");
    Ok(e.out)
}

fn e_i64(e: &mut Emitter, c: usize) -> String {
    e.i64c(c as i64)
}

fn load_accs(e: &mut Emitter, at: &str) -> Vec<String> {
    (0..EACH * EACH)
        .map(|q| {
            let c = e_i64(e, q);
            let slot = e.gep(at, &c);
            e.load(&slot, Lanes(1))
        })
        .collect()
}

fn store_accs(e: &mut Emitter, at: &str, acc: &[String]) {
    for (q, v) in acc.iter().enumerate() {
        let c = e_i64(e, q);
        let slot = e.gep(at, &c);
        e.store(v, &slot, Lanes(1));
    }
}

/// A loop body carrying values: `(e, induction variable, values in) -> values out`.
type Carried<'b> = dyn FnMut(&mut Emitter, &str, &[String]) -> Result<Vec<String>, String> + 'b;
/// A thread's phase on the CPU: `(e, tx, ty, its accumulators' address)`.
type PerThread<'b> = dyn FnMut(&mut Emitter, &str, &str, &str) -> Result<(), String> + 'b;

/// The results the kernel writes: the contraction's, or its epilogue's.
fn result_count(c: &Contraction) -> usize {
    c.epilogue().map_or(1, |(ep, _)| ep.results.len())
}

/// The shape the kernel covers (what expanded operands are expanded to) and its results'
/// types: the contraction's, or its epilogue's.
pub fn result_types(c: &Contraction) -> (TensorType, Vec<TensorType>) {
    match c.epilogue() {
        Some((ep, _)) => (ep.out.clone(), (0..ep.results.len()).map(|r| ep.result_type(r)).collect()),
        None => {
            let product = c.product_type();
            (product.clone(), vec![product])
        }
    }
}

/// What the kernel's phases read and write.
struct Kernel<'a> {
    c: &'a Contraction,
    d: Dims,
    /// The tiles' pointer type: shared memory's on the GPU, the stack's on the CPU.
    shared: &'static str,
    a_tile: String,
    b_tile: String,
    /// Per operand of the node and per result, its pointer.
    ins: Vec<String>,
    outs: Vec<String>,
}

/// Where a block works: its product (batch), the first row and column of its tile (i64), and
/// the pointers to that product's factors.
struct Origin {
    batch: String,
    row0: String,
    col0: String,
    lhs: String,
    rhs: String,
}

impl Kernel<'_> {
    /// Opens `scf.for %iN = from to to step step` (i64) and returns `%iN`.
    fn open_loop(&self, e: &mut Emitter, from: &str, to: &str, step: usize) -> String {
        let step = e_i64(e, step);
        let i = format!("%i{}", e.next);
        e.next += 1;
        e.line(&format!("scf.for {i} = {from} to {to} step {step} : i64 {{"));
        e.depth += 1;
        i
    }

    fn close_loop(&self, e: &mut Emitter) {
        e.depth -= 1;
        e.line("}");
    }

    /// `body(e, tx, ty, accumulators)` for each thread of a block in turn, on the CPU.
    fn each_thread(&self, e: &mut Emitter, accs: &str, body: &mut PerThread<'_>) -> Result<(), String> {
        let (lo, hi) = (e.i64c(0), e_i64(e, THREADS));
        let t = self.open_loop(e, &lo, &hi, 1);
        let (tx, ty) = self.coords(e, &t);
        let off = e.imul(&t, (EACH * EACH) as i64);
        let at = e.gep(accs, &off);
        body(e, &tx, &ty, &at)?;
        self.close_loop(e);
        Ok(())
    }

    /// Block `blk`'s product, tile and factors: blocks go product by product, and within one
    /// row of tiles by row of tiles.
    fn origin(&self, e: &mut Emitter, blk: &str) -> Result<Origin, String> {
        let d = self.d;
        let per_product = d.m.div_ceil(TILE) * d.n.div_ceil(TILE);
        let (batch, tile) = if d.batches == 1 {
            (e.i64c(0), blk.to_string())
        } else {
            (self.div(e, blk, per_product), self.rem(e, blk, per_product))
        };
        let across = d.n.div_ceil(TILE);
        let (by, bx) = (self.div(e, &tile, across), self.rem(e, &tile, across));
        let (row0, col0) = (e.imul(&by, TILE as i64), e.imul(&bx, TILE as i64));
        let (l, r) = self.c.factors();
        let (mut lhs, mut rhs) = (self.operand(l)?, self.operand(r)?);
        if let Contraction::Conv(c) = self.c {
            // The group's weights, and the image's channels of the group.
            let group = self.rem(e, &batch, d.groups);
            let off = e.imul(&group, (d.m * d.k) as i64);
            lhs = e.gep(&lhs, &off);
            let [input, _, _] = conv_dims(c);
            let off = e.imul(&batch, (input[1] / d.groups * input[2] * input[3]) as i64);
            rhs = e.gep(&rhs, &off);
        }
        Ok(Origin { batch, row0, col0, lhs, rhs })
    }

    /// Thread `t`'s column and row in its block's `SIDE` x `SIDE` grid.
    fn coords(&self, e: &mut Emitter, t: &str) -> (String, String) {
        let side = e_i64(e, SIDE);
        (e.op(&format!("arith.remui {t}, {side} : i64")), e.op(&format!("arith.divui {t}, {side} : i64")))
    }

    /// `scf.for %kN = lo to hi step step` carrying f32 values (`init` at first): the values
    /// after the last trip, each trip's being `body(e, %kN, the values carried in)`.
    fn carried_loop(
        &self,
        e: &mut Emitter,
        (lo, hi, step): (&str, &str, usize),
        init: &[String],
        body: &mut Carried<'_>,
    ) -> Result<Vec<String>, String> {
        let step = e_i64(e, step);
        let id = e.next;
        e.next += 1;
        let args: Vec<String> = (0..init.len()).map(|q| format!("%a{id}_{q}")).collect();
        let bind: Vec<String> = args.iter().zip(init).map(|(a, v)| format!("{a} = {v}")).collect();
        let types = vec!["f32"; init.len()].join(", ");
        e.line(&format!(
            "%r{id}:{} = scf.for %k{id} = {lo} to {hi} step {step} iter_args({}) -> ({types}) : i64 {{",
            init.len(),
            bind.join(", ")
        ));
        e.depth += 1;
        let next = body(e, &format!("%k{id}"), &args)?;
        e.line(&format!("scf.yield {} : {types}", next.join(", ")));
        e.depth -= 1;
        e.line("}");
        Ok((0..init.len()).map(|q| format!("%r{id}#{q}")).collect())
    }

    /// `%x = a / b` or `a % b` on i64 (both non-negative).
    fn div(&self, e: &mut Emitter, a: &str, b: usize) -> String {
        let b = e_i64(e, b);
        e.op(&format!("arith.divui {a}, {b} : i64"))
    }

    fn rem(&self, e: &mut Emitter, a: &str, b: usize) -> String {
        let b = e_i64(e, b);
        e.op(&format!("arith.remui {a}, {b} : i64"))
    }

    /// Whether `row < rows` and `col < cols`; negative values (as unsigned) are outside.
    fn inside(&self, e: &mut Emitter, row: &str, rows: usize, col: &str, cols: usize) -> String {
        let (rows, cols) = (e_i64(e, rows), e_i64(e, cols));
        let r = e.op(&format!("arith.cmpi ult, {row}, {rows} : i64"));
        let c = e.op(&format!("arith.cmpi ult, {col}, {cols} : i64"));
        e.op(&format!("arith.andi {r}, {c} : i1"))
    }

    /// Element `off` of `p` where `inside`, else 0.
    fn load_or_zero(&self, e: &mut Emitter, inside: &str, p: &str, off: &str) -> String {
        let v = format!("%v{}", e.next);
        e.next += 1;
        e.line(&format!("{v} = scf.if {inside} -> (f32) {{"));
        e.depth += 1;
        let at = e.gep(p, off);
        let x = e.load(&at, Lanes(1));
        e.line(&format!("scf.yield {x} : f32"));
        e.depth -= 1;
        e.line("} else {");
        e.depth += 1;
        let zero = e.op("arith.constant 0.0 : f32");
        e.line(&format!("scf.yield {zero} : f32"));
        e.depth -= 1;
        e.line("}");
        v
    }

    fn tile_at(&self, e: &mut Emitter, tile: &str, off: &str) -> String {
        e.op(&format!("llvm.getelementptr {tile}[{off}] : ({t}, i64) -> {t}, f32", t = self.shared))
    }

    /// Thread `t`'s share of staging the factors' tiles at depth `k0`: `STAGED / THREADS`
    /// elements of each (zeros past the factors' edges and in a convolution's padding),
    /// consecutive threads reading consecutive elements of a factor as it is stored. Tiles
    /// hold a row of `TILE` per depth.
    fn stage(&self, e: &mut Emitter, t: &str, at: &Origin, k0: &str) {
        let d = self.d;
        for q in 0..STAGED / THREADS {
            let first = e_i64(e, q * THREADS);
            let idx = e.iadd(t, &first);
            match self.c {
                // The lhs's rows row0.. are stored [m, k], or depth-major [k, m] when
                // transposed; the rhs's columns col0.. depth-major [k, n], or [n, k] when
                // transposed.
                Contraction::MatMul(p) => {
                    self.stage_factor(e, &idx, (&at.lhs, &self.a_tile), (&at.row0, d.m), k0, p.transpose_a);
                    self.stage_factor(e, &idx, (&at.rhs, &self.b_tile), (&at.col0, d.n), k0, !p.transpose_b);
                }
                // The group's weights are [m, k]; the patches are read from the input.
                Contraction::Conv(c) => {
                    self.stage_factor(e, &idx, (&at.lhs, &self.a_tile), (&at.row0, d.m), k0, false);
                    self.stage_patches(e, &idx, c, &at.rhs, &at.col0, k0);
                }
            }
        }
    }

    /// Element `idx` of a factor's tile staged from `factor` into `tile`: the factor seen as
    /// `extent` lines (the lhs's rows or the rhs's columns), the tile's from `origin`, each
    /// `k` deep, stored line by line or, when `depth_major`, depth by depth.
    fn stage_factor(
        &self,
        e: &mut Emitter,
        idx: &str,
        (factor, tile): (&str, &str),
        (origin, extent): (&str, usize),
        k0: &str,
        depth_major: bool,
    ) {
        let k = self.d.k;
        let (x, d) = if depth_major {
            (self.rem(e, idx, TILE), self.div(e, idx, TILE))
        } else {
            (self.div(e, idx, DEPTH), self.rem(e, idx, DEPTH))
        };
        let (line, depth) = (e.iadd(origin, &x), e.iadd(k0, &d));
        let inside = self.inside(e, &line, extent, &depth, k);
        let off = if depth_major {
            let off = e.imul(&depth, extent as i64);
            e.iadd(&off, &line)
        } else {
            let off = e.imul(&line, k as i64);
            e.iadd(&off, &depth)
        };
        let v = self.load_or_zero(e, &inside, factor, &off);
        self.tile_store(e, &v, tile, &d, &x);
    }

    /// Element `idx` of the patches' tile (depth by depth, consecutive threads taking
    /// consecutive output positions): depth `c * KH * KW + kh * KW + kw` of output position
    /// `oh * OW + ow` is the image's channel `c` at `(oh * stride + kh * dilation - pad, ..)`,
    /// or 0 past the patches' edges or in the padding.
    fn stage_patches(&self, e: &mut Emitter, idx: &str, c: &ConvPlan, image: &str, col0: &str, k0: &str) {
        let g = &c.geometry;
        let [input, w, out] = conv_dims(c);
        let (x, d) = (self.rem(e, idx, TILE), self.div(e, idx, TILE));
        let (pos, depth) = (e.iadd(col0, &x), e.iadd(k0, &d));
        let inside = self.inside(e, &pos, self.d.n, &depth, self.d.k);
        let channel = self.div(e, &depth, w[2] * w[3]);
        let tap = self.rem(e, &depth, w[2] * w[3]);
        let taps = [self.div(e, &tap, w[3]), self.rem(e, &tap, w[3])];
        let at = [self.div(e, &pos, out[3]), self.rem(e, &pos, out[3])];
        let mut coords = Vec::with_capacity(2);
        for a in 0..2 {
            // The geometry's window is per dim of the 5-D view: height and width are 1 and 2.
            let o = e.imul(&at[a], g.strides[a + 1] as i64);
            let t = e.imul(&taps[a], g.dilations[a + 1] as i64);
            let sum = e.iadd(&o, &t);
            let pad = e_i64(e, g.pads[a + 1]);
            coords.push(e.op(&format!("arith.subi {sum}, {pad} : i64")));
        }
        let within = self.inside(e, &coords[0], input[2], &coords[1], input[3]);
        let inside = e.op(&format!("arith.andi {inside}, {within} : i1"));
        let off = e.imul(&channel, (input[2] * input[3]) as i64);
        let row = e.imul(&coords[0], input[3] as i64);
        let off = e.iadd(&off, &row);
        let off = e.iadd(&off, &coords[1]);
        let v = self.load_or_zero(e, &inside, image, &off);
        self.tile_store(e, &v, &self.b_tile, &d, &x);
    }

    /// Stores `v` at `tile[d * ROW + x]`.
    fn tile_store(&self, e: &mut Emitter, v: &str, tile: &str, d: &str, x: &str) {
        let off = e.imul(d, ROW as i64);
        let off = e.iadd(&off, x);
        let at = self.tile_at(e, tile, &off);
        e.line(&format!("llvm.store {v}, {at} {{alignment = 4 : i64}} : f32, {}", self.shared));
    }

    /// `tile[d * ROW + x + SIDE i]` for i in 0..EACH.
    fn tile_loads(&self, e: &mut Emitter, tile: &str, d: &str, x: &str) -> Vec<String> {
        let base = e.imul(d, ROW as i64);
        let base = e.iadd(&base, x);
        (0..EACH)
            .map(|i| {
                let c = e_i64(e, SIDE * i);
                let off = e.iadd(&base, &c);
                let at = self.tile_at(e, tile, &off);
                e.op(&format!("llvm.load {at} {{alignment = 4 : i64}} : {} -> f32", self.shared))
            })
            .collect()
    }

    /// The accumulators of thread (tx, ty) after the staged tiles' `DEPTH` steps along k,
    /// each a fused multiply-add of its element's row of the lhs tile and column of the rhs's.
    fn accumulate(&self, e: &mut Emitter, tx: &str, ty: &str, acc: &[String]) -> Result<Vec<String>, String> {
        let (lo, hi) = (e.i64c(0), e_i64(e, DEPTH));
        self.carried_loop(e, (&lo, &hi, 1), acc, &mut |e, d, acc| {
            let a = self.tile_loads(e, &self.a_tile, d, ty);
            let b = self.tile_loads(e, &self.b_tile, d, tx);
            let mut next = Vec::with_capacity(acc.len());
            for (i, ai) in a.iter().enumerate() {
                for (j, bj) in b.iter().enumerate() {
                    next.push(e.fma(ai, bj, &acc[i * EACH + j], Lanes(1)));
                }
            }
            Ok(next)
        })
    }

    /// Writes thread (tx, ty)'s elements inside its product: to the result, or to scratch
    /// and then through the epilogue, element by element.
    fn finish(&self, e: &mut Emitter, tx: &str, ty: &str, at: &Origin, acc: &[String]) -> Result<(), String> {
        let d = self.d;
        let epilogue = self.c.epilogue();
        let dest = if epilogue.is_some() { "%scratch".to_string() } else { self.outs[0].clone() };
        // The batch's product is stored from element batch * m * n on.
        let first = e.imul(&at.batch, (d.m * d.n) as i64);
        let product = e.gep(&dest, &first);
        let coords = |e: &mut Emitter, i: &str, j: &str| -> (String, String) {
            let r = e.imul(i, SIDE as i64);
            let r = e.iadd(&r, ty);
            let c = e.imul(j, SIDE as i64);
            let c = e.iadd(&c, tx);
            (e.iadd(&at.row0, &r), e.iadd(&at.col0, &c))
        };
        for i in 0..EACH {
            for j in 0..EACH {
                let (ci, cj) = (e_i64(e, i), e_i64(e, j));
                let (row, col) = coords(e, &ci, &cj);
                self.if_inside(e, &row, &col, &mut |e, off| {
                    let to = e.gep(&product, off);
                    e.store(&acc[i * EACH + j], &to, Lanes(1));
                    Ok(())
                })?;
            }
        }
        let Some((ep, used)) = epilogue else { return Ok(()) };
        // Each element's epilogue reads back the result this thread has just written, at its
        // place in the epilogue's own rows (the last dim of the result).
        let ins: Vec<String> =
            std::iter::once(Ok(dest)).chain(used.iter().map(|&i| self.operand(i))).collect::<Result<_, String>>()?;
        let (lo, hi) = (e.i64c(0), e_i64(e, EACH * EACH));
        let q = self.open_loop(e, &lo, &hi, 1);
        let (i, j) = (self.div(e, &q, EACH), self.rem(e, &q, EACH));
        let (row, col) = coords(e, &i, &j);
        self.if_inside(e, &row, &col, &mut |e, off| {
            let flat = e.iadd(&first, off);
            let (er, ec) = (self.div(e, &flat, ep.cols), self.rem(e, &flat, ep.cols));
            e.row(ep, &er, &ins, &self.outs, Some(&ec))
        })?;
        self.close_loop(e);
        Ok(())
    }

    /// `body(e, row * n + col)` where element (row, col) is inside the block's product.
    fn if_inside(
        &self,
        e: &mut Emitter,
        row: &str,
        col: &str,
        body: &mut dyn FnMut(&mut Emitter, &str) -> Result<(), String>,
    ) -> Result<(), String> {
        let d = self.d;
        let inside = self.inside(e, row, d.m, col, d.n);
        e.line(&format!("scf.if {inside} {{"));
        e.depth += 1;
        let off = e.imul(row, d.n as i64);
        let off = e.iadd(&off, col);
        body(e, &off)?;
        e.depth -= 1;
        e.line("}");
        Ok(())
    }

    fn operand(&self, i: usize) -> Result<String, String> {
        self.ins.get(i).cloned().ok_or_else(|| format!("the kernel reads operand {i} of {}", self.ins.len()))
    }
}
