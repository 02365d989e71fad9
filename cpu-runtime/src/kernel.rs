//! Compiled kernels as sessions run them: what each reads and writes, described by the
//! compile half from its plan, and the driver that feeds it its operands' buffers.

use crate::entry::{self, Entry, In, Product};
use crate::rows::{row_blocks, with_scratch, PARALLEL_ELEMENTS, PARALLEL_FLOPS};
use graphc_ir::{DType, TensorType};
use graphc_plan::Batch;
use graphc_runtime::{Operands, Tensor};
use rayon::prelude::*;
use smallvec::{smallvec, SmallVec};
use std::borrow::Cow;

/// One input of a loop kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopInput {
    /// The type the kernel was compiled for (the shape its strides assume).
    pub ty: TensorType,
    /// Expanded to the kernel's full shape before the call (a broadcast its strides cannot
    /// express).
    pub materialize: bool,
    /// A view of its operand (a slice, a gather of one index): the kernel reads the buffer
    /// from this element on (0 for any other input); the entry checks its extent from there.
    pub offset: usize,
}

/// A loop kernel (an elementwise fusion, with row reductions) over a `[rows, cols]` view.
#[derive(Debug)]
pub struct LoopKernel {
    pub rows: usize,
    pub cols: usize,
    pub inputs: Vec<LoopInput>,
    /// The full shape the kernel iterates.
    pub out: TensorType,
    /// Per result: its type, and whether it has one value per row (`[.., 1]`).
    pub results: Vec<(TensorType, bool)>,
    /// The inputs a full result may be written over, should this be their last use.
    pub overwritable: Vec<usize>,
    pub entry: Entry,
}

/// A matrix product of operands `lhs` and `rhs` (its sizes and how its factors are stored:
/// the product reads a transposed one through swapped strides, and each operand is checked
/// against its stored shape), and its elementwise epilogue: a loop kernel whose input 0 is the
/// product, and whose other inputs are the operands listed.
#[derive(Debug)]
pub struct MatMulKernel {
    pub product: Product,
    pub lhs: usize,
    pub rhs: usize,
    /// A product of factors of rank above 2: one product per batch index, each factor's
    /// matrix at its offset.
    pub batch: Option<Batch>,
    pub epilogue: Option<(LoopKernel, Vec<usize>)>,
}

/// A sum (or mean) of an f32 input viewed as `[batch, rows, cols]` down its rows: one result
/// per batch index and column, each summed in row order in f64 from -0, as the reference
/// kernel sums, so the results are the reference's bit for bit.
#[derive(Debug)]
pub struct ColumnKernel {
    pub mean: bool,
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
    pub input: TensorType,
    pub out: TensorType,
}

/// An f32 input as one contiguous buffer, expanded to the output shape when the kernel says;
/// a bool one (a mask) as f32 0 and 1, which the kernel compares with 0; an error unless it
/// has the type the kernel was made for.
fn f32_input<'t>(i: usize, t: &'t Tensor, input: &LoopInput, out: &TensorType) -> Result<Cow<'t, [f32]>, String> {
    check_type(i, t, &input.ty)?;
    let to = input.materialize.then_some(out);
    let read = match t {
        Tensor::Bool(a) => {
            Tensor::F32(a.mapv(|b| f32::from(u8::from(b)))).f32_elements(to).map(|c| Cow::Owned(c.into_owned()))
        }
        _ => t.f32_elements(to),
    };
    read.map_err(|e| format!("input {i}: {e}"))
}

/// What the kernel reads of input `i`: its elements from the view's offset on.
fn from_offset<'c>(i: usize, c: &'c [f32], input: &LoopInput) -> Result<&'c [f32], String> {
    c.get(input.offset..)
        .ok_or_else(|| format!("input {i} has {} elements; its view begins at {}", c.len(), input.offset))
}

/// Whether operand `i` has the type the kernel was made for (the shapes its strides assume).
pub(crate) fn check_type(i: usize, t: &Tensor, ty: &TensorType) -> Result<(), String> {
    if !t.is_of(ty) {
        return Err(format!("compiled kernel input {i} is {} where the kernel was compiled for {ty}", t.ty()));
    }
    Ok(())
}

/// A kernel's one result.
fn one_result(v: Vec<f32>, ty: &TensorType) -> Result<Vec<Tensor>, String> {
    Ok(vec![Tensor::from_f32(v, ty)?])
}

impl LoopKernel {
    pub fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let n = self.rows * self.cols;
        if operands.len() != self.inputs.len() {
            return Err(format!("{} operands where the kernel takes {}", operands.len(), self.inputs.len()));
        }
        for (i, input) in self.inputs.iter().enumerate() {
            if let Some(t) = operands.get(i) {
                check_type(i, t, &input.ty)?;
            }
        }
        // Each result goes over an input read here for the last time when there is one (the
        // buffer plan's in-place reuse), else into a buffer from the session's pool.
        let mut over: SmallVec<[Option<usize>; 8]> = smallvec![None; self.inputs.len()];
        let mut outs: SmallVec<[Vec<f32>; 2]> = SmallVec::with_capacity(self.results.len());
        for (k, &(_, per_row)) in self.results.iter().enumerate() {
            if per_row {
                outs.push(operands.alloc_f32(self.rows)?);
                continue;
            }
            let taken = self
                .overwritable
                .iter()
                .filter(|&&i| over[i].is_none())
                .find_map(|&i| Some((i, operands.take_f32(i)?)));
            outs.push(match taken {
                Some((i, v)) if v.len() == n => {
                    over[i] = Some(k);
                    v
                }
                Some((i, v)) => return Err(format!("input {i} has {} elements where the kernel reads {n}", v.len())),
                None => operands.alloc_f32(n)?,
            });
        }
        let owned = (0..self.inputs.len())
            .map(|i| match over[i] {
                Some(_) => Ok(None),
                None => {
                    let t = operands.get(i).ok_or_else(|| format!("compiled kernel input {i} is missing"))?;
                    f32_input(i, t, &self.inputs[i], &self.out).map(Some)
                }
            })
            .collect::<Result<SmallVec<[_; 4]>, String>>()?;
        let ins: SmallVec<[In<'_>; 8]> = owned
            .iter()
            .zip(&over)
            .enumerate()
            .map(|(i, (c, o))| match (c, o) {
                (_, Some(k)) => Ok(In::Output(*k)),
                (Some(c), None) => from_offset(i, c, &self.inputs[i]).map(In::Slice),
                (None, None) => unreachable!("every input is owned or overwritten"),
            })
            .collect::<Result<_, String>>()?;
        let blocks = row_blocks(self.rows, n >= PARALLEL_ELEMENTS && self.rows > 1);
        self.entry.run(&ins, &mut outs, &blocks, |len, f| with_scratch(len, f))?;
        outs.into_iter().zip(&self.results).map(|(v, (ty, _))| Tensor::from_f32(v, ty)).collect()
    }
}

impl MatMulKernel {
    pub fn run(&self, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
        let contiguous = |i: usize, [rows, cols]: [usize; 2]| -> Result<Cow<'_, [f32]>, String> {
            match operands.get(i) {
                Some(t @ Tensor::F32(a)) => {
                    if a.shape() != [rows, cols] {
                        check_type(i, t, &TensorType::new(DType::F32, [rows as u64, cols as u64]))?;
                    }
                    Ok(a.as_slice().map(Cow::Borrowed).unwrap_or_else(|| Cow::Owned(a.iter().copied().collect())))
                }
                Some(t) => Err(format!("matmul operand {i} is {}, not f32", t.dtype())),
                None => Err(format!("matmul operand {i} is missing")),
            }
        };
        let product = self.product;
        let (m, k, n) = (product.m, product.k, product.n);
        let Some(batch) = &self.batch else {
            // Each factor as stored (a transposed one too: the product reads it through its
            // strides), checked against the shape the plan stored it in.
            let (a, b) = (contiguous(self.lhs, product.lhs_shape())?, contiguous(self.rhs, product.rhs_shape())?);
            // One row splits its columns across threads ([`entry::matmul`]'s row loops).
            let parallel = m * n * k >= PARALLEL_FLOPS && graphc_runtime::may_split();
            let mut c: Vec<f32> = operands.alloc_f32(m * n)?;
            entry::matmul(&a, &b, &mut c, product, if parallel { rayon::current_num_threads() } else { 1 })?;
            return match &self.epilogue {
                None => one_result(c, &TensorType::new(DType::F32, [m as u64, n as u64])),
                Some((lk, used)) => run_epilogue(lk, used, operands, c, parallel),
            };
        };
        let factor = |i: usize, ty: &TensorType| -> Result<Cow<'_, [f32]>, String> {
            let t = operands.get(i).ok_or_else(|| format!("matmul operand {i} is missing"))?;
            check_type(i, t, ty)?;
            t.f32_elements(None).map_err(|e| format!("matmul operand {i}: {e}"))
        };
        let (a, b) = (factor(self.lhs, &batch.lhs)?, factor(self.rhs, &batch.rhs)?);
        let count = batch.count();
        let (mk, kn, mn) = (m * k, k * n, m * n);
        // Every product's factors inside their buffers, and the result's size the plan's.
        let last = batch.offsets(count.saturating_sub(1));
        let inside = batch.dims.iter().all(|&d| d > 0) && last.0 + mk <= a.len() && last.1 + kn <= b.len();
        if !inside || batch.out.num_elements() != Some((count * mn) as u64) {
            return Err(format!(
                "a batched product of {} by {} into {} reaching past them",
                batch.lhs, batch.rhs, batch.out
            ));
        }
        let flops = count * mn * k;
        let parallel = flops >= PARALLEL_FLOPS && graphc_runtime::may_split();
        let mut c: Vec<f32> = operands.alloc_f32_filled(count * mn)?;
        if parallel && count >= rayon::current_num_threads() {
            // Whole products to each thread.
            c.par_chunks_mut(mn).enumerate().try_for_each(|(i, out)| {
                let (ao, bo) = batch.offsets(i);
                entry::matmul_into(&a[ao..ao + mk], &b[bo..bo + kn], out, product, 1)
            })?;
        } else {
            let threads = if parallel { rayon::current_num_threads() } else { 1 };
            for (i, out) in c.chunks_mut(mn).enumerate() {
                let (ao, bo) = batch.offsets(i);
                entry::matmul_into(&a[ao..ao + mk], &b[bo..bo + kn], out, product, threads)?;
            }
        }
        match &self.epilogue {
            None => one_result(c, &batch.out),
            Some((lk, used)) => run_epilogue(lk, used, operands, c, parallel),
        }
    }
}

/// Runs a product's epilogue `lk` (input 0 the product `c`, the others the operands `used`)
/// over its rows: in place over the product when it has one result, else into pooled buffers.
pub(crate) fn run_epilogue(
    lk: &LoopKernel,
    used: &[usize],
    operands: &Operands<'_>,
    c: Vec<f32>,
    parallel: bool,
) -> Result<Vec<Tensor>, String> {
    let extra = used
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let t = operands.get(i).ok_or_else(|| format!("compiled kernel input {i} is missing"))?;
            let input = lk.inputs.get(j + 1).ok_or("an epilogue input the kernel does not have")?;
            f32_input(i, t, input, &lk.out)
        })
        .collect::<Result<SmallVec<[_; 4]>, _>>()?;
    let blocks = row_blocks(lk.rows, parallel);
    let scratch = |len: usize, f: &mut dyn FnMut(&mut [f32])| with_scratch(len, f);
    let rest = (extra.iter().enumerate())
        .map(|(j, x)| from_offset(used[j], x, &lk.inputs[j + 1]).map(In::Slice))
        .collect::<Result<SmallVec<[_; 4]>, String>>()?;
    if lk.results.len() == 1 {
        // One result: written over the product.
        let mut c = [c];
        let ins: SmallVec<[_; 8]> = std::iter::once(In::Output(0)).chain(rest).collect();
        lk.entry.run(&ins, &mut c, &blocks, scratch)?;
        let [c] = c;
        return one_result(c, &lk.results[0].0);
    }
    let mut outs: SmallVec<[Vec<f32>; 2]> =
        lk.results.iter().map(|_| operands.alloc_f32(c.len())).collect::<Result<_, _>>()?;
    let ins: SmallVec<[_; 8]> = std::iter::once(In::Slice(&c)).chain(rest).collect();
    lk.entry.run(&ins, &mut outs, &blocks, scratch)?;
    drop(ins);
    operands.recycle_f32(c);
    outs.into_iter().zip(&lk.results).map(|(v, (ty, _))| Tensor::from_f32(v, ty)).collect()
}

impl ColumnKernel {
    pub fn run(&self, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
        let (batch, rows, cols) = (self.batch, self.rows, self.cols);
        if operands.len() != 1 {
            return Err(format!("{} operands where the kernel takes 1", operands.len()));
        }
        let all = operands.all();
        let t = all.first().ok_or("compiled kernel input 0 is missing")?;
        check_type(0, t, &self.input)?;
        let x = t.f32_elements(None).map_err(|e| format!("input 0: {e}"))?;
        let n = batch.checked_mul(cols).ok_or("the kernel's result is more than memory")?;
        if Some(x.len()) != n.checked_mul(rows) {
            return Err(format!("input 0 has {} elements where the kernel reads {batch} x {rows} x {cols}", x.len()));
        }
        let mut out = operands.alloc_f32(n)?;
        out.resize(n, 0.0);
        // Columns `c0..` of batch index `b`.
        let sum_columns = |b: usize, c0: usize, dst: &mut [f32]| {
            let x = &x[b * rows * cols..];
            let mut acc = vec![-0.0f64; dst.len()];
            for r in 0..rows {
                let row = &x[r * cols + c0..r * cols + c0 + dst.len()];
                for (a, &v) in acc.iter_mut().zip(row) {
                    *a += f64::from(v);
                }
            }
            for (d, a) in dst.iter_mut().zip(acc) {
                *d = if self.mean { (a / rows as f64) as f32 } else { a as f32 };
            }
        };
        // Column blocks (of each batch index) across the threads: each column is still summed
        // by one thread, in order.
        const BLOCK: usize = 256;
        let blocks = out
            .chunks_mut(cols)
            .enumerate()
            .flat_map(|(b, dst)| dst.chunks_mut(BLOCK).enumerate().map(move |(k, d)| (b, k * BLOCK, d)));
        let parallel = n * rows >= PARALLEL_ELEMENTS && n > BLOCK && graphc_runtime::may_split();
        if parallel {
            use rayon::prelude::*;
            blocks.collect::<Vec<_>>().into_par_iter().for_each(|(b, c0, dst)| sum_columns(b, c0, dst));
        } else {
            blocks.for_each(|(b, c0, dst)| sum_columns(b, c0, dst));
        }
        one_result(out, &self.out)
    }
}
