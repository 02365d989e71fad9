//! The optimizer updates: `apply_sgd`, `apply_momentum`, `apply_adam`, `apply_rmsprop` (SPEC.md
//! section 7 and the op reference). Each locks its variable, accumulators and step count
//! together ([`update_together`]), then updates every buffer in one loop over the elements,
//! in place when nothing else holds it (`Arc::make_mut`), else on a copy, so a snapshot or a
//! read still live keeps the value it saw. The arithmetic is in the variable's dtype, as the
//! same formula written with elementwise ops computes it.

use crate::error::RunError;
use crate::state::{update_together, Variable};
use crate::tensor::Tensor;
use crate::value::RtValue;
use graphc_ir::{Attrs, DType, Op};
use ndarray::ArrayD;
use std::ops::{Add, Div, Mul, Sub};
use std::sync::Arc;

/// An optimizer's rule with its attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    Sgd,
    Momentum { nesterov: bool },
    Adam { beta1: f64, beta2: f64, epsilon: f64 },
    RmsProp { rho: f64, momentum: f64, epsilon: f64 },
}

/// Where an optimizer's operands are: the variables it updates (the variable first), the
/// learning rate, the gradient, and the momentum operand when it has one.
struct Layout {
    vars: &'static [usize],
    lr: usize,
    grad: usize,
    momentum: Option<usize>,
}

fn rule(op: Op, attrs: &Attrs) -> Result<(Rule, Layout), RunError> {
    let float = |name: &str, default: f64| attrs.float(name).unwrap_or(default);
    Ok(match op {
        Op::ApplySgd => (Rule::Sgd, Layout { vars: &[0], lr: 1, grad: 2, momentum: None }),
        Op::ApplyMomentum => (
            Rule::Momentum { nesterov: attrs.bool("use_nesterov").unwrap_or(false) },
            Layout { vars: &[0, 1], lr: 2, grad: 3, momentum: Some(4) },
        ),
        Op::ApplyAdam => (
            Rule::Adam { beta1: float("beta1", 0.9), beta2: float("beta2", 0.999), epsilon: float("epsilon", 1e-7) },
            Layout { vars: &[0, 1, 2, 3], lr: 4, grad: 5, momentum: None },
        ),
        Op::ApplyRmsprop => (
            Rule::RmsProp { rho: float("rho", 0.9), momentum: float("momentum", 0.0), epsilon: float("epsilon", 1e-7) },
            Layout { vars: &[0, 1, 2], lr: 3, grad: 4, momentum: None },
        ),
        other => return Err(RunError::internal(format!("'{}' is not an optimizer update", other.name()))),
    })
}

/// Runs the optimizer `op` on its operands (handles and tensors, in the op's order); returns the
/// variable's new value.
pub fn apply(op: Op, attrs: &Attrs, args: &[RtValue]) -> Result<Arc<Tensor>, RunError> {
    let (rule, at) = rule(op, attrs)?;
    let name = op.name();
    let var = |i: usize| match args.get(i) {
        Some(RtValue::Var(v)) => Ok(v.as_ref()),
        _ => Err(RunError::internal(format!("operand {i} of {name} is not a variable handle"))),
    };
    let tensor = |i: usize| {
        args.get(i)
            .and_then(RtValue::as_tensor)
            .ok_or_else(|| RunError::internal(format!("operand {i} of {name} is not a tensor")))
    };
    let vars = at.vars.iter().map(|&i| var(i)).collect::<Result<Vec<_>, _>>()?;
    let ty = vars[0].ty.clone();
    // The type rules hold these; checked again because a kernel must never index past a buffer.
    for (k, v) in vars.iter().enumerate().skip(1) {
        // Adam's fourth variable is its step count, a scalar.
        let step = matches!(rule, Rule::Adam { .. }) && k == 3;
        let want = if step { graphc_ir::TensorType::scalar(ty.dtype) } else { ty.clone() };
        if v.ty != want {
            return Err(RunError::internal(format!(
                "{name}: variable \"{}\" holds {} where {want} is needed",
                v.name, v.ty
            )));
        }
    }
    let grad = tensor(at.grad)?;
    if grad.ty() != ty {
        return Err(RunError::invalid(format!("{name}: the gradient is {} but the variable holds {ty}", grad.ty())));
    }
    let (lr, momentum) = (tensor(at.lr)?, at.momentum.map(tensor).transpose()?);
    match ty.dtype {
        DType::F32 => run::<f32>(name, rule, &vars, lr, momentum, grad),
        DType::F64 => run::<f64>(name, rule, &vars, lr, momentum, grad),
        other => Err(RunError::invalid(format!("{name} updates floats, but the variable holds {other}"))),
    }
}

/// The element types the optimizers update.
trait Real: Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + 'static {
    const ONE: Self;
    fn from_f64(x: f64) -> Self;
    fn sqrt(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn array(t: &Tensor) -> Option<&ArrayD<Self>>;
    fn array_mut(t: &mut Tensor) -> Option<&mut ArrayD<Self>>;
}

macro_rules! real {
    ($t:ty, $variant:ident) => {
        impl Real for $t {
            const ONE: Self = 1.0;
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$variant(a) => Some(a),
                    _ => None,
                }
            }
            fn array_mut(t: &mut Tensor) -> Option<&mut ArrayD<Self>> {
                match t {
                    Tensor::$variant(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}
real!(f32, F32);
real!(f64, F64);

/// A scalar operand's value.
fn scalar<T: Real>(name: &str, what: &str, t: &Tensor) -> Result<T, RunError> {
    match T::array(t) {
        Some(a) if a.len() == 1 => Ok(*a.iter().next().expect("one element")),
        _ => Err(RunError::invalid(format!("{name}: {what} must be a scalar of the variable's dtype, not {}", t.ty()))),
    }
}

/// A variable's buffer to write: its own when nothing else holds it, else a copy now installed
/// in the variable (`Arc::make_mut`); row-major either way.
fn buffer<T: Real>(slot: &mut Arc<Tensor>) -> Result<&mut [T], RunError> {
    let a = T::array_mut(Arc::make_mut(slot)).ok_or_else(|| RunError::internal("a variable's value changed dtype"))?;
    if !a.is_standard_layout() {
        *a = a.as_standard_layout().into_owned();
    }
    Ok(a.as_slice_mut().expect("standard layout"))
}

fn run<T: Real>(
    name: &str,
    rule: Rule,
    vars: &[&Variable],
    lr: &Tensor,
    momentum: Option<&Tensor>,
    grad: &Tensor,
) -> Result<Arc<Tensor>, RunError> {
    let lr: T = scalar(name, "the learning rate", lr)?;
    let mu: Option<T> = momentum.map(|m| scalar(name, "the momentum", m)).transpose()?;
    let g = T::array(grad).ok_or_else(|| RunError::internal("the gradient's dtype is not the variable's"))?;
    let g = g.as_standard_layout();
    let g = g.as_slice().expect("standard layout");
    let one = T::ONE;
    update_together(vars, |slots| {
        match (rule, &mut *slots) {
            (Rule::Sgd, [var]) => {
                let var = buffer::<T>(var)?;
                for (w, &g) in var.iter_mut().zip(g) {
                    *w = *w - lr * g;
                }
            }
            (Rule::Momentum { nesterov }, [var, accum]) => {
                let mu = mu.ok_or_else(|| RunError::internal("apply_momentum without its momentum"))?;
                let (var, accum) = (buffer::<T>(var)?, buffer::<T>(accum)?);
                for ((w, a), &g) in var.iter_mut().zip(accum.iter_mut()).zip(g) {
                    *a = *a * mu + g;
                    *w = if nesterov { *w - (lr * g + lr * mu * *a) } else { *w - lr * *a };
                }
            }
            (Rule::Adam { beta1, beta2, epsilon }, [var, m, v, step]) => {
                let (b1, b2, eps) = (T::from_f64(beta1), T::from_f64(beta2), T::from_f64(epsilon));
                let (var, m, v, step) = (buffer::<T>(var)?, buffer::<T>(m)?, buffer::<T>(v)?, buffer::<T>(step)?);
                let t = step[0] + one;
                step[0] = t;
                let lr_t = lr * (one - b2.powf(t)).sqrt() / (one - b1.powf(t));
                for (((w, m), v), &g) in var.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(g) {
                    *m = b1 * *m + (one - b1) * g;
                    *v = b2 * *v + (one - b2) * g * g;
                    *w = *w - lr_t * *m / (v.sqrt() + eps);
                }
            }
            (Rule::RmsProp { rho, momentum, epsilon }, [var, ms, mom]) => {
                let (rho, momentum, eps) = (T::from_f64(rho), T::from_f64(momentum), T::from_f64(epsilon));
                let (var, ms, mom) = (buffer::<T>(var)?, buffer::<T>(ms)?, buffer::<T>(mom)?);
                for (((w, s), p), &g) in var.iter_mut().zip(ms.iter_mut()).zip(mom.iter_mut()).zip(g) {
                    *s = rho * *s + (one - rho) * g * g;
                    *p = momentum * *p + lr * g / (*s + eps).sqrt();
                    *w = *w - *p;
                }
            }
            (_, slots) => {
                return Err(RunError::internal(format!("{name} locked {} variables", slots.len())));
            }
        }
        Ok(Arc::clone(&*slots[0]))
    })
}
