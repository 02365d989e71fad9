//! Elementwise kernels: unary, binary with numpy broadcasting, select, cast.

use super::elem::{Float, Num};
use super::error::KernelError;
use crate::tensor::Tensor;
use graphc_ir::shape::broadcast_shapes;
use graphc_ir::{DType, Op};
use ndarray::{ArrayD, IxDyn, Zip};

pub fn unary(op: Op, x: &Tensor) -> Result<Tensor, KernelError> {
    Ok(match x {
        Tensor::F32(a) => Tensor::F32(float_unary(op, a)?),
        Tensor::F64(a) => Tensor::F64(float_unary(op, a)?),
        Tensor::I32(a) => Tensor::I32(int_unary(op, a)?),
        Tensor::I64(a) => Tensor::I64(int_unary(op, a)?),
        Tensor::Bool(a) => match op {
            Op::Not => Tensor::Bool(a.mapv(|v| !v)),
            _ => return Err(unsupported(op, DType::Bool)),
        },
    })
}

fn float_unary<T: Float>(op: Op, a: &ArrayD<T>) -> Result<ArrayD<T>, KernelError> {
    let f: fn(T) -> T = match op {
        Op::Neg => T::neg,
        Op::Abs => T::abs,
        Op::Exp => T::exp,
        Op::Log => T::ln,
        Op::Sqrt => T::sqrt,
        Op::Tanh => T::tanh,
        Op::Sigmoid => T::sigmoid,
        Op::Relu => T::relu,
        Op::Erf => T::erf,
        Op::Sin => T::sin,
        Op::Cos => T::cos,
        Op::Tan => T::tan,
        Op::Asin => T::asin,
        Op::Acos => T::acos,
        Op::Atan => T::atan,
        Op::Sinh => T::sinh,
        Op::Cosh => T::cosh,
        Op::Asinh => T::asinh,
        Op::Acosh => T::acosh,
        Op::Atanh => T::atanh,
        Op::Floor => T::floor,
        Op::Ceil => T::ceil,
        Op::Round => T::round_even,
        Op::Sign => T::sign,
        _ => return Err(KernelError::new(format!("'{}' is not a unary op on floats", op.name()))),
    };
    Ok(a.mapv(f))
}

fn int_unary<T: Num>(op: Op, a: &ArrayD<T>) -> Result<ArrayD<T>, KernelError> {
    let f: fn(T) -> T = match op {
        Op::Neg => T::neg,
        Op::Abs => T::abs,
        Op::Relu => T::relu,
        Op::Sign => T::sign,
        _ => return Err(KernelError::new(format!("'{}' is not a unary op on integers", op.name()))),
    };
    Ok(a.mapv(f))
}

pub fn binary(op: Op, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => numeric_binary(op, a, b),
        (Tensor::F64(a), Tensor::F64(b)) => numeric_binary(op, a, b),
        (Tensor::I32(a), Tensor::I32(b)) => numeric_binary(op, a, b),
        (Tensor::I64(a), Tensor::I64(b)) => numeric_binary(op, a, b),
        (Tensor::Bool(a), Tensor::Bool(b)) => bool_binary(op, a, b),
        _ => Err(KernelError::new(format!(
            "'{}' needs operands of one dtype, got {} and {}",
            op.name(),
            a.dtype(),
            b.dtype()
        ))),
    }
}

fn numeric_binary<T: Num>(op: Op, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<Tensor, KernelError>
where
    ArrayD<T>: Into<Tensor>,
{
    let arith = |f: fn(T, T) -> T| zip2(a, b, move |x, y| Ok(f(x, y))).map(Into::into);
    let test = |f: fn(&T, &T) -> bool| zip2(a, b, move |x, y| Ok(f(&x, &y))).map(Tensor::Bool);
    match op {
        Op::Add => arith(T::add),
        Op::Sub => arith(T::sub),
        Op::Mul => arith(T::mul),
        Op::Max => arith(T::max_nan),
        Op::Min => arith(T::min_nan),
        Op::Div => zip2(a, b, T::div).map(Into::into),
        Op::Pow => zip2(a, b, T::pow).map(Into::into),
        Op::Equal => test(T::eq),
        Op::NotEqual => test(T::ne),
        Op::Less => test(T::lt),
        Op::LessEqual => test(T::le),
        Op::Greater => test(T::gt),
        Op::GreaterEqual => test(T::ge),
        _ => Err(KernelError::new(format!("'{}' is not a binary op on numbers", op.name()))),
    }
}

/// `mod lhs, rhs`: the truncated remainder with `fmod`, else the floored one.
pub fn modulo(a: &Tensor, b: &Tensor, fmod: bool) -> Result<Tensor, KernelError> {
    fn rem<T: Num>(a: &ArrayD<T>, b: &ArrayD<T>, fmod: bool) -> Result<ArrayD<T>, KernelError> {
        zip2(a, b, |x, y| x.rem(y, fmod))
    }
    Ok(match (a, b) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(rem(a, b, fmod)?),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(rem(a, b, fmod)?),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(rem(a, b, fmod)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(rem(a, b, fmod)?),
        _ => {
            return Err(KernelError::new(format!(
                "'mod' needs numeric operands of one dtype, got {} and {}",
                a.dtype(),
                b.dtype()
            )))
        }
    })
}

fn bool_binary(op: Op, a: &ArrayD<bool>, b: &ArrayD<bool>) -> Result<Tensor, KernelError> {
    let f: fn(bool, bool) -> bool = match op {
        Op::And => |x, y| x && y,
        Op::Or => |x, y| x || y,
        Op::Equal => |x, y| x == y,
        Op::NotEqual => |x, y| x != y,
        _ => return Err(unsupported(op, DType::Bool)),
    };
    zip2(a, b, move |x, y| Ok(f(x, y))).map(Tensor::Bool)
}

/// Applies `f` to the operands broadcast together (numpy rules); the first error wins.
pub fn zip2<A: Copy, B: Copy, R: Default>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    mut f: impl FnMut(A, B) -> Result<R, KernelError>,
) -> Result<ArrayD<R>, KernelError> {
    let shape = broadcast_to_common(&[a.shape(), b.shape()])?;
    let (av, bv) =
        (a.broadcast(shape.clone()).ok_or_else(bad_broadcast)?, b.broadcast(shape).ok_or_else(bad_broadcast)?);
    let mut err = None;
    let out = Zip::from(&av).and(&bv).map_collect(|&x, &y| {
        f(x, y).unwrap_or_else(|e| {
            err.get_or_insert(e);
            R::default()
        })
    });
    err.map_or(Ok(out), Err)
}

/// `select cond, on_true, on_false` with the three shapes broadcast together.
pub fn select(cond: &Tensor, t: &Tensor, f: &Tensor) -> Result<Tensor, KernelError> {
    let Tensor::Bool(c) = cond else {
        return Err(KernelError::new(format!("select needs a bool condition, got {}", cond.dtype())));
    };
    fn pick<T: Copy>(c: &ArrayD<bool>, t: &ArrayD<T>, f: &ArrayD<T>) -> Result<ArrayD<T>, KernelError> {
        let shape = broadcast_to_common(&[c.shape(), t.shape(), f.shape()])?;
        let cv = c.broadcast(shape.clone()).ok_or_else(bad_broadcast)?;
        let tv = t.broadcast(shape.clone()).ok_or_else(bad_broadcast)?;
        let fv = f.broadcast(shape).ok_or_else(bad_broadcast)?;
        Ok(Zip::from(&cv).and(&tv).and(&fv).map_collect(|&c, &t, &f| if c { t } else { f }))
    }
    Ok(match (t, f) {
        (Tensor::F32(t), Tensor::F32(f)) => Tensor::F32(pick(c, t, f)?),
        (Tensor::F64(t), Tensor::F64(f)) => Tensor::F64(pick(c, t, f)?),
        (Tensor::I32(t), Tensor::I32(f)) => Tensor::I32(pick(c, t, f)?),
        (Tensor::I64(t), Tensor::I64(f)) => Tensor::I64(pick(c, t, f)?),
        (Tensor::Bool(t), Tensor::Bool(f)) => Tensor::Bool(pick(c, t, f)?),
        _ => return Err(KernelError::new(format!("select branches differ in dtype: {} and {}", t.dtype(), f.dtype()))),
    })
}

/// Converts elements to `to` with the spec's rules: float to int truncates toward zero
/// (saturating out of range, NaN gives 0), int to float rounds to nearest, bool is 0 or 1,
/// and a number is true when it is not zero.
pub fn cast(x: &Tensor, to: DType) -> Tensor {
    macro_rules! convert {
        ($a:expr) => {
            match to {
                DType::F32 => Tensor::F32($a.mapv(|v| v as f32)),
                DType::F64 => Tensor::F64($a.mapv(|v| v as f64)),
                DType::I32 => Tensor::I32($a.mapv(|v| v as i32)),
                DType::I64 => Tensor::I64($a.mapv(|v| v as i64)),
                DType::Bool => Tensor::Bool($a.mapv(nonzero)),
            }
        };
    }
    match x {
        Tensor::F32(a) => convert!(a),
        Tensor::F64(a) => convert!(a),
        Tensor::I32(a) => convert!(a),
        Tensor::I64(a) => convert!(a),
        Tensor::Bool(a) => match to {
            DType::Bool => Tensor::Bool(a.clone()),
            _ => convert!(a.mapv(u8::from)),
        },
    }
}

fn nonzero<T: PartialEq + Default>(v: T) -> bool {
    v != T::default()
}

fn broadcast_to_common(shapes: &[&[usize]]) -> Result<IxDyn, KernelError> {
    let mut out: Vec<u64> = Vec::new();
    for s in shapes {
        let s: Vec<u64> = s.iter().map(|&d| d as u64).collect();
        out = broadcast_shapes(&out, &s).map_err(KernelError::new)?;
    }
    Ok(IxDyn(&out.iter().map(|&d| d as usize).collect::<Vec<_>>()))
}

fn bad_broadcast() -> KernelError {
    KernelError::new("operand shapes do not broadcast together")
}

fn unsupported(op: Op, dtype: DType) -> KernelError {
    KernelError::new(format!("'{}' is not defined on {dtype}", op.name()))
}
