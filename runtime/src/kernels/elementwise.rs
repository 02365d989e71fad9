//! Elementwise kernels: unary, binary with numpy broadcasting, select, cast.

use super::elem::{Float, Num};
use super::error::KernelError;
use crate::tensor::{Element, Tensor};
use graphc_ir::shape::broadcast_shapes;
use graphc_ir::{bf16, f16, DType, Op};
use ndarray::{ArrayD, IxDyn, Zip};

pub fn unary(op: Op, x: &Tensor) -> Result<Tensor, KernelError> {
    Ok(match x {
        Tensor::F32(a) => Tensor::F32(float_unary(op, a)?),
        Tensor::F64(a) => Tensor::F64(float_unary(op, a)?),
        Tensor::I8(a) => Tensor::I8(int_unary(op, a)?),
        Tensor::I16(a) => Tensor::I16(int_unary(op, a)?),
        Tensor::I32(a) => Tensor::I32(int_unary(op, a)?),
        Tensor::I64(a) => Tensor::I64(int_unary(op, a)?),
        Tensor::U8(a) => Tensor::U8(int_unary(op, a)?),
        Tensor::U16(a) => Tensor::U16(int_unary(op, a)?),
        Tensor::U32(a) => Tensor::U32(int_unary(op, a)?),
        Tensor::U64(a) => Tensor::U64(int_unary(op, a)?),
        Tensor::Bool(a) => match op {
            Op::Not => Tensor::Bool(a.mapv(|v| !v)),
            _ => return Err(unsupported(op, DType::Bool)),
        },
        Tensor::F16(_) | Tensor::BF16(_) => return Err(unsupported(op, x.dtype())),
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
    numeric_pair!(a, b, (x, y) => numeric_binary(op, x, y), _ => match (a, b) {
        (Tensor::Bool(a), Tensor::Bool(b)) => bool_binary(op, a, b),
        _ => Err(KernelError::new(format!(
            "'{}' needs operands of one dtype, got {} and {}",
            op.name(),
            a.dtype(),
            b.dtype()
        ))),
    })
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
    fn rem<T: Num>(a: &ArrayD<T>, b: &ArrayD<T>, fmod: bool) -> Result<ArrayD<T>, KernelError>
    where
        ArrayD<T>: Into<Tensor>,
    {
        zip2(a, b, |x, y| x.rem(y, fmod))
    }
    numeric_pair!(a, b, (x, y) => Ok(rem(x, y, fmod)?.into()), _ => Err(KernelError::new(format!(
        "'mod' needs numeric operands of one dtype, got {} and {}",
        a.dtype(),
        b.dtype()
    ))))
}

fn bool_binary(op: Op, a: &ArrayD<bool>, b: &ArrayD<bool>) -> Result<Tensor, KernelError> {
    let f: fn(bool, bool) -> bool = match op {
        Op::And => |x, y| x && y,
        Op::Or => |x, y| x || y,
        Op::Xor => |x, y| x != y,
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
    if t.dtype() != f.dtype() {
        return Err(KernelError::new(format!("select branches differ in dtype: {} and {}", t.dtype(), f.dtype())));
    }
    fn pick_same<T: Element>(c: &ArrayD<bool>, t: &ArrayD<T>, f: &Tensor) -> Result<ArrayD<T>, KernelError> {
        pick(c, t, T::array(f).ok_or_else(|| KernelError::new("select branches differ in dtype"))?)
    }
    Ok(crate::map_dtype!(t, t => pick_same(c, t, f)?))
}

/// Converts elements to `to` with the spec's rules: float to int truncates toward zero
/// (saturating out of range, NaN gives 0), int to int keeps the low bits, to a float rounds to
/// nearest-even (once: f16 and bf16 round from the f64, which holds every f32 and f64 exactly),
/// bool is 0 or 1, and a number is true when it is not zero.
pub fn cast(x: &Tensor, to: DType) -> Tensor {
    macro_rules! convert {
        ($a:expr) => {
            match to {
                DType::F32 => Tensor::F32($a.mapv(|v| v as f32)),
                DType::F64 => Tensor::F64($a.mapv(|v| v as f64)),
                DType::F16 => Tensor::F16($a.mapv(|v| f16::from_f64(v as f64))),
                DType::BF16 => Tensor::BF16($a.mapv(|v| bf16::from_f64(v as f64))),
                DType::I8 => Tensor::I8($a.mapv(|v| v as i8)),
                DType::I16 => Tensor::I16($a.mapv(|v| v as i16)),
                DType::I32 => Tensor::I32($a.mapv(|v| v as i32)),
                DType::I64 => Tensor::I64($a.mapv(|v| v as i64)),
                DType::U8 => Tensor::U8($a.mapv(|v| v as u8)),
                DType::U16 => Tensor::U16($a.mapv(|v| v as u16)),
                DType::U32 => Tensor::U32($a.mapv(|v| v as u32)),
                DType::U64 => Tensor::U64($a.mapv(|v| v as u64)),
                DType::Bool => Tensor::Bool($a.mapv(nonzero)),
            }
        };
    }
    if x.dtype() == to {
        return x.clone();
    }
    match x {
        Tensor::F32(a) => convert!(a),
        Tensor::F64(a) => convert!(a),
        // Widening a 16-bit float to f32 is exact.
        Tensor::F16(a) => convert!(a.mapv(f16::to_f32)),
        Tensor::BF16(a) => convert!(a.mapv(bf16::to_f32)),
        Tensor::I8(a) => convert!(a),
        Tensor::I16(a) => convert!(a),
        Tensor::I32(a) => convert!(a),
        Tensor::I64(a) => convert!(a),
        Tensor::U8(a) => convert!(a),
        Tensor::U16(a) => convert!(a),
        Tensor::U32(a) => convert!(a),
        Tensor::U64(a) => convert!(a),
        Tensor::Bool(a) => convert!(a.mapv(u8::from)),
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
