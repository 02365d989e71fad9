//! Compiled GPU kernels as sessions run them: what each reads and writes, described by the
//! compile half from its plan, and the driver that checks its operands and prepares their
//! buffers for the device.

use crate::device::{download, upload, Buffer, GpuCode, Launch, THREADS_PER_BLOCK};
use crate::tensor::{elements, GpuTensor};
use graphc_ir::TensorType;
use graphc_runtime::{DeviceKernel, DeviceTensor, Kernel, Operands, Tensor};
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

/// What one launch of a kernel needs, from its description: the launch, and the elements
/// each result has.
struct Sized {
    lens: Vec<usize>,
    scratch: usize,
    threads: usize,
}

impl GpuLoopKernel {
    /// The launch's sizes; an error when the description does not hold together.
    fn sized(&self) -> Result<Sized, String> {
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
        Ok(Sized { lens, scratch, threads })
    }

    /// Checks that there are as many operands as inputs, each of the input's type.
    fn check_types(&self, types: impl ExactSizeIterator<Item = TensorType>) -> Result<(), String> {
        if types.len() != self.inputs.len() {
            return Err(format!("{} operands where the kernel takes {}", types.len(), self.inputs.len()));
        }
        for (i, (t, input)) in types.zip(&self.inputs).enumerate() {
            if t != input.ty {
                return Err(format!("compiled kernel input {i} is {t} where the kernel was compiled for {}", input.ty));
            }
        }
        Ok(())
    }

    /// Checks that each input's buffer (of `lens` elements) holds what the kernel reads of it.
    fn check_reach(&self, lens: &[usize]) -> Result<(), String> {
        if self.reach.len() != lens.len() {
            return Err(format!("the kernel knows the reach of {} inputs of {}", self.reach.len(), lens.len()));
        }
        for (i, (&len, &reach)) in lens.iter().zip(&self.reach).enumerate() {
            if len < reach {
                return Err(format!("GPU kernel input {i} has {len} elements where the kernel reads {reach}"));
            }
        }
        Ok(())
    }

    /// Launches the kernel on buffers in the device's memory, checked against its
    /// description; its results are left there.
    fn launch(&self, size: &Sized, inputs: &[&Buffer]) -> Result<Vec<Buffer>, String> {
        self.check_reach(&inputs.iter().map(|b| b.len).collect::<Vec<_>>())?;
        self.code.launch(
            &Launch {
                function: &self.function,
                outputs: &size.lens,
                scratch: size.scratch,
                rows: self.rows,
                threads: size.threads,
            },
            inputs,
        )
    }
}

impl Kernel for GpuLoopKernel {
    /// Runs the kernel on a node's operands on the host: copies them in, and its results
    /// back. An error when they are not what it was compiled for, or when the device fails.
    /// A kernel with no threads (an empty view) launches nothing: its results are zeros.
    fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let all = operands.all();
        self.check_types(all.iter().map(|t| t.ty()))?;
        let size = self.sized()?;
        let outs = if size.threads == 0 {
            size.lens.iter().map(|&len| vec![0.0; len]).collect()
        } else {
            let host = all
                .iter()
                .zip(&self.inputs)
                .enumerate()
                .map(|(i, (t, input))| f32_input(i, t, input, &self.out))
                .collect::<Result<Vec<_>, _>>()?;
            let on_device = host.iter().map(|x| upload(x)).collect::<Result<Vec<_>, _>>()?;
            let outs = self.launch(&size, &on_device.iter().collect::<Vec<_>>())?;
            outs.iter().map(download).collect::<Result<Vec<_>, _>>()?
        };
        outs.into_iter().zip(&self.results).map(|(v, (ty, _))| Tensor::from_f32(v, ty)).collect()
    }

    /// The kernel on tensors kept on the GPU, unless an input must first be expanded to the
    /// kernel's shape (a broadcast its indexing cannot express), which happens on the host.
    fn on_device(self: Arc<Self>) -> Option<Arc<dyn DeviceKernel>> {
        if self.inputs.iter().any(|i| i.materialize) {
            return None;
        }
        Some(self)
    }
}

impl DeviceKernel for GpuLoopKernel {
    fn run(&self, operands: &[Arc<dyn DeviceTensor>]) -> Result<Vec<Arc<dyn DeviceTensor>>, String> {
        let tensors = operands
            .iter()
            .enumerate()
            .map(|(i, d)| {
                d.as_any().downcast_ref::<GpuTensor>().ok_or_else(|| format!("GPU kernel input {i} is not on the GPU"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.check_types(tensors.iter().map(|t| t.ty()))?;
        let size = self.sized()?;
        let inputs: Vec<&Buffer> = tensors.iter().map(|t| t.buffer()).collect();
        let outs = self.launch(&size, &inputs)?;
        Ok(outs.into_iter().zip(&self.results).map(|(b, (ty, _))| GpuTensor::boxed(b, ty.clone())).collect())
    }
}

/// An f32 input as one contiguous buffer, expanded to the output shape when the kernel says.
fn f32_input<'t>(i: usize, t: &'t Tensor, input: &GpuInput, out: &TensorType) -> Result<Cow<'t, [f32]>, String> {
    t.f32_elements(input.materialize.then_some(out)).map_err(|e| format!("GPU kernel input {i}: {e}"))
}
