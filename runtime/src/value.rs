//! The values a run binds: tensors, tokens, and handles to session state. The interpreter,
//! the rendezvous and executors all pass these, so they live apart from each of them.

use crate::device::DeviceTensor;
use crate::state::{Queue, Variable};
use crate::tensor::Tensor;
use graphc_ir::Type;
use std::sync::Arc;

/// A value at run time: a tensor, a token, or a handle to session state.
#[derive(Clone, Debug)]
pub enum RtValue {
    Tensor(Arc<Tensor>),
    /// A tensor in a device's memory. Only inside an executor that keeps one there: what it
    /// sends, returns or stores is on the host.
    Device(Arc<dyn DeviceTensor>),
    Token,
    Var(Arc<Variable>),
    Queue(Arc<Queue>),
}

impl RtValue {
    pub fn tensor(t: Tensor) -> Self {
        RtValue::Tensor(Arc::new(t))
    }

    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            RtValue::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Whether the value is of type `ty` (as `self.ty() == *ty`, but a host tensor's type is
    /// not built to say so: this is asked of every result of every node).
    pub fn is_of(&self, ty: &Type) -> bool {
        match (self, ty) {
            (RtValue::Tensor(t), Type::Tensor(want)) => t.is_of(want),
            (RtValue::Tensor(_), _) => false,
            _ => self.ty() == *ty,
        }
    }

    /// The value's IR type.
    pub fn ty(&self) -> Type {
        match self {
            RtValue::Tensor(t) => Type::Tensor(t.ty()),
            RtValue::Device(t) => Type::Tensor(t.ty()),
            RtValue::Token => Type::Token,
            RtValue::Var(v) => Type::Var(v.ty.clone()),
            RtValue::Queue(q) => Type::Queue(q.types.clone()),
        }
    }
}
