//! Compiled GPU kernels as sessions run them: what each reads and writes, described by the
//! compile half from its plan, and the driver that checks its operands and prepares their
//! buffers for the device.

use crate::device::{GpuCode, Launch, THREADS_PER_BLOCK};
use graphc_ir::TensorType;
use graphc_runtime::{Kernel, Operands, Tensor};
use std::borrow::Cow;
use std::sync::Arc;

/// How a kernel's threads cover its `[rows, cols]` view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// One thread per element: `rows * cols` threads.
    PerElement,
    /// One thread per row (a row reduction): `rows` threads.
    PerRow,
    /// This many blocks of [`THREADS_PER_BLOCK`] threads (a tiled product: a block per tile).
    Blocks(usize),
}

/// One input of a GPU loop kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInput {
    /// The type the kernel was compiled for (the shape its indexing assumes).
    pub ty: TensorType,
    /// Expanded to the kernel's full shape before the copy (a broadcast its indexing cannot
    /// express).
    pub materialize: bool,
}

/// A kernel over a `[rows, cols]` view compiled to PTX: a loop kernel (an elementwise fusion,
/// with row reductions) or a tiled matrix product with its epilogue. Its entry point takes a
/// device pointer per input, one per result, the scratch pointer, then `rows` as an i64, and
/// is launched in blocks of [`THREADS_PER_BLOCK`] threads over [`GpuLoopKernel::threads`].
#[derive(Debug)]
pub struct GpuLoopKernel {
    pub rows: usize,
    pub cols: usize,
    pub inputs: Vec<GpuInput>,
    /// The full shape the kernel iterates.
    pub out: TensorType,
    /// Per result: its type, and whether it has one value per row (`[.., 1]`).
    pub results: Vec<(TensorType, bool)>,
    /// f32 elements of scratch each row needs.
    pub scratch_per_row: usize,
    pub threads: Threads,
    pub code: Arc<GpuCode>,
    /// The kernel's name in the PTX (its `.entry`).
    pub function: String,
    /// Per input: one past the last element its code reads over all rows (from its plan: a
    /// loop plan's strides, a product's factor sizes), checked against the buffer before each
    /// launch.
    pub reach: Vec<usize>,
}

impl Kernel for GpuLoopKernel {
    /// Runs the kernel on a node's operands; an error when they are not what it was compiled
    /// for, or when the device fails. A kernel with no threads (an empty view) launches
    /// nothing: its results are zeros.
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let all = operands.all();
        if all.len() != self.inputs.len() {
            return Err(format!("{} operands where the kernel takes {}", all.len(), self.inputs.len()));
        }
        for (i, (t, input)) in all.iter().zip(&self.inputs).enumerate() {
            check_type(i, t, &input.ty)?;
        }
        let (rows, cols) = (self.rows, self.cols);
        let n =
            rows.checked_mul(cols).ok_or_else(|| format!("a [{rows}, {cols}] view has more elements than memory"))?;
        if elements(&self.out) != Some(n) {
            return Err(format!("the kernel iterates {} but describes a [{rows}, {cols}] view", self.out));
        }
        let lens: Vec<usize> = self.results.iter().map(|&(_, per_row)| if per_row { rows } else { n }).collect();
        for (k, ((ty, _), &len)) in self.results.iter().zip(&lens).enumerate() {
            if elements(ty) != Some(len) {
                return Err(format!("kernel result {k} is {ty} where the kernel writes {len} elements"));
            }
        }
        let scratch = rows
            .checked_mul(self.scratch_per_row)
            .ok_or_else(|| format!("{rows} rows of {} scratch elements are more than memory", self.scratch_per_row))?;
        let threads = match self.threads {
            Threads::PerElement => n,
            Threads::PerRow => rows,
            Threads::Blocks(b) => b
                .checked_mul(THREADS_PER_BLOCK)
                .ok_or_else(|| format!("{b} blocks of {THREADS_PER_BLOCK} threads are more than a launch can have"))?,
        };
        let outs = if threads == 0 {
            lens.iter().map(|&len| vec![0.0; len]).collect()
        } else {
            let host = all
                .iter()
                .zip(&self.inputs)
                .enumerate()
                .map(|(i, (t, input))| f32_input(i, t, input, &self.out))
                .collect::<Result<Vec<_>, _>>()?;
            let inputs: Vec<&[f32]> = host.iter().map(|c| &**c).collect();
            if self.reach.len() != inputs.len() {
                return Err(format!("the kernel knows the reach of {} inputs of {}", self.reach.len(), inputs.len()));
            }
            for (i, (buf, &reach)) in inputs.iter().zip(&self.reach).enumerate() {
                if buf.len() < reach {
                    return Err(format!(
                        "GPU kernel input {i} has {} elements where the kernel reads {reach}",
                        buf.len()
                    ));
                }
            }
            self.code.launch(&Launch {
                function: &self.function,
                inputs: &inputs,
                outputs: &lens,
                scratch,
                rows,
                threads,
            })?
        };
        outs.into_iter().zip(&self.results).map(|(v, (ty, _))| Tensor::from_f32(v, ty)).collect()
    }
}

/// An f32 input as one contiguous buffer, expanded to the output shape when the kernel says.
fn f32_input<'t>(i: usize, t: &'t Tensor, input: &GpuInput, out: &TensorType) -> Result<Cow<'t, [f32]>, String> {
    t.f32_elements(input.materialize.then_some(out)).map_err(|e| format!("GPU kernel input {i}: {e}"))
}

/// Whether operand `i` has the type the kernel was made for (the shapes its indexing assumes).
fn check_type(i: usize, t: &Tensor, ty: &TensorType) -> Result<(), String> {
    if t.ty() != *ty {
        return Err(format!("compiled kernel input {i} is {} where the kernel was compiled for {ty}", t.ty()));
    }
    Ok(())
}

/// A type's element count, when it fits in memory's indices.
fn elements(ty: &TensorType) -> Option<usize> {
    ty.shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}
