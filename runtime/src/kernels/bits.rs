//! Bitwise kernels on integers: `and`, `or`, `xor` and `not` (whose bool forms are logical,
//! in `elementwise.rs`), the shifts, and `bitcast` between types of one width.

use super::elementwise::zip2;
use super::error::KernelError;
use crate::tensor::Tensor;
use graphc_ir::{DType, Op};
use ndarray::ArrayD;
use std::ops::{BitAnd, BitOr, BitXor, Not};

/// An integer type's bit operations; shifts by an amount outside `0..width` saturate as the
/// spec says (0, or the sign's fill for a right shift).
pub trait Bits:
    Copy + Default + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> + Not<Output = Self>
{
    fn shl(self, by: Self) -> Self;
    fn shr(self, by: Self) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn shl(self, by: Self) -> Self {
                u32::try_from(by).ok().and_then(|b| self.checked_shl(b)).unwrap_or(0)
            }
            fn shr(self, by: Self) -> Self {
                // Past the width: the top bit shifted to the bottom, then once more (0 for
                // unsigned and non-negative values, -1 for negative ones).
                u32::try_from(by).ok().and_then(|b| self.checked_shr(b)).unwrap_or((self >> (<$t>::BITS - 1)) >> 1)
            }
        }
    )*};
}
bits!(i8, i16, i32, i64, u8, u16, u32, u64);

pub fn unary(op: Op, x: &Tensor) -> Result<Tensor, KernelError> {
    fn flip<T: Bits>(a: &ArrayD<T>) -> ArrayD<T> {
        a.mapv(|v| !v)
    }
    match op {
        Op::Not => Ok(each_int!(x, a => flip(a), _ => return Err(not_int(op, x.dtype())))),
        _ => Err(KernelError::new(format!("'{}' is not a bitwise unary op", op.name()))),
    }
}

pub fn binary(op: Op, a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    fn apply<T: Bits>(op: Op, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>, KernelError> {
        let f: fn(T, T) -> T = match op {
            Op::And => |x, y| x & y,
            Op::Or => |x, y| x | y,
            Op::Xor => |x, y| x ^ y,
            Op::ShiftLeft => T::shl,
            Op::ShiftRight => T::shr,
            _ => return Err(KernelError::new(format!("'{}' is not a bitwise binary op", op.name()))),
        };
        zip2(a, b, |x, y| Ok(f(x, y)))
    }
    macro_rules! pair {
        ($($v:ident),*) => {
            match (a, b) {
                $((Tensor::$v(x), Tensor::$v(y)) => Ok(Tensor::$v(apply(op, x, y)?)),)*
                _ if a.dtype() != b.dtype() => Err(KernelError::new(format!(
                    "'{}' needs operands of one dtype, got {} and {}", op.name(), a.dtype(), b.dtype()
                ))),
                _ => Err(not_int(op, a.dtype())),
            }
        };
    }
    pair!(I8, I16, I32, I64, U8, U16, U32, U64)
}

/// Each element's little-endian bytes read as `to` (of the same width).
pub fn bitcast(x: &Tensor, to: DType) -> Result<Tensor, KernelError> {
    if x.dtype().size_bytes() != to.size_bytes() {
        return Err(KernelError::new(format!("bitcast from {} to {to} changes the width", x.dtype())));
    }
    Tensor::from_le_bytes(to, x.shape(), &x.to_le_bytes())
        .ok_or_else(|| KernelError::new(format!("bitcast from {} to {to}: the bytes do not fit", x.dtype())))
}

fn not_int(op: Op, dtype: DType) -> KernelError {
    KernelError::new(format!("'{}' takes bool or integers, got {dtype}", op.name()))
}
