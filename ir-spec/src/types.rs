//! Element types, tensor types and handle types: the type system of the IR.

use std::fmt;

/// Element type of a tensor.
///
/// f16 and bf16 are storage types: every op computes on them in f32 and rounds the result to
/// nearest-even when it stores it. Integers wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
    Bool,
    F16,
    BF16,
    I8,
    I16,
    U8,
    U16,
    U32,
    U64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
        }
    }

    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Every dtype's name, for messages: "f32, f64, ..., bool".
    pub fn names() -> String {
        DType::ALL.map(DType::name).join(", ")
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned()
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The integer types indices, labels and counts come in.
    pub fn is_index(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Floats and integers: the types arithmetic is defined on.
    pub fn is_numeric(self) -> bool {
        self.is_float() || self.is_int()
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense tensor type with a static shape: `f32[256,784]`; `f32[]` is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<u64>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Vec<u64>>) -> Self {
        TensorType { dtype, shape: shape.into() }
    }

    pub fn scalar(dtype: DType) -> Self {
        TensorType { dtype, shape: Vec::new() }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, or `None` when it does not fit in a u64.
    pub fn num_elements(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    pub fn with_shape(&self, shape: Vec<u64>) -> Self {
        TensorType { dtype: self.dtype, shape }
    }

    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType { dtype, shape: self.shape.clone() }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The type of an SSA value.
///
/// Handles (`var`, `queue`) name state that lives outside the graph, in the session; `token`
/// carries no data and orders side effects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Tensor(TensorType),
    /// A handle to a variable holding a tensor of this type.
    Var(TensorType),
    /// A handle to a FIFO queue whose elements are tuples of these component types.
    Queue(Vec<TensorType>),
    /// A value with no data: the result of an op run only for its effect.
    Token,
}

impl Type {
    pub fn tensor(dtype: DType, shape: impl Into<Vec<u64>>) -> Self {
        Type::Tensor(TensorType::new(dtype, shape))
    }

    pub fn as_tensor(&self) -> Option<&TensorType> {
        match self {
            Type::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Short word for the kind of type, used in diagnostics ("expected a tensor, got a token").
    pub fn kind_word(&self) -> &'static str {
        match self {
            Type::Tensor(_) => "a tensor",
            Type::Var(_) => "a variable handle",
            Type::Queue(_) => "a queue handle",
            Type::Token => "a token",
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Tensor(t) => write!(f, "{t}"),
            Type::Var(t) => write!(f, "var<{t}>"),
            Type::Queue(ts) => {
                f.write_str("queue<")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(">")
            }
            Type::Token => f.write_str("token"),
        }
    }
}

impl From<TensorType> for Type {
    fn from(t: TensorType) -> Self {
        Type::Tensor(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_spellings() {
        assert_eq!(Type::tensor(DType::F32, [2, 3]).to_string(), "f32[2,3]");
        assert_eq!(Type::tensor(DType::Bool, []).to_string(), "bool[]");
        assert_eq!(Type::Var(TensorType::new(DType::I64, [4])).to_string(), "var<i64[4]>");
        let q = Type::Queue(vec![TensorType::new(DType::F32, [2]), TensorType::scalar(DType::I32)]);
        assert_eq!(q.to_string(), "queue<f32[2], i32[]>");
        assert_eq!(Type::Token.to_string(), "token");
    }

    #[test]
    fn element_count_overflow_is_none() {
        assert_eq!(TensorType::new(DType::F32, [u64::MAX, 2]).num_elements(), None);
        assert_eq!(TensorType::new(DType::F32, [3, 0]).num_elements(), Some(0));
        assert_eq!(TensorType::scalar(DType::F32).num_elements(), Some(1));
    }
}
