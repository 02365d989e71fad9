//! A compiled node: one of the run half's kernels, as sessions run it.

use crate::concat::ConcatKernel;
use crate::conv::ConvKernel;
use crate::copy::{CopyKernel, GatherKernel};
use crate::kernel::{ColumnKernel, LoopKernel, MatMulKernel};
use crate::pool::PoolKernel;
use graphc_runtime::{Kernel, Operands, Tensor};

/// A compiled node.
#[derive(Debug)]
pub enum CpuKernel {
    Loop(LoopKernel),
    MatMul(MatMulKernel),
    Columns(ColumnKernel),
    Conv(ConvKernel),
    Pool(PoolKernel),
    Concat(ConcatKernel),
    Copy(CopyKernel),
    Gather(GatherKernel),
}

impl Kernel for CpuKernel {
    /// Runs the kernel on a node's operands; an error (never an access out of bounds) when
    /// they are not what it was compiled for.
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        match self {
            CpuKernel::Loop(k) => k.run(operands),
            CpuKernel::MatMul(k) => k.run(operands),
            CpuKernel::Columns(k) => k.run(operands),
            CpuKernel::Conv(k) => k.run(operands),
            CpuKernel::Pool(k) => k.run(operands),
            CpuKernel::Concat(k) => k.run(operands),
            CpuKernel::Copy(k) => k.run(operands),
            CpuKernel::Gather(k) => k.run(operands),
        }
    }
}
