//! Loss kernels: softmax cross-entropy against integer labels and mean squared error. Each
//! example's loss is computed in f64 and the losses summed in f64, then rounded once to the
//! result's dtype, so the oracle is at least as accurate as any compiled kernel it checks.

use super::elem::Float;
use super::error::KernelError;
use crate::tensor::Tensor;
use ndarray::{ArrayD, IxDyn};

/// How a loss combines its per-example values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// One value per example.
    None,
    Sum,
    /// The sum over the number of examples (NaN for none).
    Mean,
}

impl Reduction {
    pub fn parse(s: Option<&str>) -> Result<Reduction, KernelError> {
        match s.unwrap_or("mean") {
            "none" => Ok(Reduction::None),
            "sum" => Ok(Reduction::Sum),
            "mean" => Ok(Reduction::Mean),
            other => Err(KernelError::new(format!("reduction \"{other}\" is not one of \"none\", \"sum\", \"mean\""))),
        }
    }
}

/// The per-example losses (of `shape`) reduced as asked, rounded once to `T`.
fn reduce<T: Float>(losses: Vec<f64>, shape: &[usize], reduction: Reduction) -> Result<ArrayD<T>, KernelError> {
    let n = losses.len();
    // Summed from -0, the identity of IEEE addition, as reduce_sum does.
    let sum = || losses.iter().fold(-0.0f64, |acc, &l| acc + l);
    let (shape, values): (&[usize], Vec<T>) = match reduction {
        Reduction::None => (shape, losses.iter().map(|&l| T::from_f64(l)).collect()),
        Reduction::Sum => (&[], vec![T::from_f64(sum())]),
        Reduction::Mean => (&[], vec![T::from_f64(sum() / n as f64)]),
    };
    ArrayD::from_shape_vec(IxDyn(shape), values).map_err(|e| KernelError::new(format!("loss result: {e}")))
}

/// Per row of `logits` (`[..., C]`): `logsumexp(row) - row[label]`, with the row's maximum
/// subtracted before exponentiating. A label outside `[0, C)` is an error naming it.
pub fn softmax_cross_entropy(logits: &Tensor, labels: &Tensor, reduction: Reduction) -> Result<Tensor, KernelError> {
    let labels: Vec<i64> = match labels {
        Tensor::I32(a) => a.iter().map(|&l| l as i64).collect(),
        Tensor::I64(a) => a.iter().copied().collect(),
        other => {
            return Err(KernelError::new(format!(
                "softmax_cross_entropy labels must be i32 or i64, got {}",
                other.dtype()
            )))
        }
    };
    fn run<T: Float>(x: &ArrayD<T>, labels: &[i64], reduction: Reduction) -> Result<ArrayD<T>, KernelError> {
        let shape = x.shape();
        let Some((&classes, batch)) = shape.split_last() else {
            return Err(KernelError::new("softmax_cross_entropy needs logits of rank 1 or more"));
        };
        if batch.iter().product::<usize>() != labels.len() {
            return Err(KernelError::new(format!(
                "softmax_cross_entropy: {} labels for logits of shape {shape:?}",
                labels.len()
            )));
        }
        let x = x.as_standard_layout();
        let xv = x.as_slice().expect("standard layout");
        let mut losses = Vec::with_capacity(labels.len());
        for (b, &label) in labels.iter().enumerate() {
            if label < 0 || label >= classes as i64 {
                return Err(KernelError::new(format!(
                    "softmax_cross_entropy: label {label} (element {b} of the labels) is out of range for {classes} classes; labels are 0..{classes}"
                )));
            }
            let row = &xv[b * classes..(b + 1) * classes];
            let max = row.iter().fold(T::LOWEST, |m, &v| m.max_nan(v)).to_f64();
            let sum = row.iter().fold(0.0f64, |acc, &v| acc + (v.to_f64() - max).exp());
            losses.push(sum.ln() - (row[label as usize].to_f64() - max));
        }
        reduce(losses, batch, reduction)
    }
    match logits {
        Tensor::F32(a) => Ok(Tensor::F32(run(a, &labels, reduction)?)),
        Tensor::F64(a) => Ok(Tensor::F64(run(a, &labels, reduction)?)),
        other => Err(KernelError::new(format!("softmax_cross_entropy is defined on floats, not {}", other.dtype()))),
    }
}

/// `(prediction - target)^2` elementwise (in f64, rounded once), then reduced.
pub fn mean_squared_error(p: &Tensor, t: &Tensor, reduction: Reduction) -> Result<Tensor, KernelError> {
    if p.shape() != t.shape() {
        return Err(KernelError::new(format!(
            "mean_squared_error of shapes {:?} and {:?}: they must be equal",
            p.shape(),
            t.shape()
        )));
    }
    fn run<T: Float>(p: &ArrayD<T>, t: &ArrayD<T>, reduction: Reduction) -> Result<ArrayD<T>, KernelError> {
        let losses: Vec<f64> = p
            .iter()
            .zip(t.iter())
            .map(|(&a, &b)| {
                let d = a.to_f64() - b.to_f64();
                d * d
            })
            .collect();
        reduce(losses, p.shape(), reduction)
    }
    match (p, t) {
        (Tensor::F32(a), Tensor::F32(b)) => Ok(Tensor::F32(run(a, b, reduction)?)),
        (Tensor::F64(a), Tensor::F64(b)) => Ok(Tensor::F64(run(a, b, reduction)?)),
        _ => Err(KernelError::new(format!("mean_squared_error of {} and {}", p.dtype(), t.dtype()))),
    }
}
