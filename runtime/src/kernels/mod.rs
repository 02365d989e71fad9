//! The reference kernels: one plain, obviously-correct implementation of every pure op in
//! ir-spec/SPEC.md, on ndarray. Every compiled path is tested against these. They favour
//! clarity over speed, except that float matmul uses ndarray's blocked product.
//!
//! Stateful ops, control flow and communication are not kernels: the executor runs them
//! (`crate::exec`), because they touch the session or hold regions.

/// Dispatches on the variant both tensors share: `$num` for every numeric dtype but the 16-bit
/// floats (which `kernels::eval` computes in f32), `$other` for bool and mixed dtypes.
macro_rules! numeric_pair {
    ($a:expr, $b:expr, ($x:ident, $y:ident) => $num:expr, _ => $other:expr) => {
        match ($a, $b) {
            (Tensor::F32($x), Tensor::F32($y)) => $num,
            (Tensor::F64($x), Tensor::F64($y)) => $num,
            (Tensor::I8($x), Tensor::I8($y)) => $num,
            (Tensor::I16($x), Tensor::I16($y)) => $num,
            (Tensor::I32($x), Tensor::I32($y)) => $num,
            (Tensor::I64($x), Tensor::I64($y)) => $num,
            (Tensor::U8($x), Tensor::U8($y)) => $num,
            (Tensor::U16($x), Tensor::U16($y)) => $num,
            (Tensor::U32($x), Tensor::U32($y)) => $num,
            (Tensor::U64($x), Tensor::U64($y)) => $num,
            _ => $other,
        }
    };
}

/// Dispatches on an integer tensor's variant, rewrapping `$body` in it; `$other` for the rest.
macro_rules! each_int {
    ($x:expr, $a:ident => $body:expr, _ => $other:expr) => {
        match $x {
            Tensor::I8($a) => Tensor::I8($body),
            Tensor::I16($a) => Tensor::I16($body),
            Tensor::I32($a) => Tensor::I32($body),
            Tensor::I64($a) => Tensor::I64($body),
            Tensor::U8($a) => Tensor::U8($body),
            Tensor::U16($a) => Tensor::U16($body),
            Tensor::U32($a) => Tensor::U32($body),
            Tensor::U64($a) => Tensor::U64($body),
            _ => $other,
        }
    };
}

mod array;
mod bits;
pub mod elem;
mod elementwise;
mod error;
mod loss;
mod matmul;
mod reduce;
mod top_k;
mod window;

use crate::tensor::Tensor;
use graphc_ir::{Attrs, DType, Op, OpKind, TensorType};

pub use array::resolve_indices;
pub use elementwise::cast;
pub use error::KernelError;

/// What running a `grad` says: the autodiff lowering replaces every one before a graph runs.
pub const GRAD_UNEXPANDED: &str = "grad must be expanded by the autodiff lowering";

/// Whether [`eval`] computes this op: every op that neither touches state, communicates nor
/// holds regions, except `grad`, which nothing computes.
pub fn is_kernel(op: Op) -> bool {
    !op.is_stateful() && !matches!(op.kind(), OpKind::Control) && op != Op::Fusion && op != Op::Grad
}

/// Evaluates a pure op on its operands. `results` are the node's result types (from the
/// type rules); kernels whose result shape is fully determined by attributes read it there.
///
/// f16 and bf16 have no kernels of their own: their operands widen to f32 (exactly), the f32
/// kernel runs, and each result the type rule gives a 16-bit float type is rounded to it,
/// nearest-even (the spec's rule). `cast`, `bitcast` and `constant` convert themselves.
pub fn eval(op: Op, attrs: &Attrs, inputs: &[&Tensor], results: &[TensorType]) -> Result<Vec<Tensor>, KernelError> {
    let half = |d: DType| matches!(d, DType::F16 | DType::BF16);
    if matches!(op, Op::Cast | Op::Bitcast | Op::Constant)
        || !(inputs.iter().any(|t| half(t.dtype())) || results.iter().any(|t| half(t.dtype)))
    {
        return eval_native(op, attrs, inputs, results);
    }
    let wide: Vec<Tensor> =
        inputs.iter().map(|t| if half(t.dtype()) { cast(t, DType::F32) } else { (*t).clone() }).collect();
    let wide_results: Vec<TensorType> =
        results.iter().map(|t| if half(t.dtype) { t.with_dtype(DType::F32) } else { t.clone() }).collect();
    let refs: Vec<&Tensor> = wide.iter().collect();
    let out = eval_native(op, attrs, &refs, &wide_results)?;
    Ok(out
        .into_iter()
        .zip(results)
        .map(|(t, ty)| if half(ty.dtype) && t.dtype() == DType::F32 { cast(&t, ty.dtype) } else { t })
        .collect())
}

fn eval_native(op: Op, attrs: &Attrs, inputs: &[&Tensor], results: &[TensorType]) -> Result<Vec<Tensor>, KernelError> {
    let arity = op.def();
    if inputs.len() < arity.min_operands || arity.max_operands.is_some_and(|m| inputs.len() > m) {
        return Err(KernelError::new(format!("'{}' got {} operands", op.name(), inputs.len())));
    }
    let attr_err = |name: &str| KernelError::new(format!("'{}' lacks its '{name}' attribute", op.name()));
    let ints = |name: &str| attrs.ints(name).ok_or_else(|| attr_err(name));
    let int = |name: &str| attrs.int(name).ok_or_else(|| attr_err(name));
    let result =
        |i: usize| results.get(i).ok_or_else(|| KernelError::new(format!("'{}' has no result type {i}", op.name())));
    let one = |t: Tensor| Ok(vec![t]);
    match op {
        Op::Constant => {
            one(Tensor::from_literal(attrs.tensor("value").ok_or_else(|| attr_err("value"))?).map_err(KernelError)?)
        }
        Op::Identity => one(inputs[0].clone()),
        Op::Cast => one(cast(inputs[0], attrs.dtype("to").ok_or_else(|| attr_err("to"))?)),
        Op::Bitcast => one(bits::bitcast(inputs[0], attrs.dtype("to").ok_or_else(|| attr_err("to"))?)?),
        Op::Reshape => one(array::reshape(inputs[0], result(0)?)?),
        Op::Broadcast => one(array::broadcast(inputs[0], result(0)?)?),
        Op::Transpose => one(array::transpose(inputs[0], ints("perm")?)?),
        Op::Concat => one(array::concat(inputs, int("axis")?)?),
        Op::Slice => one(array::slice(inputs[0], ints("starts")?, ints("ends")?, attrs.ints("steps"))?),
        Op::Split => array::split(inputs[0], int("axis")?, ints("sizes")?),
        Op::Gather => one(array::gather(inputs[0], inputs[1], attrs.int("axis").unwrap_or(0))?),
        Op::Shape => {
            let dims: Vec<i64> = inputs[0].shape().iter().map(|&d| d as i64).collect();
            one(Tensor::I64(ndarray::Array1::from(dims).into_dyn()))
        }
        Op::Rank => one(Tensor::I64(ndarray::arr0(inputs[0].shape().len() as i64).into_dyn())),
        Op::MatMul => {
            let flag = |name: &str| attrs.bool(name).unwrap_or(false);
            one(matmul::matmul(inputs[0], inputs[1], result(0)?, flag("transpose_a"), flag("transpose_b"))?)
        }
        Op::Conv => one(window::conv(inputs[0], inputs[1], attrs, result(0)?)?),
        Op::MaxPool if attrs.bool("indices") == Some(true) => {
            window::max_pool_with_indices(inputs[0], attrs, result(0)?)
        }
        Op::MaxPool | Op::AvgPool => one(window::pool(op, inputs[0], attrs, result(0)?)?),
        Op::Neg
        | Op::Abs
        | Op::Exp
        | Op::Log
        | Op::Sqrt
        | Op::Tanh
        | Op::Sigmoid
        | Op::Relu
        | Op::Erf
        | Op::Sin
        | Op::Cos
        | Op::Tan
        | Op::Asin
        | Op::Acos
        | Op::Atan
        | Op::Sinh
        | Op::Cosh
        | Op::Asinh
        | Op::Acosh
        | Op::Atanh
        | Op::Floor
        | Op::Ceil
        | Op::Round
        | Op::Sign => one(elementwise::unary(op, inputs[0])?),
        Op::Not if inputs[0].dtype() == DType::Bool => one(elementwise::unary(op, inputs[0])?),
        Op::Not => one(bits::unary(op, inputs[0])?),
        Op::And | Op::Or | Op::Xor if inputs[0].dtype() == DType::Bool => {
            one(elementwise::binary(op, inputs[0], inputs[1])?)
        }
        Op::And | Op::Or | Op::Xor | Op::ShiftLeft | Op::ShiftRight => one(bits::binary(op, inputs[0], inputs[1])?),
        Op::Mod => one(elementwise::modulo(inputs[0], inputs[1], attrs.bool("fmod").unwrap_or(false))?),
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Pow
        | Op::Max
        | Op::Min
        | Op::Equal
        | Op::NotEqual
        | Op::Less
        | Op::LessEqual
        | Op::Greater
        | Op::GreaterEqual => one(elementwise::binary(op, inputs[0], inputs[1])?),
        Op::TopK => {
            let axis = graphc_ir::shape::normalize_axis(int("axis")?, inputs[0].shape().len()).map_err(KernelError)?;
            top_k::top_k(inputs[0], axis, attrs.bool("largest").unwrap_or(true), result(0)?)
        }
        Op::Select => one(elementwise::select(inputs[0], inputs[1], inputs[2])?),
        Op::ReduceSum | Op::ReduceMean | Op::ReduceMax | Op::ReduceMin | Op::ReduceProd => {
            one(reduce::reduce(op, inputs[0], ints("axes")?, result(0)?)?)
        }
        Op::Softmax => one(reduce::softmax(inputs[0], attrs.int("axis").unwrap_or(-1))?),
        Op::ScatterAdd => one(array::scatter_add(inputs[0], inputs[1], inputs[2], attrs.int("axis").unwrap_or(0))?),
        Op::Pad => {
            one(array::pad(inputs[0], inputs[1], ints("low")?, ints("high")?, attrs.ints("interior"), result(0)?)?)
        }
        Op::ConvInputGrad => one(window::conv_input_grad(inputs[0], inputs[1], attrs, result(0)?)?),
        Op::ConvFilterGrad => one(window::conv_filter_grad(inputs[0], inputs[1], attrs, result(0)?)?),
        Op::AvgPoolGrad => one(window::avg_pool_grad(inputs[0], attrs, result(0)?)?),
        Op::SoftmaxCrossEntropy => {
            let reduction = loss::Reduction::parse(attrs.str("reduction"))?;
            one(loss::softmax_cross_entropy(inputs[0], inputs[1], reduction)?)
        }
        Op::MeanSquaredError => {
            one(loss::mean_squared_error(inputs[0], inputs[1], loss::Reduction::parse(attrs.str("reduction"))?)?)
        }
        Op::Grad => Err(KernelError::new(GRAD_UNEXPANDED)),
        Op::Variable
        | Op::Read
        | Op::Assign
        | Op::AssignAdd
        | Op::ApplySgd
        | Op::ApplyMomentum
        | Op::ApplyAdam
        | Op::ApplyRmsprop
        | Op::Queue
        | Op::Enqueue
        | Op::Dequeue
        | Op::QueueClose
        | Op::QueueSize
        | Op::NoOp
        | Op::Cond
        | Op::While
        | Op::Fusion
        | Op::Send
        | Op::Recv => Err(KernelError::new(format!("'{}' is run by the executor, not a kernel", op.name()))),
    }
}
