//! Tensors at run time: an n-dimensional ndarray of one of the IR's dtypes.

use graphc_ir::shape::fmt_shape;
use graphc_ir::{bf16, f16, DType, TensorData, TensorLiteral, TensorType};
use ndarray::{ArrayD, Dimension, IxDyn};
use std::borrow::Cow;
use std::fmt;

/// A dense tensor, row-major, of one of the IR's dtypes.
#[derive(Clone, Debug)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    Bool(ArrayD<bool>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I8(ArrayD<i8>),
    I16(ArrayD<i16>),
    U8(ArrayD<u8>),
    U16(ArrayD<u16>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
}

/// Applies the same expression to the array inside a tensor, whatever its dtype.
#[macro_export]
#[doc(hidden)]
macro_rules! each_dtype {
    ($t:expr, $a:ident => $body:expr) => {
        graphc_ir::each_variant!($crate::tensor::Tensor, $t, $a => $body)
    };
}

/// Like [`each_dtype!`], rewrapping the result in the same variant.
#[macro_export]
#[doc(hidden)]
macro_rules! map_dtype {
    ($t:expr, $a:ident => $body:expr) => {
        graphc_ir::same_variant!($crate::tensor::Tensor => $crate::tensor::Tensor, $t, $a => $body)
    };
}

/// An element widened to f64 (a bool is 0 or 1; a 64-bit integer may round).
pub trait ToF64: Copy {
    fn to_f64(self) -> f64;
}
macro_rules! to_f64_as {
    ($($t:ty),*) => {$(
        impl ToF64 for $t {
            fn to_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
to_f64_as!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);
impl ToF64 for bool {
    fn to_f64(self) -> f64 {
        u8::from(self) as f64
    }
}
impl ToF64 for f16 {
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}
impl ToF64 for bf16 {
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

/// The elements of a view (a transpose, a broadcast, a slice) in row-major order: trailing
/// axes that lie contiguously (a transpose of the leading axes, as a channel shuffle's) copy
/// as one block each; otherwise lane by lane along the last axis, a contiguous lane one copy,
/// a broadcast one a fill, others a strided loop (ndarray's element iterator, which
/// `as_standard_layout` uses, is several times slower). An error only when the buffer cannot
/// be allocated.
pub fn row_major<T: Clone>(v: ndarray::ArrayViewD<'_, T>) -> Result<Vec<T>, std::collections::TryReserveError> {
    let mut out = Vec::new();
    out.try_reserve_exact(v.len())?;
    // Blocks of a few elements (trailing axes of length 1) are not worth a view each.
    let tail = contiguous_tail(&v);
    let block: usize = v.shape()[v.ndim() - tail..].iter().product();
    append_row_major(v, if block >= 16 { tail } else { 0 }, &mut out);
    Ok(out)
}

/// How many trailing axes of `v` form one contiguous row-major block.
fn contiguous_tail<T>(v: &ndarray::ArrayViewD<'_, T>) -> usize {
    let (shape, strides) = (v.shape(), v.strides());
    let mut step = 1isize;
    let mut tail = 0;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s != step {
            break;
        }
        step = step.saturating_mul(n as isize);
        tail += 1;
    }
    tail
}

fn append_row_major<T: Clone>(v: ndarray::ArrayViewD<'_, T>, tail: usize, out: &mut Vec<T>) {
    if let Some(s) = v.as_slice() {
        return out.extend_from_slice(s);
    }
    match v.ndim().checked_sub(1) {
        None => out.extend(v.iter().cloned()),
        Some(_) if tail >= 2 && v.ndim() > tail => {
            for sub in v.outer_iter() {
                append_row_major(sub, tail, out);
            }
        }
        Some(last) => {
            for lane in v.lanes(ndarray::Axis(last)) {
                match lane.as_slice() {
                    Some(s) => out.extend_from_slice(s),
                    None => out.extend(lane.iter().cloned()),
                }
            }
        }
    }
}

impl Tensor {
    /// An f32 tensor's elements as one row-major buffer, expanded to `to` by numpy
    /// broadcasting when given (what a compiled kernel's flat indexing reads); borrowed where
    /// the tensor already is that buffer.
    pub fn f32_elements(&self, to: Option<&TensorType>) -> Result<Cow<'_, [f32]>, String> {
        let Tensor::F32(a) = self else { return Err(format!("{} is not f32", self.ty())) };
        Ok(match to {
            Some(ty) => {
                let shape: Vec<usize> = ty.shape.iter().map(|&d| d as usize).collect();
                let b = a.broadcast(shape).ok_or_else(|| format!("{} does not broadcast to {ty}", self.ty()))?;
                let v = row_major(b.view())
                    .map_err(|_| format!("cannot allocate {} f32s to expand {} to {ty}", b.len(), self.ty()))?;
                Cow::Owned(v)
            }
            None => match a.as_slice() {
                Some(s) => Cow::Borrowed(s),
                None => Cow::Owned(a.iter().copied().collect()),
            },
        })
    }

    /// The f32 tensor of type `ty` holding `v`, row-major; an error when the lengths differ.
    pub fn from_f32(v: Vec<f32>, ty: &TensorType) -> Result<Tensor, String> {
        // Up to rank 4 through ndarray's fixed-rank shapes (its checks and strides on arrays,
        // not on dynamic dims: each compiled kernel's result comes through here), which
        // `into_dyn` then keeps inline.
        let d = |i: usize| ty.shape[i] as usize;
        let a = match ty.shape.len() {
            0 => ndarray::Array0::from_shape_vec((), v).map(|a| a.into_dyn()),
            1 => ndarray::Array1::from_shape_vec(d(0), v).map(|a| a.into_dyn()),
            2 => ndarray::Array2::from_shape_vec((d(0), d(1)), v).map(|a| a.into_dyn()),
            3 => ndarray::Array3::from_shape_vec((d(0), d(1), d(2)), v).map(|a| a.into_dyn()),
            4 => ndarray::Array4::from_shape_vec((d(0), d(1), d(2), d(3)), v).map(|a| a.into_dyn()),
            _ => ArrayD::from_shape_vec(IxDyn(&ty.shape.iter().map(|&d| d as usize).collect::<Vec<usize>>()), v),
        };
        a.map(Tensor::F32).map_err(|e| e.to_string())
    }

    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::F64(_) => DType::F64,
            Tensor::I32(_) => DType::I32,
            Tensor::I64(_) => DType::I64,
            Tensor::Bool(_) => DType::Bool,
            Tensor::F16(_) => DType::F16,
            Tensor::BF16(_) => DType::BF16,
            Tensor::I8(_) => DType::I8,
            Tensor::I16(_) => DType::I16,
            Tensor::U8(_) => DType::U8,
            Tensor::U16(_) => DType::U16,
            Tensor::U32(_) => DType::U32,
            Tensor::U64(_) => DType::U64,
        }
    }

    pub fn shape(&self) -> &[usize] {
        each_dtype!(self, a => a.shape())
    }

    pub fn len(&self) -> usize {
        each_dtype!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensor's IR type.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape().iter().map(|&d| d as u64).collect::<Vec<_>>())
    }

    /// Whether the tensor is of type `ty` (as `self.ty() == *ty`, without building a type).
    pub fn is_of(&self, ty: &TensorType) -> bool {
        self.dtype() == ty.dtype
            && self.shape().len() == ty.shape.len()
            && self.shape().iter().zip(&ty.shape).all(|(&a, &b)| a as u64 == b)
    }

    /// A tensor of zeros (false for bool); an error instead of an abort when the type is too
    /// large to allocate.
    pub fn zeros(ty: &TensorType) -> Result<Tensor, String> {
        let shape = ix_checked(ty)?;
        let n = shape.size() as u64;
        Ok(match ty.dtype {
            DType::F32 => Tensor::F32(from_vec(shape, filled(n, 0.0, ty)?)),
            DType::F64 => Tensor::F64(from_vec(shape, filled(n, 0.0, ty)?)),
            DType::I32 => Tensor::I32(from_vec(shape, filled(n, 0, ty)?)),
            DType::I64 => Tensor::I64(from_vec(shape, filled(n, 0, ty)?)),
            DType::Bool => Tensor::Bool(from_vec(shape, filled(n, false, ty)?)),
            DType::F16 => Tensor::F16(from_vec(shape, filled(n, f16::ZERO, ty)?)),
            DType::BF16 => Tensor::BF16(from_vec(shape, filled(n, bf16::ZERO, ty)?)),
            DType::I8 => Tensor::I8(from_vec(shape, filled(n, 0, ty)?)),
            DType::I16 => Tensor::I16(from_vec(shape, filled(n, 0, ty)?)),
            DType::U8 => Tensor::U8(from_vec(shape, filled(n, 0, ty)?)),
            DType::U16 => Tensor::U16(from_vec(shape, filled(n, 0, ty)?)),
            DType::U32 => Tensor::U32(from_vec(shape, filled(n, 0, ty)?)),
            DType::U64 => Tensor::U64(from_vec(shape, filled(n, 0, ty)?)),
        })
    }

    /// A scalar (rank-0) tensor.
    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), v))
    }

    /// Builds a tensor from row-major elements; `None` when the count does not fit the shape.
    pub fn from_data(shape: &[usize], data: TensorData) -> Option<Tensor> {
        fn arr<T>(shape: &[usize], v: Vec<T>) -> Option<ArrayD<T>> {
            ArrayD::from_shape_vec(IxDyn(shape), v).ok()
        }
        Some(graphc_ir::same_variant!(TensorData => Tensor, data, v => arr(shape, v)?))
    }

    /// Little-endian element bytes, row-major (the safetensors layout; a bool is one byte, 0
    /// or 1).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        /// A row-major array's bytes in one copy where the host is little-endian, else
        /// element by element.
        fn bytes<T: bytemuck::Pod, const N: usize>(a: &ndarray::ArrayD<T>, le: fn(T) -> [u8; N]) -> Vec<u8> {
            match a.as_slice() {
                Some(s) if cfg!(target_endian = "little") => bytemuck::cast_slice(s).to_vec(),
                _ => a.iter().flat_map(|&x| le(x)).collect(),
            }
        }
        match self {
            Tensor::F32(a) => bytes(a, f32::to_le_bytes),
            Tensor::F64(a) => bytes(a, f64::to_le_bytes),
            Tensor::I32(a) => bytes(a, i32::to_le_bytes),
            Tensor::I64(a) => bytes(a, i64::to_le_bytes),
            Tensor::Bool(a) => a.iter().map(|&x| u8::from(x)).collect(),
            Tensor::F16(a) => bytes(a, f16::to_le_bytes),
            Tensor::BF16(a) => bytes(a, bf16::to_le_bytes),
            Tensor::I8(a) => bytes(a, i8::to_le_bytes),
            Tensor::I16(a) => bytes(a, i16::to_le_bytes),
            Tensor::U8(a) => bytes(a, u8::to_le_bytes),
            Tensor::U16(a) => bytes(a, u16::to_le_bytes),
            Tensor::U32(a) => bytes(a, u32::to_le_bytes),
            Tensor::U64(a) => bytes(a, u64::to_le_bytes),
        }
    }

    /// A tensor of `dtype` and `shape` from little-endian row-major element bytes (any nonzero
    /// byte a true bool); `None` when their number does not fit the shape.
    pub fn from_le_bytes(dtype: DType, shape: &[usize], data: &[u8]) -> Option<Tensor> {
        Tensor::from_le_pieces(dtype, shape, &[data])
    }

    /// [`Tensor::from_le_bytes`] of the bytes of `pieces` one after another (chunks as they
    /// came off the wire), copied once, into the elements' own storage.
    pub fn from_le_pieces(dtype: DType, shape: &[usize], pieces: &[impl AsRef<[u8]>]) -> Option<Tensor> {
        fn elements<T: bytemuck::Pod, const N: usize>(
            pieces: &[impl AsRef<[u8]>],
            le: fn([u8; N]) -> T,
        ) -> Option<Vec<T>> {
            let len: usize = pieces.iter().map(|p| p.as_ref().len()).sum();
            if !len.is_multiple_of(N) {
                return None;
            }
            if cfg!(target_endian = "little") {
                // One copy into the elements' own (aligned) storage.
                let mut v = vec![T::zeroed(); len / N];
                let mut at = 0;
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
                for p in pieces {
                    let p = p.as_ref();
                    bytes[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                return Some(v);
            }
            let data: Vec<u8> = pieces.iter().flat_map(|p| p.as_ref().iter().copied()).collect();
            Some(data.chunks_exact(N).map(|c| le(c.try_into().expect("chunks_exact gives N bytes"))).collect())
        }
        let data = match dtype {
            DType::F32 => TensorData::F32(elements(pieces, f32::from_le_bytes)?),
            DType::F64 => TensorData::F64(elements(pieces, f64::from_le_bytes)?),
            DType::I32 => TensorData::I32(elements(pieces, i32::from_le_bytes)?),
            DType::I64 => TensorData::I64(elements(pieces, i64::from_le_bytes)?),
            DType::Bool => TensorData::Bool(pieces.iter().flat_map(|p| p.as_ref().iter().map(|&b| b != 0)).collect()),
            DType::F16 => TensorData::F16(elements(pieces, f16::from_le_bytes)?),
            DType::BF16 => TensorData::BF16(elements(pieces, bf16::from_le_bytes)?),
            DType::I8 => TensorData::I8(elements(pieces, i8::from_le_bytes)?),
            DType::I16 => TensorData::I16(elements(pieces, i16::from_le_bytes)?),
            DType::U8 => TensorData::U8(elements(pieces, u8::from_le_bytes)?),
            DType::U16 => TensorData::U16(elements(pieces, u16::from_le_bytes)?),
            DType::U32 => TensorData::U32(elements(pieces, u32::from_le_bytes)?),
            DType::U64 => TensorData::U64(elements(pieces, u64::from_le_bytes)?),
        };
        Tensor::from_data(shape, data)
    }

    /// The value of a literal; a splat fills its shape. A splat's type may be far larger than
    /// its text, so its size is checked before anything is built. A literal in a weights file
    /// is read into the vector the tensor keeps (no copy after the read).
    pub fn from_literal(lit: &TensorLiteral) -> Result<Tensor, String> {
        let ty = lit.ty();
        let shape = ix_checked(ty)?;
        fn fill<T: Clone>(shape: IxDyn, v: Vec<T>, ty: &TensorType) -> Result<ArrayD<T>, String> {
            let v = if v.len() == 1 { filled(shape.size() as u64, v[0].clone(), ty)? } else { v };
            ArrayD::from_shape_vec(shape, v).map_err(|_| format!("a literal of type {ty} lacks elements"))
        }
        let data = lit.elements()?.into_owned();
        Ok(graphc_ir::same_variant!(TensorData => Tensor, data, v => fill(shape.clone(), v, ty)?))
    }

    /// The elements in row-major order.
    pub fn to_data(&self) -> TensorData {
        graphc_ir::same_variant!(Tensor => TensorData, self, a => a.iter().copied().collect())
    }

    /// The tensor as a literal of its own type (constant folding writes these into the IR).
    pub fn to_literal(&self) -> TensorLiteral {
        TensorLiteral::new(self.ty(), self.to_data()).expect("a tensor's data fits its own type")
    }

    /// Equality of dtype, shape and every element's bits: what checkpoints and restores
    /// promise (NaN payloads and the sign of zero included).
    pub fn bit_identical(&self, other: &Tensor) -> bool {
        if self.shape() != other.shape() {
            return false;
        }
        self.dtype() == other.dtype() && self.to_le_bytes() == other.to_le_bytes()
    }

    /// Elements widened to f64, for comparisons and summaries.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        each_dtype!(self, a => a.iter().map(|&x| x.to_f64()).collect())
    }

    /// A one-line summary: the type and the first `n` elements.
    pub fn summary(&self, n: usize) -> String {
        let shown: Vec<String> = each_dtype!(self, a => a.iter().take(n).map(|x| format!("{x:?}")).collect());
        let more = if self.len() > n { ", ..." } else { "" };
        format!("{}{} [{}{more}]", self.dtype(), fmt_shape(&self.ty().shape), shown.join(", "))
    }
}

impl PartialEq for Tensor {
    /// Exact equality of dtype, shape and values (IEEE: NaN is unequal to itself).
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Tensor::F32(a), Tensor::F32(b)) => a == b,
            (Tensor::F64(a), Tensor::F64(b)) => a == b,
            (Tensor::I32(a), Tensor::I32(b)) => a == b,
            (Tensor::I64(a), Tensor::I64(b)) => a == b,
            (Tensor::Bool(a), Tensor::Bool(b)) => a == b,
            (Tensor::F16(a), Tensor::F16(b)) => a == b,
            (Tensor::BF16(a), Tensor::BF16(b)) => a == b,
            (Tensor::I8(a), Tensor::I8(b)) => a == b,
            (Tensor::I16(a), Tensor::I16(b)) => a == b,
            (Tensor::U8(a), Tensor::U8(b)) => a == b,
            (Tensor::U16(a), Tensor::U16(b)) => a == b,
            (Tensor::U32(a), Tensor::U32(b)) => a == b,
            (Tensor::U64(a), Tensor::U64(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary(8))
    }
}

/// An element type of tensors: the variant holding arrays of it.
pub trait Element: Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// The tensor's array when it holds this element type.
    fn array(t: &Tensor) -> Option<&ArrayD<Self>>;
}

macro_rules! from_array {
    ($($t:ty => $v:ident),*) => {$(
        impl From<ArrayD<$t>> for Tensor {
            fn from(a: ArrayD<$t>) -> Tensor {
                Tensor::$v(a)
            }
        }
        impl Element for $t {
            fn array(t: &Tensor) -> Option<&ArrayD<Self>> {
                match t {
                    Tensor::$v(a) => Some(a),
                    _ => None,
                }
            }
        }
    )*};
}
from_array!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, bool => Bool, f16 => F16, bf16 => BF16, i8 => I8,
    i16 => I16, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

/// The ndarray shape of a type, checked: every dim and the element count fit in `usize`, and
/// the bytes in `isize` (what Rust's allocator and ndarray accept).
pub fn ix_checked(ty: &TensorType) -> Result<IxDyn, String> {
    let too_large = || format!("a tensor of type {ty} has more elements than memory can address");
    let bytes = crate::limits::tensor_bytes(ty).ok_or_else(too_large)?;
    if bytes > isize::MAX as u64 {
        return Err(too_large());
    }
    let dims = ty.shape.iter().map(|&d| usize::try_from(d).map_err(|_| too_large())).collect::<Result<Vec<_>, _>>()?;
    Ok(IxDyn(&dims))
}

/// A vector with room for `n` elements of a tensor of type `ty`, allocated fallibly: a
/// failed allocation is an error naming the bytes wanted, not an abort.
pub fn try_vec<T>(n: u64, ty: &TensorType) -> Result<Vec<T>, String> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>() as u64);
    let failed = || format!("cannot allocate {bytes} bytes for a tensor of type {ty}");
    let n = usize::try_from(n).map_err(|_| failed())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| failed())?;
    Ok(v)
}

/// `n` copies of `x`, allocated fallibly (see [`try_vec`]).
pub fn filled<T: Clone>(n: u64, x: T, ty: &TensorType) -> Result<Vec<T>, String> {
    let mut v = try_vec(n, ty)?;
    v.resize(n as usize, x);
    Ok(v)
}

/// An array from a vector that holds exactly `shape.size()` elements.
fn from_vec<T>(shape: IxDyn, v: Vec<T>) -> ArrayD<T> {
    ArrayD::from_shape_vec(shape, v).expect("the vector was sized for the shape")
}

/// An ndarray shape from an IR shape.
pub fn ix(shape: &[u64]) -> IxDyn {
    IxDyn(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphc_ir::TensorLiteral;

    #[test]
    fn row_major_copies_equal_ndarrays_on_every_kind_of_view() {
        let a = ndarray::ArrayD::from_shape_vec(IxDyn(&[2, 3, 4]), (0..24).collect::<Vec<i32>>()).unwrap();
        let empty = ndarray::ArrayD::<i32>::zeros(IxDyn(&[2, 0, 3]));
        let scalar = ndarray::arr0(7).into_dyn();
        let (row, column) = (a.slice(ndarray::s![0, .., ..]).into_dyn(), a.slice(ndarray::s![.., .., 0..1]).into_dyn());
        let views = [
            a.view(),
            a.view().permuted_axes(IxDyn(&[2, 0, 1])),
            a.view().permuted_axes(IxDyn(&[1, 2, 0])),
            a.slice(ndarray::s![.., ..;2, 1..;2]).into_dyn(),
            a.slice(ndarray::s![..;-1, .., ..]).into_dyn(),
            row.broadcast(IxDyn(&[2, 3, 4])).unwrap(),
            column.broadcast(IxDyn(&[2, 3, 5])).unwrap(),
            empty.view(),
            empty.view().permuted_axes(IxDyn(&[2, 1, 0])),
            scalar.view(),
        ];
        // Views whose trailing axes are one contiguous block (copied block by block).
        let b = ndarray::ArrayD::from_shape_vec(IxDyn(&[2, 3, 4, 5]), (0..120).collect::<Vec<i32>>()).unwrap();
        let shuffle = b.view().into_shape_with_order(IxDyn(&[2, 3, 1, 4, 5])).unwrap();
        let blocks = [
            b.view().permuted_axes(IxDyn(&[1, 0, 2, 3])),
            b.view().permuted_axes(IxDyn(&[2, 1, 0, 3])),
            b.slice(ndarray::s![..;-1, .., .., ..]).into_dyn(),
            b.slice(ndarray::s![.., 1.., .., ..]).into_dyn(),
            shuffle.permuted_axes(IxDyn(&[1, 0, 2, 3, 4])),
            b.slice(ndarray::s![.., .., 1..3, ..]).into_dyn(),
        ];
        for v in views.into_iter().chain(blocks) {
            let want: Vec<i32> = v.iter().copied().collect();
            assert_eq!(row_major(v.clone()).unwrap(), want, "{:?} {:?}", v.shape(), v.strides());
        }
    }

    fn huge(dtype: DType) -> TensorType {
        TensorType::new(dtype, [1u64 << 61])
    }

    #[test]
    fn huge_splats_and_zeros_are_errors_not_aborts() {
        for n in [1u64 << 61, 2_000_000_000_000_000_000] {
            let ty = TensorType::new(DType::F32, [n]);
            let lit = TensorLiteral::new(ty.clone(), TensorData::F32(vec![1.0])).unwrap();
            let e = Tensor::from_literal(&lit).unwrap_err();
            assert!(e.contains(&format!("f32[{n}]")), "{e}");
            assert!(Tensor::zeros(&ty).is_err());
        }
        assert!(Tensor::zeros(&huge(DType::Bool)).is_err());
    }

    #[test]
    fn small_splats_fill_their_shape() {
        let ty = TensorType::new(DType::I32, [2, 3]);
        let lit = TensorLiteral::new(ty.clone(), TensorData::I32(vec![7])).unwrap();
        let t = Tensor::from_literal(&lit).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.to_data(), TensorData::I32(vec![7; 6]));
        assert_eq!(Tensor::zeros(&ty).unwrap().to_data(), TensorData::I32(vec![0; 6]));
    }
}
