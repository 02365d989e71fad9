//! Compile-time attributes of ops, including dense tensor literals.

use crate::types::{DType, TensorType};
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
        crate::each_variant!(crate::attr::TensorData, self, v => v.len())
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

    fn all_equal(&self) -> bool {
        crate::each_variant!(crate::attr::TensorData, self, v => v.windows(2).all(|w| w[0].same(w[1])))
    }

    /// Elements `range`, in order.
    pub fn sub(&self, range: std::ops::Range<usize>) -> TensorData {
        crate::same_variant!(crate::attr::TensorData => crate::attr::TensorData, self, v => v[range].to_vec())
    }

    fn truncate(&mut self, n: usize) {
        crate::each_variant!(crate::attr::TensorData, self, v => v.truncate(n))
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
    fn write_elem(&self, f: &mut impl fmt::Write, i: usize) -> fmt::Result {
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
fn write_float<T: FloatBits>(f: &mut impl fmt::Write, x: T, shortest: impl fmt::Debug) -> fmt::Result {
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

/// A dense tensor literal: `dense<[[1.0, 2.0], [3.0, 4.0]]> : f32[2,2]`.
///
/// A literal whose elements are all equal is stored (and printed) as a splat, a single element
/// that fills the shape: `dense<0.0> : f32[256,1024]`.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorLiteral {
    ty: TensorType,
    data: TensorData,
}

impl TensorLiteral {
    /// Builds a literal; `data` holds either one element (a splat) or one per element of `ty`.
    pub fn new(ty: TensorType, mut data: TensorData) -> Result<Self, String> {
        if data.dtype() != ty.dtype {
            return Err(format!("literal elements are {} but the type is {ty}", data.dtype()));
        }
        let n = ty.num_elements().ok_or_else(|| format!("type {ty} has too many elements"))?;
        if data.len() as u64 != n && data.len() != 1 {
            return Err(format!("literal has {} elements but type {ty} holds {n}", data.len()));
        }
        if n > 1 && data.len() as u64 == n && data.all_equal() {
            data.truncate(1);
        }
        Ok(TensorLiteral { ty, data })
    }

    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// The stored elements: one for a splat, else every element in row-major order.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn is_splat(&self) -> bool {
        self.data.len() == 1 && self.ty.num_elements() != Some(1)
    }

    /// Rows `start..end` of dim 0 (a splat stays one). Errors when the literal has no rows
    /// or the range is not within them.
    pub fn rows(&self, start: u64, end: u64) -> Result<TensorLiteral, String> {
        let Some(&dim0) = self.ty.shape.first() else {
            return Err(format!("a scalar literal of type {} has no rows", self.ty));
        };
        if start > end || end > dim0 {
            return Err(format!("rows {start}..{end} are not within the {dim0} rows of {}", self.ty));
        }
        let mut shape = self.ty.shape.clone();
        shape[0] = end - start;
        let ty = self.ty.with_shape(shape);
        if self.data.len() == 1 {
            return Ok(TensorLiteral { ty, data: self.data.clone() });
        }
        let row: u64 = self.ty.shape[1..].iter().product();
        let data = self.data.sub((start * row) as usize..(end * row) as usize);
        TensorLiteral::new(ty, data)
    }

    fn write_nested(&self, f: &mut impl fmt::Write, dim: usize, offset: &mut usize) -> fmt::Result {
        if dim == self.ty.rank() {
            self.data.write_elem(f, *offset)?;
            *offset += 1;
            return Ok(());
        }
        f.write_char('[')?;
        for i in 0..self.ty.shape[dim] {
            if i > 0 {
                f.write_str(", ")?;
            }
            self.write_nested(f, dim + 1, offset)?;
        }
        f.write_char(']')
    }
}

impl fmt::Display for TensorLiteral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dense<")?;
        if self.is_splat() {
            self.data.write_elem(f, 0)?;
        } else {
            self.write_nested(f, 0, &mut 0)?;
        }
        write!(f, "> : {}", self.ty)
    }
}

/// An attribute value.
#[derive(Clone, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    DType(DType),
    Ints(Vec<i64>),
    Tensor(TensorLiteral),
}

impl PartialEq for Attr {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Attr::Int(a), Attr::Int(b)) => a == b,
            (Attr::Float(a), Attr::Float(b)) => a.to_bits() == b.to_bits(),
            (Attr::Bool(a), Attr::Bool(b)) => a == b,
            (Attr::Str(a), Attr::Str(b)) => a == b,
            (Attr::DType(a), Attr::DType(b)) => a == b,
            (Attr::Ints(a), Attr::Ints(b)) => a == b,
            (Attr::Tensor(a), Attr::Tensor(b)) => a == b,
            _ => false,
        }
    }
}

/// The kind of value an attribute holds, as the op table declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Int,
    Float,
    Bool,
    Str,
    DType,
    Ints,
    Tensor,
}

impl AttrKind {
    pub fn describe(self) -> &'static str {
        match self {
            AttrKind::Int => "an integer",
            AttrKind::Float => "a number",
            AttrKind::Bool => "true or false",
            AttrKind::Str => "a string",
            AttrKind::DType => "an element type (f32, i64, bool, ...)",
            AttrKind::Ints => "a list of integers like [0, 1]",
            AttrKind::Tensor => "a tensor literal like dense<[1.0, 2.0]> : f32[2]",
        }
    }
}

impl Attr {
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::Int(_) => AttrKind::Int,
            Attr::Float(_) => AttrKind::Float,
            Attr::Bool(_) => AttrKind::Bool,
            Attr::Str(_) => AttrKind::Str,
            Attr::DType(_) => AttrKind::DType,
            Attr::Ints(_) => AttrKind::Ints,
            Attr::Tensor(_) => AttrKind::Tensor,
        }
    }

    /// Converts to the declared kind where the spelling is ambiguous (an integer written for a
    /// float attribute, an empty list), or says why it cannot.
    pub fn coerce(self, kind: AttrKind) -> Result<Attr, Attr> {
        match (self, kind) {
            (a, k) if a.kind() == k => Ok(a),
            (Attr::Int(i), AttrKind::Float) => Ok(Attr::Float(i as f64)),
            (a, _) => Err(a),
        }
    }
}

pub(crate) fn write_string_literal(f: &mut impl fmt::Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(i) => write!(f, "{i}"),
            Attr::Float(x) => write_float(f, *x, x),
            Attr::Bool(b) => write!(f, "{b}"),
            Attr::Str(s) => write_string_literal(f, s),
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Ints(v) => {
                f.write_str("[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            Attr::Tensor(t) => write!(f, "{t}"),
        }
    }
}

/// The attributes of one node, in the order the op table declares them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    entries: Vec<(String, Attr)>,
}

impl Attrs {
    pub fn new() -> Self {
        Attrs::default()
    }

    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Sets an attribute, replacing an earlier value of the same name.
    pub fn set(&mut self, name: impl Into<String>, value: Attr) {
        let name = name.into();
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => e.1 = value,
            None => self.entries.push((name, value)),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<Attr> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.remove(i).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attr)> {
        self.entries.iter().map(|(n, a)| (n.as_str(), a))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn sort_by_key(&mut self, rank: impl Fn(&str) -> usize) {
        self.entries.sort_by_key(|(n, _)| rank(n));
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Attr::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A float attribute (the parser reads an integer written for one as a float).
    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            Attr::Float(x) => Some(*x),
            _ => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.get(name)? {
            Attr::Ints(v) => Some(v),
            _ => None,
        }
    }

    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            Attr::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Attr::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn dtype(&self, name: &str) -> Option<DType> {
        match self.get(name)? {
            Attr::DType(d) => Some(*d),
            _ => None,
        }
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorLiteral> {
        match self.get(name)? {
            Attr::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_print_nested_and_splat() {
        let t =
            TensorLiteral::new(TensorType::new(DType::F32, [2, 2]), TensorData::F32(vec![1.0, 2.5, -0.0, f32::NAN]))
                .unwrap();
        assert_eq!(t.to_string(), "dense<[[1.0, 2.5], [-0.0, nan]]> : f32[2,2]");
        let s = TensorLiteral::new(TensorType::new(DType::I64, [3]), TensorData::I64(vec![7, 7, 7])).unwrap();
        assert!(s.is_splat());
        assert_eq!(s.to_string(), "dense<7> : i64[3]");
        let e = TensorLiteral::new(TensorType::new(DType::F32, [2, 0]), TensorData::F32(vec![])).unwrap();
        assert_eq!(e.to_string(), "dense<[[], []]> : f32[2,0]");
        let sc = TensorLiteral::new(TensorType::scalar(DType::Bool), TensorData::Bool(vec![true])).unwrap();
        assert_eq!(sc.to_string(), "dense<true> : bool[]");
    }

    #[test]
    fn rows_of_a_literal() {
        let t =
            TensorLiteral::new(TensorType::new(DType::I32, [3, 2]), TensorData::I32(vec![1, 2, 3, 4, 5, 6])).unwrap();
        assert_eq!(t.rows(1, 3).unwrap().to_string(), "dense<[[3, 4], [5, 6]]> : i32[2,2]");
        assert_eq!(t.rows(0, 1).unwrap().to_string(), "dense<[[1, 2]]> : i32[1,2]");
        let s = TensorLiteral::new(TensorType::new(DType::F32, [5, 4]), TensorData::F32(vec![0.5])).unwrap();
        assert_eq!(s.rows(2, 5).unwrap().to_string(), "dense<0.5> : f32[3,4]");
        assert!(t.rows(2, 4).unwrap_err().contains("not within the 3 rows"));
        let sc = TensorLiteral::new(TensorType::scalar(DType::F32), TensorData::F32(vec![1.0])).unwrap();
        assert!(sc.rows(0, 1).unwrap_err().contains("no rows"));
    }

    #[test]
    fn literal_size_and_dtype_are_checked() {
        assert!(TensorLiteral::new(TensorType::new(DType::F32, [3]), TensorData::F32(vec![1.0, 2.0])).is_err());
        assert!(TensorLiteral::new(TensorType::new(DType::F32, [1]), TensorData::I32(vec![1])).is_err());
    }
}
