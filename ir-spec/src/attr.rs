//! Compile-time attributes of ops, including tensor literals.

use crate::elements::write_float;
use crate::types::{DType, TensorType};
use crate::weights_file::External;
use std::borrow::Cow;
use std::fmt;

pub use crate::elements::{FloatBits, TensorData};
pub use half::{bf16, f16};

/// A tensor literal: its type and its elements, written in the text
/// (`dense<[[1.0, 2.0], [3.0, 4.0]]> : f32[2,2]`) or stored in a weights file beside it
/// (`safetensors<"m.weights.safetensors", "w"> : f32[2560,4096]`), read only when asked for.
///
/// A literal in the text whose elements are all equal is stored (and printed) as a splat, a
/// single element that fills the shape: `dense<0.0> : f32[256,1024]`.
///
/// Literals are equal when their types and elements are: two references to the same tensor
/// of the same file are equal without a read; a reference and a literal in the text (or a
/// tensor of another file) are compared element by element, read for the purpose, and are
/// unequal when the file cannot be read.
#[derive(Clone, Debug)]
pub struct TensorLiteral {
    ty: TensorType,
    elements: Elements,
}

#[derive(Clone, Debug)]
enum Elements {
    /// In the text: one element (a splat) or every element in row-major order.
    Text(TensorData),
    /// In a weights file, of the literal's type.
    File(External),
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
        Ok(TensorLiteral { ty, elements: Elements::Text(data) })
    }

    /// A literal of a weights file's tensor; an error unless the tensor is of type `ty`.
    pub fn stored(ty: TensorType, tensor: External) -> Result<Self, String> {
        if *tensor.ty() != ty {
            return Err(format!(
                "tensor \"{}\" of weights file \"{}\" is {}, but the literal's type is {ty}",
                tensor.name(),
                tensor.path(),
                tensor.ty()
            ));
        }
        Ok(TensorLiteral { ty, elements: Elements::File(tensor) })
    }

    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// The elements stored: one for a splat, else one per element of the type.
    pub fn len(&self) -> usize {
        match &self.elements {
            Elements::Text(d) => d.len(),
            Elements::File(_) => self.ty.num_elements().unwrap_or(0) as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_splat(&self) -> bool {
        self.len() == 1 && self.ty.num_elements() != Some(1)
    }

    /// The elements written in the text (one for a splat); `None` for a weights file's tensor.
    pub fn text_data(&self) -> Option<&TensorData> {
        match &self.elements {
            Elements::Text(d) => Some(d),
            Elements::File(_) => None,
        }
    }

    /// The weights file's tensor the elements are in, if they are not in the text.
    pub fn stored_in(&self) -> Option<&External> {
        match &self.elements {
            Elements::Text(_) => None,
            Elements::File(e) => Some(e),
        }
    }

    /// The elements (one for a splat): the text's, or read from the weights file now (not kept:
    /// the caller owns what was read).
    pub fn elements(&self) -> Result<Cow<'_, TensorData>, String> {
        match &self.elements {
            Elements::Text(d) => Ok(Cow::Borrowed(d)),
            Elements::File(e) => e.read(0..self.len() as u64).map(Cow::Owned),
        }
    }

    /// The first element (none when the literal has no elements), reading one at most.
    pub fn head(&self) -> Result<TensorData, String> {
        let n = self.len().min(1);
        match &self.elements {
            Elements::Text(d) => Ok(d.sub(0..n)),
            Elements::File(e) => e.read(0..n as u64),
        }
    }

    /// The literal with its elements in the text (read from its weights file if they are
    /// there), for a module printed whole.
    pub fn in_text(&self) -> Result<TensorLiteral, String> {
        match &self.elements {
            Elements::Text(_) => Ok(self.clone()),
            Elements::File(_) => TensorLiteral::new(self.ty.clone(), self.elements()?.into_owned()),
        }
    }

    /// Rows `start..end` of dim 0, in the text (a splat stays one; a weights file's tensor is
    /// read for those rows only). Errors when the literal has no rows or the range is not
    /// within them.
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
        let row: u64 = self.ty.shape[1..].iter().product();
        let data = match &self.elements {
            Elements::Text(d) if d.len() == 1 => return Ok(TensorLiteral { ty, elements: Elements::Text(d.clone()) }),
            Elements::Text(d) => d.sub((start * row) as usize..(end * row) as usize),
            Elements::File(e) => e.read(start * row..end * row)?,
        };
        TensorLiteral::new(ty, data)
    }

    fn write_nested(
        data: &TensorData,
        ty: &TensorType,
        f: &mut impl fmt::Write,
        dim: usize,
        offset: &mut usize,
    ) -> fmt::Result {
        if dim == ty.rank() {
            data.write_elem(f, *offset)?;
            *offset += 1;
            return Ok(());
        }
        f.write_char('[')?;
        for i in 0..ty.shape[dim] {
            if i > 0 {
                f.write_str(", ")?;
            }
            Self::write_nested(data, ty, f, dim + 1, offset)?;
        }
        f.write_char(']')
    }
}

impl PartialEq for TensorLiteral {
    fn eq(&self, other: &Self) -> bool {
        if self.ty != other.ty {
            return false;
        }
        match (&self.elements, &other.elements) {
            (Elements::Text(a), Elements::Text(b)) => a == b,
            (Elements::File(a), Elements::File(b)) if a.same_tensor(b) => true,
            _ => match (self.elements(), other.elements()) {
                (Ok(a), Ok(b)) => same_elements(&a, &b),
                _ => false,
            },
        }
    }
}

/// Equal elements of one type, either side maybe a splat (one element) of the other's.
fn same_elements(a: &TensorData, b: &TensorData) -> bool {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    if long.len() == short.len() {
        return long == short;
    }
    short.len() == 1 && long.all_equal() && long.sub(0..1) == *short
}

impl fmt::Display for TensorLiteral {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.elements {
            Elements::Text(d) if self.is_splat() => {
                f.write_str("dense<")?;
                d.write_elem(f, 0)?;
            }
            Elements::Text(d) => {
                f.write_str("dense<")?;
                Self::write_nested(d, &self.ty, f, 0, &mut 0)?;
            }
            Elements::File(e) => {
                f.write_str("safetensors<")?;
                write_string_literal(f, e.path())?;
                f.write_str(", ")?;
                write_string_literal(f, e.name())?;
            }
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
