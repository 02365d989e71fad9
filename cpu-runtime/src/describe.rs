//! Plans as the run half sees them: the buffers each kernel reads and writes, from its plan.

use crate::concat::ConcatKernel;
use crate::conv::ConvKernel;
use crate::copy::{CopyKernel, GatherKernel};
use crate::entry::{Entry, Extents};
use crate::kernel::{ColumnKernel, LoopInput, LoopKernel, MatMulKernel};
use crate::node::CpuKernel;
use crate::pool::PoolKernel;
use graphc_plan::{ColumnPlan, Epilogue, InputMap, KernelPlan, LoopPlan, MatMulPlan};

/// The elements a loop kernel touches in each buffer, from its plan.
pub fn extents(p: &LoopPlan) -> Extents {
    let (rows, cols) = (p.rows, p.cols);
    let reach = |m: &InputMap| {
        let last = (rows.saturating_sub(1) as i64) * m.row_stride + (cols.saturating_sub(1) as i64) * m.col_stride;
        last.max(0) as usize + 1
    };
    Extents {
        rows,
        ins: p.inputs.iter().map(reach).collect(),
        outs: p.per_row.iter().map(|&r| if r { rows } else { rows * cols }).collect(),
        scratch: p.cached.len() * cols,
        in_place: p.overwritable(),
    }
}

/// The loop kernel of `p`, running `entry` (generated from `p`).
pub fn loop_kernel(p: &LoopPlan, entry: Entry) -> LoopKernel {
    LoopKernel {
        rows: p.rows,
        cols: p.cols,
        inputs: p
            .inputs
            .iter()
            .zip(&p.input_types)
            .map(|(m, ty)| LoopInput { ty: ty.clone(), materialize: m.materialize, offset: m.view.unwrap_or(0) })
            .collect(),
        out: p.out.clone(),
        results: (0..p.results.len()).map(|k| (p.result_type(k), p.per_row[k])).collect(),
        overwritable: p.overwritable(),
        entry,
    }
}

/// The matrix-product kernel of `p`, with `epilogue` generated from its epilogue's plan; its
/// factors stored as the plan's flags say (the run half checks each against that shape).
pub fn matmul_kernel(p: &MatMulPlan, epilogue: Option<Entry>) -> Result<MatMulKernel, String> {
    let epilogue = self::epilogue(&p.epilogue, epilogue, "matmul")?;
    Ok(MatMulKernel { product: p.product(), lhs: p.lhs, rhs: p.rhs, batch: p.batch.clone(), epilogue })
}

/// A kernel's epilogue, running `code` (generated from its plan); an error when plan and code
/// do not come together.
fn epilogue(
    plan: &Option<Epilogue>,
    code: Option<Entry>,
    what: &str,
) -> Result<Option<(LoopKernel, Vec<usize>)>, String> {
    match (plan, code) {
        (Some((lp, used)), Some(e)) => Ok(Some((loop_kernel(lp, e), used.clone()))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(format!("a {what} epilogue without code")),
        (None, Some(_)) => Err(format!("code for a {what} without an epilogue")),
    }
}

/// The column-reduction kernel of `p` (no generated code: the run half's loop).
pub fn column_kernel(p: &ColumnPlan) -> ColumnKernel {
    ColumnKernel {
        mean: p.op == graphc_ir::Op::ReduceMean,
        batch: p.batch,
        rows: p.rows,
        cols: p.cols,
        input: p.input.clone(),
        out: p.out.clone(),
    }
}

/// The run half's kernel for `plan`, running `entry` (generated from the plan's loop, where it
/// has one).
pub fn kernel(plan: &KernelPlan, entry: Option<Entry>) -> Result<CpuKernel, String> {
    Ok(match (plan, entry) {
        (KernelPlan::Loop(p), Some(entry)) => CpuKernel::Loop(loop_kernel(p, entry)),
        (KernelPlan::MatMul(p), epilogue) => CpuKernel::MatMul(matmul_kernel(p, epilogue)?),
        (KernelPlan::Columns(p), None) => CpuKernel::Columns(column_kernel(p)),
        (KernelPlan::Conv(p), epilogue) => CpuKernel::Conv(ConvKernel {
            x: p.x,
            w: p.w,
            epilogue: self::epilogue(&p.epilogue, epilogue, "conv")?,
            geometry: p.geometry.clone(),
        }),
        (KernelPlan::Pool(p), None) => CpuKernel::Pool(PoolKernel { plan: p.clone() }),
        (KernelPlan::Concat(p), None) => CpuKernel::Concat(ConcatKernel { plan: p.clone() }),
        (KernelPlan::Copy(p), None) => CpuKernel::Copy(CopyKernel { plan: p.clone() }),
        (KernelPlan::Gather(p), None) => CpuKernel::Gather(GatherKernel { plan: p.clone() }),
        (KernelPlan::Loop(_), None) => return Err("a loop kernel without code".into()),
        (KernelPlan::Pool(_), Some(_)) => return Err("code for a pool".into()),
        (KernelPlan::Concat(_), Some(_)) => return Err("code for a concat".into()),
        (KernelPlan::Copy(_) | KernelPlan::Gather(_), Some(_)) => return Err("code for a copy".into()),
        (KernelPlan::Columns(_), Some(_)) => return Err("code for a column reduction".into()),
    })
}
