//! Concats on the GPU: a thread per element of the result, viewed as `[outer, cols]` (`outer`
//! blocks of the operands' rows side by side, `cols` their sum), copies its element from the
//! operand whose rows hold its column. A copy, so bit for bit the CPU's and the reference's,
//! NaN payloads included. The CPU kernel's appending in place (a chain of concats sharing one
//! buffer, [`ConcatPlan::reserve`]) is a host-memory saving the GPU kernel does without: it
//! writes its own result.
//!
//! The same body also comes as a CPU function ([`cpu_twin`]), which the tests run against
//! the reference interpreter on machines without a GPU.

use super::emit::{Emitter, Lanes};
use crate::lower::plan::ConcatPlan;
use graphc_cpu_runtime::Extents;

/// The `[rows, cols]` view the threads cover: the plan's blocks by the result's row of them.
pub fn view(p: &ConcatPlan) -> (usize, usize) {
    (p.outer, p.rows.iter().sum())
}

/// What the kernel reads and writes, as the CPU kernels' extents: each operand's blocks, and
/// the result (its own size, not the reserve of a chain).
pub fn extents(p: &ConcatPlan) -> Extents {
    let (rows, cols) = view(p);
    Extents {
        rows,
        ins: p.rows.iter().map(|&r| r * p.outer).collect(),
        outs: vec![rows * cols],
        scratch: 0,
        in_place: Vec::new(),
    }
}

/// The kernel as a `gpu.func` named `name`: the operands' pointers, the result's, the
/// scratch's (unused) and the block count; thread `t` of the grid copies element `t`.
pub fn gpu_concat_kernel(p: &ConcatPlan, name: &str) -> String {
    Emitter::per_element_gpu(name, p.rows.len(), view(p).1, &mut |e, t, ins, y| element(e, p, t, ins, y))
}

/// The kernel as a CPU function named `name` with the CPU kernels' signature.
pub fn cpu_twin(p: &ConcatPlan, name: &str) -> String {
    Emitter::per_element_twin(name, p.rows.len(), view(p).1, &mut |e, t, ins, y| element(e, p, t, ins, y))
}

/// Element `t` of the result: block `t / cols`, column `t % cols`, from the operand whose rows
/// `[start, start + rows)` hold the column, at `block * rows + column - start`.
fn element(e: &mut Emitter, p: &ConcatPlan, t: &str, ins: &[String], y: &str) {
    let cols = e.i64c(view(p).1 as i64);
    let block = e.op(&format!("arith.divsi {t}, {cols} : i64"));
    let col = e.op(&format!("arith.remsi {t}, {cols} : i64"));
    let out = e.gep(y, t);
    let mut start = 0usize;
    for (x, &rows) in ins.iter().zip(&p.rows) {
        if rows > 0 {
            let (lo, hi) = (e.i64c(start as i64), e.i64c((start + rows) as i64));
            let after = e.op(&format!("arith.cmpi sge, {col}, {lo} : i64"));
            let before = e.op(&format!("arith.cmpi slt, {col}, {hi} : i64"));
            let here = e.op(&format!("arith.andi {after}, {before} : i1"));
            e.line(&format!("scf.if {here} {{"));
            e.depth += 1;
            let base = e.imul(&block, rows as i64);
            let within = e.op(&format!("arith.subi {col}, {lo} : i64"));
            let off = e.iadd(&base, &within);
            let at = e.gep(x, &off);
            let v = e.load(&at, Lanes(1));
            e.store(&v, &out, Lanes(1));
            e.depth -= 1;
            e.line("}");
        }
        start += rows;
    }
}
