//! Data movement into the session's pooled buffers ([`CopyPlan`], [`GatherPlan`]): each
//! result's box copied run by run (a run of input elements with stride one is one
//! `copy_from_slice`), a reshape's buffer handed over when nobody else holds it, a pad's
//! result filled with its value first. Copies move bits, so results are the reference's
//! exactly, NaN payloads included.

use crate::kernel::check_type;
use graphc_ir::{DType, TensorType};
use graphc_plan::{CopyPart, CopyPlan, GatherPlan};
use graphc_runtime::tensor::Element;
use graphc_runtime::{Operands, Tensor};
use std::borrow::Cow;

/// The copy a [`CopyPlan`] planned.
#[derive(Debug)]
pub struct CopyKernel {
    pub plan: CopyPlan,
}

/// The gather a [`GatherPlan`] planned.
#[derive(Debug)]
pub struct GatherKernel {
    pub plan: GatherPlan,
}

/// Appends the box `dims` of `x` from `base`, in row-major order of the box.
fn append<T: Copy>(out: &mut Vec<T>, x: &[T], dims: &[usize], strides: &[usize], base: usize) {
    match (dims, strides) {
        ([n], [1]) => out.extend_from_slice(&x[base..base + n]),
        ([n], [0]) => out.extend(std::iter::repeat_n(x[base], *n)),
        ([n], [s]) => out.extend(x[base..].iter().step_by(*s).take(*n)),
        ([n, rest @ ..], [s, inner @ ..]) => {
            for i in 0..*n {
                append(out, x, rest, inner, base + i * s);
            }
        }
        _ => {}
    }
}

/// Writes the box `dims` of `x` (from `from`, strides `ins`) into `out` (from `to`, strides
/// `outs`).
fn place<T: Copy>(out: &mut [T], to: usize, outs: &[usize], x: &[T], from: usize, ins: &[usize], dims: &[usize]) {
    match (dims, ins, outs) {
        ([n], [1], [1]) => out[to..to + n].copy_from_slice(&x[from..from + n]),
        ([n], [0], [o]) => out[to..].iter_mut().step_by(*o).take(*n).for_each(|y| *y = x[from]),
        ([n], [i], [o]) => {
            for (y, v) in out[to..].iter_mut().step_by(*o).zip(x[from..].iter().step_by(*i).take(*n)) {
                *y = *v;
            }
        }
        ([n, dims @ ..], [i, ins @ ..], [o, outs @ ..]) => {
            for k in 0..*n {
                place(out, to + k * o, outs, x, from + k * i, ins, dims);
            }
        }
        _ => {}
    }
}

impl CopyKernel {
    pub fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        let want = if p.fill { 2 } else { 1 };
        if operands.len() != want {
            return Err(format!("{} operands where the {} takes {want}", operands.len(), p.op.name()));
        }
        let input = operands.get(0).ok_or("the copy's input is missing")?;
        check_type(0, input, &p.input)?;
        let in_len = p.input.num_elements().unwrap_or(0) as usize;
        // The plan's reach was checked against its types; checked again against the buffers.
        let bad = |q: &CopyPart| q.in_reach() > in_len || q.out_reach() > q.len() || q.out_strides.contains(&0);
        if let Some(part) = p.parts.iter().find(|q| bad(q)) {
            return Err(format!("a copy reaching past its buffers: {part:?}"));
        }
        if p.input.dtype != DType::F32 {
            return self.run_any(operands);
        }
        if let [part] = &p.parts[..] {
            if !p.fill && part.is_whole(in_len) {
                if let Some(v) = operands.take_f32(0) {
                    return Ok(vec![Tensor::from_f32(v, &part.out)?]);
                }
            }
        }
        let fill = if p.fill {
            let f = operands.get(1).ok_or("the pad's value is missing")?;
            match &*f.f32_elements(None)? {
                [v] => Some(*v),
                other => return Err(format!("the pad's value has {} elements, not 1", other.len())),
            }
        } else {
            None
        };
        let x = operands.get(0).ok_or("the copy's input is missing")?.f32_elements(None)?;
        if x.len() != in_len {
            return Err(format!("the copy's input has {} elements where its type has {in_len}", x.len()));
        }
        let mut results = Vec::with_capacity(p.parts.len());
        for part in &p.parts {
            results.push(Tensor::from_f32(copy(operands.alloc_f32(part.len())?, part, &x, fill)?, &part.out)?);
        }
        Ok(results)
    }

    /// The copy of a tensor of another dtype than f32 (a transformer's masks and positions:
    /// bool, i64), into new buffers (the session's pool holds f32 ones).
    fn run_any(&self, operands: &Operands<'_>) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        let input = operands.get(0).ok_or("the copy's input is missing")?;
        let fill = if p.fill { Some(operands.get(1).ok_or("the pad's value is missing")?) } else { None };
        graphc_runtime::each_dtype!(input, a => p.parts.iter().map(|part| copy_any(a, fill, part)).collect())
    }
}

/// One part's result from `x` (of the plan's input type, checked), a pad's box placed in its
/// value `fill` (a scalar of `x`'s dtype).
fn copy_any<T: Element>(x: &ndarray::ArrayD<T>, fill: Option<&Tensor>, part: &CopyPart) -> Result<Tensor, String>
where
    Tensor: From<ndarray::ArrayD<T>>,
{
    let fill = match fill {
        None => None,
        Some(f) => match T::array(f).map(|f| f.as_slice()) {
            Some(Some(&[v])) => Some(v),
            _ => return Err(format!("the pad's value is {}, not a scalar of its input's dtype", f.ty())),
        },
    };
    let out = graphc_runtime::tensor::try_vec(part.len() as u64, &part.out)?;
    array(&part.out, copy(out, part, &row_major_slice(x)?, fill)?)
}

/// One part's result, into `out` (empty, with room for it). Without a pad's value the box is
/// the whole result in row-major order (the plan's promise, checked here by count): appended
/// in order, so the buffer is not cleared first. With one, filled, then the box placed.
fn copy<T: Copy>(mut out: Vec<T>, part: &CopyPart, x: &[T], fill: Option<T>) -> Result<Vec<T>, String> {
    let len = part.len();
    match fill {
        None => append(&mut out, x, &part.dims, &part.in_strides, part.in_offset),
        Some(v) => {
            out.resize(len, v);
            place(&mut out, part.out_offset, &part.out_strides, x, part.in_offset, &part.in_strides, &part.dims);
        }
    }
    if out.len() != len {
        return Err(format!("the copy wrote {} elements where its result has {len}", out.len()));
    }
    Ok(out)
}

impl GatherKernel {
    pub fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        if operands.len() != 2 {
            return Err(format!("{} operands where the gather takes 2", operands.len()));
        }
        let (data, indices) = (operands.get(0).ok_or("no data")?, operands.get(1).ok_or("no indices")?);
        check_type(0, data, &p.data)?;
        check_type(1, indices, &p.indices)?;
        let picked = graphc_runtime::kernels::resolve_indices("gather", indices, p.axis, p.n).map_err(|e| e.0)?;
        let len = p.outer * picked.len() * p.inner;
        if data.len() != p.outer * p.n * p.inner || p.out.num_elements() != Some(len as u64) {
            return Err(format!(
                "a gather of {} by {} into {} does not match its plan",
                data.ty(),
                indices.ty(),
                p.out
            ));
        }
        if p.data.dtype != DType::F32 {
            return graphc_runtime::each_dtype!(data, a => self.gather_any(a, &picked).map(|t| vec![t]));
        }
        let x = data.f32_elements(None)?;
        let mut out = operands.alloc_f32(len)?;
        self.gather_into(&mut out, &x, &picked);
        Ok(vec![Tensor::from_f32(out, &p.out)?])
    }

    /// Appends the rows `picked` of `x` (the data, in row-major order) to `out`.
    fn gather_into<T: Copy>(&self, out: &mut Vec<T>, x: &[T], picked: &[usize]) {
        let p = &self.plan;
        for o in 0..p.outer {
            for &i in picked {
                let at = (o * p.n + i) * p.inner;
                out.extend_from_slice(&x[at..at + p.inner]);
            }
        }
    }

    /// The gather of data of another dtype than f32 (a mask's rows), into a new buffer.
    fn gather_any<T: Element>(&self, x: &ndarray::ArrayD<T>, picked: &[usize]) -> Result<Tensor, String>
    where
        Tensor: From<ndarray::ArrayD<T>>,
    {
        let mut out =
            graphc_runtime::tensor::try_vec((self.plan.outer * picked.len() * self.plan.inner) as u64, &self.plan.out)?;
        self.gather_into(&mut out, &row_major_slice(x)?, picked);
        array(&self.plan.out, out)
    }
}

/// `x`'s elements in row-major order, borrowed where they lie so.
fn row_major_slice<T: Clone>(x: &ndarray::ArrayD<T>) -> Result<Cow<'_, [T]>, String> {
    Ok(match x.as_slice() {
        Some(x) => Cow::Borrowed(x),
        None => Cow::Owned(graphc_runtime::tensor::row_major(x.view()).map_err(|e| e.to_string())?),
    })
}

/// A tensor of type `ty` holding `v`.
fn array<T>(ty: &TensorType, v: Vec<T>) -> Result<Tensor, String>
where
    Tensor: From<ndarray::ArrayD<T>>,
{
    let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
    Ok(Tensor::from(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), v).map_err(|e| e.to_string())?))
}
