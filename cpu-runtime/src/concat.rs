//! Concats into the session's pooled buffers (the reference kernel allocates each result
//! afresh: new pages to fault in and clear every step), appending in place along a chain
//! ([`ConcatPlan::reserve`]): a one-block result whose first operand is this node's to take
//! and has room is that operand's buffer with the other operands copied after it.

use crate::kernel::check_type;
use graphc_plan::ConcatPlan;
use graphc_runtime::{Operands, Tensor};

/// The concat a [`ConcatPlan`] planned.
#[derive(Debug)]
pub struct ConcatKernel {
    pub plan: ConcatPlan,
}

impl ConcatKernel {
    pub fn run(&self, operands: &mut Operands<'_>) -> Result<Vec<Tensor>, String> {
        let p = &self.plan;
        if operands.len() != p.inputs.len() || p.rows.len() != p.inputs.len() {
            return Err(format!("{} operands where the concat takes {}", operands.len(), p.inputs.len()));
        }
        for (i, ty) in p.inputs.iter().enumerate() {
            check_type(i, operands.get(i).ok_or_else(|| format!("concat operand {i} is missing"))?, ty)?;
        }
        let total: usize = p.rows.iter().sum::<usize>() * p.outer;
        let first = if p.outer == 1 { operands.take_f32(0) } else { None };
        let (mut out, skip) = match first {
            Some(v) if v.capacity() >= total => (v, 1),
            first => {
                let mut out = operands.alloc_f32(p.reserve.max(total))?;
                let skip = match first {
                    Some(v) => {
                        out.extend_from_slice(&v);
                        operands.recycle_f32(v);
                        1
                    }
                    None => 0,
                };
                (out, skip)
            }
        };
        let all = operands.all();
        let slices = all[skip..]
            .iter()
            .enumerate()
            .map(|(i, t)| t.f32_elements(None).map_err(|e| format!("input {}: {e}", i + skip)))
            .collect::<Result<Vec<_>, _>>()?;
        let short = |len: usize, i: usize| {
            format!("input {i} has {len} elements where the concat reads {}", p.rows[i] * p.outer)
        };
        if skip == 1 && out.len() != p.rows[0] {
            return Err(short(out.len(), 0));
        }
        if let Some((i, s)) = slices.iter().enumerate().find(|(i, s)| s.len() != p.rows[i + skip] * p.outer) {
            return Err(short(s.len(), i + skip));
        }
        for o in 0..p.outer {
            for (s, &r) in slices.iter().zip(&p.rows[skip..]) {
                out.extend_from_slice(&s[o * r..(o + 1) * r]);
            }
        }
        if out.len() != total {
            return Err(format!("the concat wrote {} elements where its result has {total}", out.len()));
        }
        Ok(vec![Tensor::from_f32(out, &p.out)?])
    }
}
