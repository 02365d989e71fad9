//! The elements of tensor literals: one vector per dtype, compared by their bits, printed in
//! the IR's spelling.

use crate::types::DType;
use std::fmt;

pub use half::{bf16, f16};

/// The elements of a tensor literal, in row-major order.
#[derive(Clone, Debug)]
pub enum TensorData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
}

/// Applies the same expression to the contents of `$x`, a value of `$enum`: an enum with a
/// variant per dtype, named as [`DType`]'s ([`TensorData`], the runtime's `Tensor`).
#[macro_export]
#[doc(hidden)]
macro_rules! each_variant {
    ($enum:path, $x:expr, $a:ident => $body:expr) => {{
        use $enum as E;
        match $x {
            E::F32($a) => $body,
            E::F64($a) => $body,
            E::I32($a) => $body,
            E::I64($a) => $body,
            E::Bool($a) => $body,
            E::F16($a) => $body,
            E::BF16($a) => $body,
            E::I8($a) => $body,
            E::I16($a) => $body,
            E::U8($a) => $body,
            E::U16($a) => $body,
            E::U32($a) => $body,
            E::U64($a) => $body,
        }
    }};
}

/// Like [`each_variant!`], converting between enums with the same dtype variants: the result
/// of `$body` is wrapped in the same variant of `$to`.
#[macro_export]
#[doc(hidden)]
macro_rules! same_variant {
    ($from:path => $to:path, $x:expr, $a:ident => $body:expr) => {{
        use $from as F;
        use $to as T;
        match $x {
            F::F32($a) => T::F32($body),
            F::F64($a) => T::F64($body),
            F::I32($a) => T::I32($body),
            F::I64($a) => T::I64($body),
            F::Bool($a) => T::Bool($body),
            F::F16($a) => T::F16($body),
            F::BF16($a) => T::BF16($body),
            F::I8($a) => T::I8($body),
            F::I16($a) => T::I16($body),
            F::U8($a) => T::U8($body),
            F::U16($a) => T::U16($body),
            F::U32($a) => T::U32($body),
            F::U64($a) => T::U64($body),
        }
    }};
}

/// Element equality for literals: bit equality of floats, so NaN equals itself and a NaN's
/// payload and sign, like a zero's sign, tell values apart.
trait SameElem: Copy + PartialEq {
    fn same(self, o: Self) -> bool {
        self == o
    }
}

/// The bits of the float dtypes, as literals spell them: a NaN other than the dtype's
/// canonical one prints as its bit pattern (`0x7FC00001`) and parses back to it.
pub trait FloatBits: Copy + fmt::Debug {
    /// The width in bits (a bit pattern is written with `WIDTH / 4` hex digits).
    const WIDTH: u32;
    /// The bits of the NaN that `nan` names: positive, quiet, with no payload.
    const CANONICAL_NAN: u64;
    fn bits(self) -> u64;
    /// The float of the low `WIDTH` bits of `bits`.
    fn from_bits(bits: u64) -> Self;
    fn is_nan(self) -> bool;
    fn to_f64(self) -> f64;
}

macro_rules! float_bits {
    ($($t:ty, $u:ty, $nan:expr, $wide:expr;)*) => {$(
        impl FloatBits for $t {
            const WIDTH: u32 = <$u>::BITS;
            const CANONICAL_NAN: u64 = $nan;
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as $u)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn to_f64(self) -> f64 {
                ($wide)(self)
            }
        }
        impl SameElem for $t {
            fn same(self, o: Self) -> bool {
                self.to_bits() == o.to_bits()
            }
        }
    )*};
}
float_bits! {
    f32, u32, 0x7FC0_0000, |x: f32| x as f64;
    f64, u64, 0x7FF8_0000_0000_0000, |x: f64| x;
    f16, u16, 0x7E00, f16::to_f64;
    bf16, u16, 0x7FC0, bf16::to_f64;
}
impl SameElem for i8 {}
impl SameElem for i16 {}
impl SameElem for i32 {}
impl SameElem for i64 {}
impl SameElem for u8 {}
impl SameElem for u16 {}
impl SameElem for u32 {}
impl SameElem for u64 {}
impl SameElem for bool {}

impl TensorData {
    pub fn len(&self) -> usize {
        crate::each_variant!(crate::elements::TensorData, self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::Bool(_) => DType::Bool,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::I8(_) => DType::I8,
            TensorData::I16(_) => DType::I16,
            TensorData::U8(_) => DType::U8,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
        }
    }

    pub(crate) fn all_equal(&self) -> bool {
        crate::each_variant!(crate::elements::TensorData, self, v => v.windows(2).all(|w| w[0].same(w[1])))
    }

    /// Elements `range`, in order.
    pub fn sub(&self, range: std::ops::Range<usize>) -> TensorData {
        crate::same_variant!(crate::elements::TensorData => crate::elements::TensorData, self, v => v[range].to_vec())
    }

    pub(crate) fn truncate(&mut self, n: usize) {
        crate::each_variant!(crate::elements::TensorData, self, v => v.truncate(n))
    }

    /// One element of `dtype` of value `x`, converted as `cast` converts (a float to an
    /// integer truncates; to a 16-bit float rounds to nearest-even; nonzero is true).
    pub fn from_f64(dtype: DType, x: f64) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(vec![x as f32]),
            DType::F64 => TensorData::F64(vec![x]),
            DType::F16 => TensorData::F16(vec![f16::from_f64(x)]),
            DType::BF16 => TensorData::BF16(vec![bf16::from_f64(x)]),
            DType::I8 => TensorData::I8(vec![x as i8]),
            DType::I16 => TensorData::I16(vec![x as i16]),
            DType::I32 => TensorData::I32(vec![x as i32]),
            DType::I64 => TensorData::I64(vec![x as i64]),
            DType::U8 => TensorData::U8(vec![x as u8]),
            DType::U16 => TensorData::U16(vec![x as u16]),
            DType::U32 => TensorData::U32(vec![x as u32]),
            DType::U64 => TensorData::U64(vec![x as u64]),
            DType::Bool => TensorData::Bool(vec![x != 0.0]),
        }
    }

    /// Element `i` widened to f64 (a bool is 0 or 1; a 64-bit integer may round).
    pub fn f64_at(&self, i: usize) -> f64 {
        match self {
            TensorData::F32(v) => v[i] as f64,
            TensorData::F64(v) => v[i],
            TensorData::I32(v) => v[i] as f64,
            TensorData::I64(v) => v[i] as f64,
            TensorData::Bool(v) => u8::from(v[i]) as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::I8(v) => v[i] as f64,
            TensorData::I16(v) => v[i] as f64,
            TensorData::U8(v) => v[i] as f64,
            TensorData::U16(v) => v[i] as f64,
            TensorData::U32(v) => v[i] as f64,
            TensorData::U64(v) => v[i] as f64,
        }
    }

    /// Writes element `i` in the IR's literal spelling.
    pub(crate) fn write_elem(&self, f: &mut impl fmt::Write, i: usize) -> fmt::Result {
        match self {
            TensorData::F32(v) => write_float(f, v[i], v[i]),
            TensorData::F64(v) => write_float(f, v[i], v[i]),
            // The f32 of a 16-bit float's value prints shortest and parses back to it.
            TensorData::F16(v) => write_float(f, v[i], v[i].to_f32()),
            TensorData::BF16(v) => write_float(f, v[i], v[i].to_f32()),
            TensorData::Bool(v) => write!(f, "{}", v[i]),
            TensorData::I32(v) => write!(f, "{}", v[i]),
            TensorData::I64(v) => write!(f, "{}", v[i]),
            TensorData::I8(v) => write!(f, "{}", v[i]),
            TensorData::I16(v) => write!(f, "{}", v[i]),
            TensorData::U8(v) => write!(f, "{}", v[i]),
            TensorData::U16(v) => write!(f, "{}", v[i]),
            TensorData::U32(v) => write!(f, "{}", v[i]),
            TensorData::U64(v) => write!(f, "{}", v[i]),
        }
    }
}

/// Floats print in Rust's shortest round-trip form (`shortest`, `x`'s value); infinities as
/// `inf`, `-inf`; the canonical NaN as `nan` and every other NaN (a payload, the sign bit, a
/// signalling one) as its bit pattern, `0x` and `WIDTH / 4` uppercase hex digits.
pub(crate) fn write_float<T: FloatBits>(f: &mut impl fmt::Write, x: T, shortest: impl fmt::Debug) -> fmt::Result {
    let v = x.to_f64();
    if x.is_nan() && x.bits() == T::CANONICAL_NAN {
        f.write_str("nan")
    } else if x.is_nan() {
        write!(f, "0x{:0w$X}", x.bits(), w = (T::WIDTH / 4) as usize)
    } else if v.is_infinite() {
        f.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        write!(f, "{shortest:?}")
    }
}

/// Element equality of bits: NaN equals itself, so literals compare structurally, and NaNs of
/// different bits (or zeros of different signs) are different literals.
impl PartialEq for TensorData {
    fn eq(&self, other: &Self) -> bool {
        fn same<T: SameElem>(a: &[T], b: &[T]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(*y))
        }
        match (self, other) {
            (TensorData::F32(a), TensorData::F32(b)) => same(a, b),
            (TensorData::F64(a), TensorData::F64(b)) => same(a, b),
            (TensorData::I32(a), TensorData::I32(b)) => same(a, b),
            (TensorData::I64(a), TensorData::I64(b)) => same(a, b),
            (TensorData::Bool(a), TensorData::Bool(b)) => same(a, b),
            (TensorData::F16(a), TensorData::F16(b)) => same(a, b),
            (TensorData::BF16(a), TensorData::BF16(b)) => same(a, b),
            (TensorData::I8(a), TensorData::I8(b)) => same(a, b),
            (TensorData::I16(a), TensorData::I16(b)) => same(a, b),
            (TensorData::U8(a), TensorData::U8(b)) => same(a, b),
            (TensorData::U16(a), TensorData::U16(b)) => same(a, b),
            (TensorData::U32(a), TensorData::U32(b)) => same(a, b),
            (TensorData::U64(a), TensorData::U64(b)) => same(a, b),
            _ => false,
        }
    }
}
