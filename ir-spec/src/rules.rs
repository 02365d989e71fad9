//! Type rules: for each op, the result types its operands, attributes and regions imply, or an
//! error that says what is wrong and what would be right.

use crate::attr::Attr;
use crate::device::DeviceSpec;
use crate::opdef::{AttrDefault, Blame, InferCtx, InferError, Op};
use crate::shape::{broadcast_shapes, broadcasts_to, fmt_shape, normalize_axis};
use crate::types::{DType, TensorType, Type};

type R = Result<Vec<Type>, InferError>;

fn err<T>(blame: Blame, msg: impl Into<String>) -> Result<T, InferError> {
    Err(InferError::new(blame, msg))
}

impl InferCtx<'_> {
    fn tensor(&self, i: usize) -> Result<&TensorType, InferError> {
        match &self.operands[i] {
            Type::Tensor(t) => Ok(t),
            other => err(
                Blame::Operand(i),
                format!(
                    "operand {i} of {} must be a tensor, but it is {} ({other})",
                    self.op.name(),
                    other.kind_word()
                ),
            ),
        }
    }

    /// The attribute as written, else its declared default.
    fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.get(name).or_else(|| match &self.def.attr(name)?.default {
            AttrDefault::Value(v) => Some(v),
            _ => None,
        })
    }

    fn int_attr(&self, name: &'static str) -> Result<i64, InferError> {
        match self.attr(name) {
            Some(Attr::Int(i)) => Some(*i),
            _ => None,
        }
        .ok_or_else(|| InferError::new(Blame::Op, format!("{} needs the integer attribute '{name}'", self.op.name())))
    }

    fn ints_attr(&self, name: &'static str) -> Result<&[i64], InferError> {
        self.attrs.ints(name).ok_or_else(|| {
            InferError::new(Blame::Op, format!("{} needs the attribute '{name}', a list of integers", self.op.name()))
        })
    }

    fn str_attr(&self, name: &'static str) -> Result<&str, InferError> {
        self.attrs.str(name).ok_or_else(|| {
            InferError::new(Blame::Op, format!("{} needs the string attribute '{name}'", self.op.name()))
        })
    }

    fn axis(&self, name: &'static str, rank: usize) -> Result<usize, InferError> {
        normalize_axis(self.int_attr(name)?, rank).map_err(|m| InferError::new(Blame::Attr(name), m))
    }

    /// The single declared result type, for ops whose type is given rather than derived.
    fn declared_one(&self) -> Result<&Type, InferError> {
        match self.declared {
            Some([t]) => Ok(t),
            Some(ts) => {
                err(Blame::Op, format!("{} has one result, but {} types are written", self.op.name(), ts.len()))
            }
            None => err(Blame::Op, format!("{} needs its result type written after ':'", self.op.name())),
        }
    }
}

fn check_dtype(ctx: &InferCtx, i: usize, ok: fn(DType) -> bool, what: &str) -> Result<TensorType, InferError> {
    let t = ctx.tensor(i)?;
    if ok(t.dtype) {
        Ok(t.clone())
    } else {
        err(Blame::Operand(i), format!("{} takes {what}, but operand {i} is {t}", ctx.op.name()))
    }
}

fn same_dtype(ctx: &InferCtx, a: usize, b: usize) -> Result<(), InferError> {
    let (ta, tb) = (ctx.tensor(a)?, ctx.tensor(b)?);
    if ta.dtype != tb.dtype {
        return err(
            Blame::Operand(b),
            format!(
                "{} needs operands of one dtype, but operand {a} is {ta} and operand {b} is {tb}; insert a cast",
                ctx.op.name()
            ),
        );
    }
    Ok(())
}

fn broadcast_operands(ctx: &InferCtx, idx: &[usize]) -> Result<Vec<u64>, InferError> {
    let mut shape = ctx.tensor(idx[0])?.shape.clone();
    for &i in &idx[1..] {
        shape = broadcast_shapes(&shape, &ctx.tensor(i)?.shape)
            .map_err(|m| InferError::new(Blame::Operand(i), format!("{}: {m}", ctx.op.name())))?;
    }
    Ok(shape)
}

/// The one result of an op, checked: shapes come from attributes and operand dims, so a
/// result may have more elements than fit in 64 bits, or a dim that the IR's (signed 64-bit)
/// integers cannot spell.
fn one(ctx: &InferCtx, t: TensorType) -> R {
    if let Some(d) = t.shape.iter().find(|&&d| d > i64::MAX as u64) {
        return err(
            Blame::Op,
            format!("{}: the result would have a dim of {d}, more than the IR can spell", ctx.op.name()),
        );
    }
    if t.num_elements().is_none() {
        return err(
            Blame::Op,
            format!("{}: the result {t} would have more elements than fit in 64 bits", ctx.op.name()),
        );
    }
    Ok(vec![Type::Tensor(t)])
}

pub fn unary_float(ctx: &InferCtx) -> R {
    one(ctx, check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?)
}

pub fn unary_numeric(ctx: &InferCtx) -> R {
    one(ctx, check_dtype(ctx, 0, DType::is_numeric, "numbers (floats or integers)")?)
}

/// Logical on bool, bitwise on integers.
fn is_logical(d: DType) -> bool {
    d == DType::Bool || d.is_int()
}

pub fn unary_logical(ctx: &InferCtx) -> R {
    one(ctx, check_dtype(ctx, 0, is_logical, "bool or integers")?)
}

fn binary(ctx: &InferCtx, ok: fn(DType) -> bool, what: &str, out: Option<DType>) -> R {
    let a = check_dtype(ctx, 0, ok, what)?;
    check_dtype(ctx, 1, ok, what)?;
    same_dtype(ctx, 0, 1)?;
    let shape = broadcast_operands(ctx, &[0, 1])?;
    one(ctx, TensorType::new(out.unwrap_or(a.dtype), shape))
}

pub fn binary_numeric(ctx: &InferCtx) -> R {
    binary(ctx, DType::is_numeric, "numbers (floats or integers)", None)
}

pub fn binary_logical(ctx: &InferCtx) -> R {
    binary(ctx, is_logical, "bool or integers", None)
}

pub fn binary_int(ctx: &InferCtx) -> R {
    binary(ctx, DType::is_int, "integers", None)
}

pub fn compare_eq(ctx: &InferCtx) -> R {
    binary(ctx, |_| true, "tensors", Some(DType::Bool))
}

pub fn compare_ordered(ctx: &InferCtx) -> R {
    binary(ctx, DType::is_numeric, "numbers (floats or integers)", Some(DType::Bool))
}

pub fn select(ctx: &InferCtx) -> R {
    check_dtype(ctx, 0, |d| d == DType::Bool, "a bool condition")?;
    let a = ctx.tensor(1)?.clone();
    same_dtype(ctx, 1, 2)?;
    let shape = broadcast_operands(ctx, &[0, 1, 2])?;
    one(ctx, a.with_shape(shape))
}

pub fn identity(ctx: &InferCtx) -> R {
    one(ctx, ctx.tensor(0)?.clone())
}

pub fn cast(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let to = ctx
        .attrs
        .dtype("to")
        .ok_or_else(|| InferError::new(Blame::Op, "cast needs the attribute 'to', an element type"))?;
    one(ctx, t.with_dtype(to))
}

pub fn bitcast(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let to = ctx
        .attrs
        .dtype("to")
        .ok_or_else(|| InferError::new(Blame::Op, "bitcast needs the attribute 'to', an element type"))?;
    if to.size_bytes() != t.dtype.size_bytes() {
        return Err(InferError::new(
            Blame::Op,
            format!(
                "bitcast keeps the width: {} has {} bytes, {to} has {}",
                t.dtype,
                t.dtype.size_bytes(),
                to.size_bytes()
            ),
        ));
    }
    one(ctx, t.with_dtype(to))
}

pub fn constant(ctx: &InferCtx) -> R {
    let lit = ctx
        .attrs
        .tensor("value")
        .ok_or_else(|| InferError::new(Blame::Op, "constant needs the attribute 'value', a tensor literal"))?;
    one(ctx, lit.ty().clone())
}

pub fn reshape(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let spec = ctx.ints_attr("shape")?;
    let n = t.num_elements().ok_or_else(|| {
        InferError::new(Blame::Operand(0), format!("reshape: {t} has more elements than fit in 64 bits"))
    })?;
    let mut known: u64 = 1;
    let mut hole = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if hole.is_none() => hole = Some(i),
            -1 => return err(Blame::Attr("shape"), "reshape: at most one dim of 'shape' may be -1"),
            d if d < 0 => {
                return err(
                    Blame::Attr("shape"),
                    format!("reshape: dim {d} is negative; dims are sizes, or -1 for the one left to infer"),
                )
            }
            d => {
                known = known
                    .checked_mul(d as u64)
                    .ok_or_else(|| InferError::new(Blame::Attr("shape"), "reshape: 'shape' has too many elements"))?
            }
        }
    }
    let mut shape: Vec<u64> = spec.iter().map(|&d| d.max(0) as u64).collect();
    if let Some(h) = hole {
        if known == 0 || n % known != 0 {
            return err(
                Blame::Attr("shape"),
                format!("reshape: cannot infer the -1 dim: {n} elements of {t} are not a multiple of {known}"),
            );
        }
        shape[h] = n / known;
    } else if known != n {
        return err(
            Blame::Attr("shape"),
            format!("reshape: {t} has {n} elements but shape {} holds {known}", fmt_shape(&shape)),
        );
    }
    one(ctx, t.with_shape(shape))
}

fn non_negative_shape(ctx: &InferCtx, name: &'static str) -> Result<Vec<u64>, InferError> {
    ctx.ints_attr(name)?
        .iter()
        .map(|&d| {
            u64::try_from(d).map_err(|_| {
                InferError::new(Blame::Attr(name), format!("{}: dim {d} of '{name}' is negative", ctx.op.name()))
            })
        })
        .collect()
}

pub fn broadcast(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let shape = non_negative_shape(ctx, "shape")?;
    if !broadcasts_to(&t.shape, &shape) {
        return err(Blame::Attr("shape"), format!("broadcast: {t} does not broadcast to {}: align the shapes on the right; each operand dim must equal the target's or be 1", fmt_shape(&shape)));
    }
    one(ctx, t.with_shape(shape))
}

pub fn transpose(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let perm = ctx.ints_attr("perm")?;
    let rank = t.rank();
    let mut seen = vec![false; rank];
    let ok = perm.len() == rank
        && perm.iter().all(|&p| {
            let fresh = p >= 0 && (p as usize) < rank && !seen[p as usize];
            if fresh {
                seen[p as usize] = true;
            }
            fresh
        });
    if !ok {
        return err(Blame::Attr("perm"), format!("transpose: perm {perm:?} is not a permutation of 0..{rank} for {t}"));
    }
    one(ctx, t.with_shape(perm.iter().map(|&p| t.shape[p as usize]).collect()))
}

pub fn concat(ctx: &InferCtx) -> R {
    let first = ctx.tensor(0)?.clone();
    let axis = ctx.axis("axis", first.rank())?;
    let mut shape = first.shape.clone();
    for i in 1..ctx.operands.len() {
        let t = ctx.tensor(i)?;
        same_dtype(ctx, 0, i)?;
        let agree = t.rank() == first.rank() && (0..t.rank()).all(|d| d == axis || t.shape[d] == first.shape[d]);
        if !agree {
            return err(Blame::Operand(i), format!("concat along axis {axis}: operand {i} is {t} but operand 0 is {first}; every dim but the axis must agree"));
        }
        shape[axis] = shape[axis].checked_add(t.shape[axis]).ok_or_else(|| {
            InferError::new(Blame::Operand(i), format!("concat along axis {axis}: the result's dim overflows 64 bits"))
        })?;
    }
    one(ctx, first.with_shape(shape))
}

pub fn slice(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let starts = ctx.ints_attr("starts")?;
    let ends = ctx.ints_attr("ends")?;
    let ones = vec![1; t.rank()];
    let steps = ctx.attrs.ints("steps").unwrap_or(&ones);
    for (name, v) in [("starts", starts), ("ends", ends), ("steps", steps)] {
        if v.len() != t.rank() {
            return err(
                Blame::Attr(name),
                format!("slice: '{name}' has {} entries but {t} has rank {}", v.len(), t.rank()),
            );
        }
    }
    let mut shape = Vec::with_capacity(t.rank());
    for d in 0..t.rank() {
        if steps[d] < 1 {
            return err(Blame::Attr("steps"), format!("slice: step {} of dim {d} must be at least 1", steps[d]));
        }
        let dim = i64::try_from(t.shape[d])
            .or_else(|_| err(Blame::Operand(0), format!("slice: dim {d} of {t} is larger than an index can be")))?;
        let (s, e) = (clamp_index(starts[d], dim), clamp_index(ends[d], dim));
        shape.push(if e > s { ((e - s) as u64).div_ceil(steps[d] as u64) } else { 0 });
    }
    one(ctx, t.with_shape(shape))
}

/// Python-style index resolution: negative counts from the end, then clamp to [0, dim].
pub fn clamp_index(i: i64, dim: i64) -> i64 {
    let i = if i < 0 { i.saturating_add(dim) } else { i };
    i.clamp(0, dim)
}

pub fn top_k(ctx: &InferCtx) -> R {
    let t = check_dtype(ctx, 0, DType::is_numeric, "numbers (floats or integers)")?;
    let axis = ctx.axis("axis", t.rank())?;
    let k = ctx.int_attr("k")?;
    if k < 0 || k as u64 > t.shape[axis] {
        return err(
            Blame::Attr("k"),
            format!("top_k: k = {k} is not within 0..={} (axis {axis} of {t})", t.shape[axis]),
        );
    }
    let mut shape = t.shape.clone();
    shape[axis] = k as u64;
    Ok(vec![Type::Tensor(t.with_shape(shape.clone())), Type::Tensor(TensorType::new(DType::I64, shape))])
}

pub fn split(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    let axis = ctx.axis("axis", t.rank())?;
    let sizes = non_negative_shape(ctx, "sizes")?;
    if sizes.is_empty() {
        return err(Blame::Attr("sizes"), "split: 'sizes' needs at least one entry");
    }
    let total = sizes.iter().try_fold(0u64, |a, &s| a.checked_add(s));
    if total != Some(t.shape[axis]) {
        return err(
            Blame::Attr("sizes"),
            format!(
                "split: sizes {sizes:?} sum to {} but axis {axis} of {t} has {}",
                total.map_or("too much".into(), |s| s.to_string()),
                t.shape[axis]
            ),
        );
    }
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = t.shape.clone();
            shape[axis] = s;
            Type::Tensor(t.with_shape(shape))
        })
        .collect())
}

pub fn gather(ctx: &InferCtx) -> R {
    let data = ctx.tensor(0)?;
    let idx = check_dtype(ctx, 1, DType::is_index, "integer indices (i32, i64)")?;
    let axis = ctx.axis("axis", data.rank())?;
    let mut shape = data.shape[..axis].to_vec();
    shape.extend_from_slice(&idx.shape);
    shape.extend_from_slice(&data.shape[axis + 1..]);
    one(ctx, data.with_shape(shape))
}

pub fn shape_of(ctx: &InferCtx) -> R {
    let t = ctx.tensor(0)?;
    one(ctx, TensorType::new(DType::I64, [t.rank() as u64]))
}

pub fn rank_of(ctx: &InferCtx) -> R {
    ctx.tensor(0)?;
    one(ctx, TensorType::scalar(DType::I64))
}

pub fn matmul(ctx: &InferCtx) -> R {
    let a = check_dtype(ctx, 0, DType::is_numeric, "numbers (floats or integers)")?;
    let b = check_dtype(ctx, 1, DType::is_numeric, "numbers (floats or integers)")?;
    same_dtype(ctx, 0, 1)?;
    for (i, t) in [(0, &a), (1, &b)] {
        if t.rank() < 2 {
            return err(Blame::Operand(i), format!("matmul needs operands of rank 2 or more, but operand {i} is {t}; reshape a vector to [1,K] or [K,1]"));
        }
    }
    // The last two dims of each operand as read: transposed where its flag says so.
    let last_two = |t: &TensorType, flag: &str| {
        let (r, c) = (t.shape[t.rank() - 2], t.shape[t.rank() - 1]);
        if matches!(ctx.attr(flag), Some(Attr::Bool(true))) {
            (c, r)
        } else {
            (r, c)
        }
    };
    let ((m, k1), (k2, n)) = (last_two(&a, "transpose_a"), last_two(&b, "transpose_b"));
    if k1 != k2 {
        let read = |flag: &str| if matches!(ctx.attr(flag), Some(Attr::Bool(true))) { " (transposed)" } else { "" };
        return err(
            Blame::Operand(1),
            format!(
                "matmul: inner dims differ: lhs {a}{} has K = {k1} but rhs {b}{} has K = {k2}",
                read("transpose_a"),
                read("transpose_b")
            ),
        );
    }
    let mut shape = broadcast_shapes(&a.shape[..a.rank() - 2], &b.shape[..b.rank() - 2])
        .map_err(|m| InferError::new(Blame::Operand(1), format!("matmul batch dims: {m}")))?;
    shape.extend([m, n]);
    one(ctx, a.with_shape(shape))
}

/// The output of a sliding-window op over `t`: `[N, channels, spatial...]`; an error about the
/// input's size blames `input`.
fn windowed(
    ctx: &InferCtx,
    t: &TensorType,
    kernel: Vec<u64>,
    channels: u64,
    input: Blame,
) -> Result<TensorType, InferError> {
    let w = crate::window::Window::from_attrs(ctx.attrs, kernel)
        .map_err(|m| InferError::new(Blame::Op, format!("{}: {m}", ctx.op.name())))?;
    let spatial =
        w.output_dims(&t.shape[2..]).map_err(|m| InferError::new(input, format!("{}: {m}", ctx.op.name())))?;
    let mut shape = vec![t.shape[0], channels];
    shape.extend(spatial);
    Ok(t.with_shape(shape))
}

/// The result of conv (with the node's attributes) of an input `x` by a weight `w`; errors
/// blame `xb` or `wb`, the operands or attributes they come from.
fn conv_result(ctx: &InferCtx, x: &TensorType, w: &TensorType, xb: Blame, wb: Blame) -> Result<TensorType, InferError> {
    let op = ctx.op.name();
    if x.rank() < 3 {
        return err(xb, format!("{op} needs an input [N, C, spatial...] of rank 3 or more, got {x}"));
    }
    if w.rank() != x.rank() {
        return err(
            wb,
            format!("{op}: the weight {w} must have the input's rank {} ([M, C/group, kernel...])", x.rank()),
        );
    }
    let group = ctx.int_attr("group")?;
    if group < 1 {
        return err(Blame::Attr("group"), format!("{op}: group must be at least 1, got {group}"));
    }
    let (c, m, g) = (x.shape[1], w.shape[0], group as u64);
    if c % g != 0 || m % g != 0 || w.shape[1].checked_mul(g) != Some(c) {
        return err(
            wb,
            format!("{op}: input {x} and weight {w} do not fit {g} group(s): need C = {c} and M = {m} divisible by {g} and weight dim 1 = C/group"),
        );
    }
    windowed(ctx, x, w.shape[2..].to_vec(), m, xb)
}

pub fn conv(ctx: &InferCtx) -> R {
    let x = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let w = check_dtype(ctx, 1, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    same_dtype(ctx, 0, 1)?;
    let y = conv_result(ctx, &x, &w, Blame::Operand(0), Blame::Operand(1))?;
    one(ctx, y)
}

/// The `shape` attribute of a gradient op, as a tensor of `dtype`.
fn shape_attr(ctx: &InferCtx, dtype: DType) -> Result<TensorType, InferError> {
    Ok(TensorType::new(dtype, non_negative_shape(ctx, "shape")?))
}

/// A gradient's operand `dy` is what the forward op of its attributes gives: `got` (computed).
fn same_as_forward(
    ctx: &InferCtx,
    dy_index: usize,
    dy: &TensorType,
    got: &TensorType,
    what: &str,
) -> Result<(), InferError> {
    if got.shape != dy.shape {
        return err(
            Blame::Operand(dy_index),
            format!("{}: {what} gives {got}, but the gradient operand is {dy}", ctx.op.name()),
        );
    }
    Ok(())
}

pub fn conv_input_grad(ctx: &InferCtx) -> R {
    let dy = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let w = check_dtype(ctx, 1, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    same_dtype(ctx, 0, 1)?;
    let x = shape_attr(ctx, dy.dtype)?;
    let y = conv_result(ctx, &x, &w, Blame::Attr("shape"), Blame::Operand(1))?;
    same_as_forward(ctx, 0, &dy, &y, &format!("conv of an input {x} by the weight {w}"))?;
    one(ctx, x)
}

pub fn conv_filter_grad(ctx: &InferCtx) -> R {
    let x = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let dy = check_dtype(ctx, 1, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    same_dtype(ctx, 0, 1)?;
    let w = shape_attr(ctx, x.dtype)?;
    let y = conv_result(ctx, &x, &w, Blame::Operand(0), Blame::Attr("shape"))?;
    same_as_forward(ctx, 1, &dy, &y, &format!("conv of the input {x} by a weight {w}"))?;
    one(ctx, w)
}

/// The result of the pooling op of the node's attributes on an input `x`.
fn pool_result(ctx: &InferCtx, x: &TensorType, xb: Blame) -> Result<TensorType, InferError> {
    if x.rank() < 3 {
        return err(xb, format!("{} needs an input [N, C, spatial...] of rank 3 or more, got {x}", ctx.op.name()));
    }
    let kernel = ctx.ints_attr("kernel")?;
    if kernel.len() != x.rank() - 2 || kernel.iter().any(|&k| k < 1) {
        return err(
            Blame::Attr("kernel"),
            format!(
                "{}: 'kernel' must hold {} positive sizes, one per spatial dim of {x}",
                ctx.op.name(),
                x.rank() - 2
            ),
        );
    }
    windowed(ctx, x, kernel.iter().map(|&k| k as u64).collect(), x.shape[1], xb)
}

pub fn pool(ctx: &InferCtx) -> R {
    let x = if ctx.op == Op::AvgPool {
        check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?
    } else {
        check_dtype(ctx, 0, DType::is_numeric, "numbers (floats or integers)")?
    };
    let mut out = one(ctx, pool_result(ctx, &x, Blame::Operand(0))?)?;
    if matches!(ctx.attr("indices"), Some(Attr::Bool(true))) {
        let values = out[0].as_tensor().cloned().expect("a tensor result");
        out.push(Type::Tensor(values.with_dtype(DType::I64)));
    }
    Ok(out)
}

pub fn avg_pool_grad(ctx: &InferCtx) -> R {
    let dy = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let x = shape_attr(ctx, dy.dtype)?;
    let y = pool_result(ctx, &x, Blame::Attr("shape"))?;
    same_as_forward(ctx, 0, &dy, &y, &format!("avg_pool of an input {x}"))?;
    one(ctx, x)
}

pub fn scatter_add(ctx: &InferCtx) -> R {
    let base = check_dtype(ctx, 0, DType::is_numeric, "numbers (floats or integers)")?;
    let idx = check_dtype(ctx, 1, DType::is_index, "integer indices (i32, i64)")?;
    let upd = ctx.tensor(2)?;
    same_dtype(ctx, 0, 2)?;
    let axis = ctx.axis("axis", base.rank())?;
    let mut shape = base.shape[..axis].to_vec();
    shape.extend_from_slice(&idx.shape);
    shape.extend_from_slice(&base.shape[axis + 1..]);
    if upd.shape != shape {
        return err(
            Blame::Operand(2),
            format!(
                "scatter_add: the updates are {upd}, but indices {idx} into axis {axis} of {base} need {} (gather's result shape)",
                fmt_shape(&shape)
            ),
        );
    }
    one(ctx, base)
}

pub fn pad(ctx: &InferCtx) -> R {
    let x = ctx.tensor(0)?;
    let v = ctx.tensor(1)?;
    if v.rank() != 0 || v.dtype != x.dtype {
        return err(
            Blame::Operand(1),
            format!("pad: the fill value must be a scalar of the input's dtype, {}[], not {v}", x.dtype),
        );
    }
    let zeros = vec![0; x.rank()];
    let lists = [
        ("low", ctx.ints_attr("low")?),
        ("high", ctx.ints_attr("high")?),
        ("interior", ctx.attrs.ints("interior").unwrap_or(&zeros)),
    ];
    for (name, list) in lists {
        if list.len() != x.rank() {
            return err(
                Blame::Attr(name),
                format!("pad: '{name}' has {} entries but {x} has rank {}", list.len(), x.rank()),
            );
        }
        if let Some(p) = list.iter().find(|&&p| p < 0) {
            return err(Blame::Attr(name), format!("pad: '{name}' holds {p}; padding is at least 0"));
        }
    }
    let [(_, low), (_, high), (_, interior)] = lists;
    let mut shape = Vec::with_capacity(x.rank());
    for (i, &d) in x.shape.iter().enumerate() {
        let padded = (d.saturating_sub(1) as u128) * interior[i] as u128 + d as u128 + low[i] as u128 + high[i] as u128;
        let dim = u64::try_from(padded).ok().filter(|&p| p <= i64::MAX as u64).ok_or_else(|| {
            InferError::new(
                Blame::Op,
                format!("pad: dim {i} of the result would be {padded}, more than the IR can spell"),
            )
        })?;
        shape.push(dim);
    }
    one(ctx, x.with_shape(shape))
}

/// A loss's `reduction`, checked.
fn loss_reduction<'a>(ctx: &InferCtx<'a>) -> Result<&'a str, InferError> {
    let r = match ctx.attrs.get("reduction") {
        Some(Attr::Str(s)) => s.as_str(),
        _ => "mean",
    };
    if !["none", "sum", "mean"].contains(&r) {
        return err(
            Blame::Attr("reduction"),
            format!("{}: reduction \"{r}\" is not one of \"none\", \"sum\", \"mean\"", ctx.op.name()),
        );
    }
    Ok(r)
}

pub fn softmax_cross_entropy(ctx: &InferCtx) -> R {
    let x = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let labels = check_dtype(ctx, 1, DType::is_index, "integer labels (i32, i64)")?;
    if x.rank() < 1 {
        return err(
            Blame::Operand(0),
            format!("softmax_cross_entropy needs logits [..., C] of rank 1 or more, got {x}"),
        );
    }
    let batch = &x.shape[..x.rank() - 1];
    if labels.shape != batch {
        return err(
            Blame::Operand(1),
            format!(
                "softmax_cross_entropy: the labels are {labels}, but the logits {x} need labels of shape {} (theirs without the last dim)",
                fmt_shape(batch)
            ),
        );
    }
    let r = loss_reduction(ctx)?;
    one(ctx, if r == "none" { x.with_shape(batch.to_vec()) } else { TensorType::scalar(x.dtype) })
}

pub fn mean_squared_error(ctx: &InferCtx) -> R {
    let p = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    let t = ctx.tensor(1)?;
    if *t != p {
        return err(
            Blame::Operand(1),
            format!("mean_squared_error: the prediction is {p} but the target is {t}; they must have one type (no broadcasting)"),
        );
    }
    let r = loss_reduction(ctx)?;
    one(ctx, if r == "none" { p } else { TensorType::scalar(p.dtype) })
}

pub fn grad(ctx: &InferCtx) -> R {
    match &ctx.operands[0] {
        Type::Tensor(t) if t.rank() == 0 && t.dtype.is_float() => {}
        other => return err(Blame::Operand(0), format!("grad needs a scalar float loss, got {other}")),
    }
    let mut out = Vec::with_capacity(ctx.operands.len() - 1);
    for (i, ty) in ctx.operands.iter().enumerate().skip(1) {
        match ty {
            Type::Tensor(t) if t.dtype.is_float() => out.push(ty.clone()),
            other => {
                return err(
                    Blame::Operand(i),
                    format!(
                    "grad: operand {i} is {other}, but gradients are taken with respect to float tensors (f32, f64)"
                ),
                )
            }
        }
    }
    Ok(out)
}

fn reduce(ctx: &InferCtx, ok: fn(DType) -> bool, what: &str) -> R {
    let t = check_dtype(ctx, 0, ok, what)?;
    let axes = ctx.ints_attr("axes")?;
    let mut reduced = vec![false; t.rank()];
    for &a in axes {
        let a = normalize_axis(a, t.rank())
            .map_err(|m| InferError::new(Blame::Attr("axes"), format!("{}: {m}", ctx.op.name())))?;
        if reduced[a] {
            return err(Blame::Attr("axes"), format!("{}: axis {a} is listed twice in 'axes'", ctx.op.name()));
        }
        reduced[a] = true;
    }
    let keep = matches!(ctx.attr("keep_dims"), Some(Attr::Bool(true)));
    let shape = t.shape.iter().zip(&reduced).filter_map(|(&d, &r)| match (r, keep) {
        (false, _) => Some(d),
        (true, true) => Some(1),
        (true, false) => None,
    });
    one(ctx, t.with_shape(shape.collect()))
}

pub fn reduce_numeric(ctx: &InferCtx) -> R {
    reduce(ctx, DType::is_numeric, "numbers (floats or integers)")
}

pub fn reduce_float(ctx: &InferCtx) -> R {
    reduce(ctx, DType::is_float, "floats (f16, bf16, f32, f64)")
}

pub fn softmax(ctx: &InferCtx) -> R {
    let t = check_dtype(ctx, 0, DType::is_float, "floats (f16, bf16, f32, f64)")?;
    ctx.axis("axis", t.rank())?;
    one(ctx, t)
}

fn non_empty_name(ctx: &InferCtx, attr: &'static str) -> Result<(), InferError> {
    if ctx.str_attr(attr)?.is_empty() {
        return err(Blame::Attr(attr), format!("{}: '{attr}' must not be empty", ctx.op.name()));
    }
    Ok(())
}

pub fn variable(ctx: &InferCtx) -> R {
    non_empty_name(ctx, "name")?;
    let ty = ctx.declared_one()?;
    let Type::Var(inner) = ty else {
        return err(Blame::Result(0), format!("variable's result type must be a handle like var<f32[4]>, not {ty}"));
    };
    if let Some(init) = ctx.attrs.tensor("init") {
        if init.ty() != inner {
            return err(
                Blame::Attr("init"),
                format!("variable: 'init' is {} but the variable holds {inner}", init.ty()),
            );
        }
    }
    Ok(vec![ty.clone()])
}

fn var_handle<'a>(ctx: &InferCtx<'a>) -> Result<&'a TensorType, InferError> {
    match &ctx.operands[0] {
        Type::Var(t) => Ok(t),
        other => err(
            Blame::Operand(0),
            format!(
                "{} needs a variable handle (var<...>) as operand 0, but it is {}",
                ctx.op.name(),
                other.kind_word()
            ),
        ),
    }
}

pub fn read(ctx: &InferCtx) -> R {
    one(ctx, var_handle(ctx)?.clone())
}

pub fn assign(ctx: &InferCtx) -> R {
    let v = var_handle(ctx)?;
    let x = ctx.tensor(1)?;
    if x != v {
        return err(Blame::Operand(1), format!("{}: the variable holds {v} but the value is {x}", ctx.op.name()));
    }
    one(ctx, v.clone())
}

pub fn assign_add(ctx: &InferCtx) -> R {
    let r = assign(ctx)?;
    check_dtype(ctx, 1, DType::is_numeric, "numbers (floats or integers)")?;
    Ok(r)
}

/// An optimizer's variable (operand 0): a handle to a float tensor.
fn optimized_var<'a>(ctx: &InferCtx<'a>) -> Result<&'a TensorType, InferError> {
    let v = var_handle(ctx)?;
    if !v.dtype.is_float() {
        return err(
            Blame::Operand(0),
            format!("{}: the variable holds {v}, but optimizers update floats (f32, f64)", ctx.op.name()),
        );
    }
    Ok(v)
}

/// Operand `i`, the handle of an optimizer's accumulator or step count, holding `want`.
fn state_like(ctx: &InferCtx, i: usize, what: &str, want: &TensorType) -> Result<(), InferError> {
    match &ctx.operands[i] {
        Type::Var(t) if t == want => Ok(()),
        Type::Var(t) => err(
            Blame::Operand(i),
            format!("{}: {what} (operand {i}) holds {t}, but it must hold {want}", ctx.op.name()),
        ),
        other => err(
            Blame::Operand(i),
            format!(
                "{}: {what} (operand {i}) must be a handle var<{want}>, but it is {}",
                ctx.op.name(),
                other.kind_word()
            ),
        ),
    }
}

/// Operand `i`, a scalar hyperparameter of the variable's dtype.
fn scalar_like(ctx: &InferCtx, i: usize, what: &str, var: &TensorType) -> Result<(), InferError> {
    let t = ctx.tensor(i)?;
    if t.rank() != 0 || t.dtype != var.dtype {
        return err(
            Blame::Operand(i),
            format!("{}: {what} (operand {i}) must be a scalar {}[], not {t}", ctx.op.name(), var.dtype),
        );
    }
    Ok(())
}

/// Operand `i`, the gradient: of the variable's type.
fn grad_like(ctx: &InferCtx, i: usize, var: &TensorType) -> Result<(), InferError> {
    let t = ctx.tensor(i)?;
    if t != var {
        return err(Blame::Operand(i), format!("{}: the gradient is {t} but the variable holds {var}", ctx.op.name()));
    }
    Ok(())
}

pub fn apply_sgd(ctx: &InferCtx) -> R {
    let v = optimized_var(ctx)?;
    scalar_like(ctx, 1, "the learning rate", v)?;
    grad_like(ctx, 2, v)?;
    one(ctx, v.clone())
}

pub fn apply_momentum(ctx: &InferCtx) -> R {
    let v = optimized_var(ctx)?;
    state_like(ctx, 1, "the accumulator", v)?;
    scalar_like(ctx, 2, "the learning rate", v)?;
    grad_like(ctx, 3, v)?;
    scalar_like(ctx, 4, "the momentum", v)?;
    one(ctx, v.clone())
}

pub fn apply_adam(ctx: &InferCtx) -> R {
    let v = optimized_var(ctx)?;
    state_like(ctx, 1, "the first moment m", v)?;
    state_like(ctx, 2, "the second moment v", v)?;
    state_like(ctx, 3, "the step count", &TensorType::scalar(v.dtype))?;
    scalar_like(ctx, 4, "the learning rate", v)?;
    grad_like(ctx, 5, v)?;
    one(ctx, v.clone())
}

pub fn apply_rmsprop(ctx: &InferCtx) -> R {
    let v = optimized_var(ctx)?;
    state_like(ctx, 1, "the mean square ms", v)?;
    state_like(ctx, 2, "the momentum accumulator mom", v)?;
    scalar_like(ctx, 3, "the learning rate", v)?;
    grad_like(ctx, 4, v)?;
    one(ctx, v.clone())
}

pub fn queue(ctx: &InferCtx) -> R {
    non_empty_name(ctx, "name")?;
    let cap = ctx.int_attr("capacity")?;
    if cap < 1 {
        return err(Blame::Attr("capacity"), format!("queue: capacity {cap} must be at least 1"));
    }
    let ty = ctx.declared_one()?;
    match ty {
        Type::Queue(c) if !c.is_empty() => Ok(vec![ty.clone()]),
        _ => err(
            Blame::Result(0),
            format!(
                "queue's result type must be a handle like queue<f32[4], i64[]> with at least one component, not {ty}"
            ),
        ),
    }
}

fn queue_handle<'a>(ctx: &InferCtx<'a>) -> Result<&'a [TensorType], InferError> {
    match &ctx.operands[0] {
        Type::Queue(c) => Ok(c),
        other => err(
            Blame::Operand(0),
            format!(
                "{} needs a queue handle (queue<...>) as operand 0, but it is {}",
                ctx.op.name(),
                other.kind_word()
            ),
        ),
    }
}

pub fn enqueue(ctx: &InferCtx) -> R {
    let comps = queue_handle(ctx)?;
    let given = &ctx.operands[1..];
    if given.len() != comps.len() {
        return err(
            Blame::Op,
            format!("enqueue: the queue holds tuples of {} tensors but {} are given", comps.len(), given.len()),
        );
    }
    for (i, c) in comps.iter().enumerate() {
        let t = ctx.tensor(i + 1)?;
        if t != c {
            return err(
                Blame::Operand(i + 1),
                format!("enqueue: component {i} of the queue is {c} but operand {} is {t}", i + 1),
            );
        }
    }
    Ok(vec![Type::Token])
}

pub fn dequeue(ctx: &InferCtx) -> R {
    Ok(queue_handle(ctx)?.iter().cloned().map(Type::Tensor).collect())
}

pub fn queue_close(ctx: &InferCtx) -> R {
    queue_handle(ctx)?;
    Ok(vec![Type::Token])
}

pub fn queue_size(ctx: &InferCtx) -> R {
    queue_handle(ctx)?;
    one(ctx, TensorType::scalar(DType::I64))
}

pub fn no_op(_: &InferCtx) -> R {
    Ok(vec![Type::Token])
}

fn region_params_match(ctx: &InferCtx, r: usize, args: &[Type]) -> Result<(), InferError> {
    let name = ctx.def.regions[r];
    let params = &ctx.regions[r].params;
    if params.as_slice() != args {
        return err(
            Blame::Region(r),
            format!("{}: region '{name}' takes ({}) but the op passes ({})", ctx.op.name(), list(params), list(args)),
        );
    }
    Ok(())
}

fn list(ts: &[Type]) -> String {
    ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
}

pub fn cond(ctx: &InferCtx) -> R {
    let p = ctx.tensor(0)?;
    if p.dtype != DType::Bool || p.rank() != 0 {
        return err(Blame::Operand(0), format!("cond: the predicate must be bool[], not {p}"));
    }
    let args = &ctx.operands[1..];
    region_params_match(ctx, 0, args)?;
    region_params_match(ctx, 1, args)?;
    let (t, e) = (&ctx.regions[0].yields, &ctx.regions[1].yields);
    if t != e {
        return err(Blame::Region(1), format!("cond: 'then' yields ({}) but 'else' yields ({})", list(t), list(e)));
    }
    Ok(t.clone())
}

pub fn while_loop(ctx: &InferCtx) -> R {
    let carried = ctx.operands;
    region_params_match(ctx, 0, carried)?;
    region_params_match(ctx, 1, carried)?;
    let c = &ctx.regions[0].yields;
    if c.as_slice() != [Type::tensor(DType::Bool, [])] {
        return err(Blame::Region(0), format!("while: region 'cond' must yield one bool[], not ({})", list(c)));
    }
    let b = &ctx.regions[1].yields;
    if b.as_slice() != carried {
        return err(
            Blame::Region(1),
            format!("while: region 'body' must yield the loop-carried types ({}), not ({})", list(carried), list(b)),
        );
    }
    Ok(carried.to_vec())
}

pub fn fusion(ctx: &InferCtx) -> R {
    region_params_match(ctx, 0, ctx.operands)?;
    if let Some(kind) = ctx.attrs.str("kind") {
        if !["loop", "input", "output"].contains(&kind) {
            return err(
                Blame::Attr("kind"),
                format!("fusion: kind \"{kind}\" is not one of \"loop\", \"input\", \"output\""),
            );
        }
    }
    let ys: &[Type] = &ctx.regions[0].yields;
    if let Some(t) = ys.iter().find(|t| t.as_tensor().is_none()) {
        return err(
            Blame::Region(0),
            format!("fusion: the kernel yields {}, but a kernel yields only tensors", t.kind_word()),
        );
    }
    Ok(ys.to_vec())
}

fn device_attr(ctx: &InferCtx, name: &'static str) -> Result<(), InferError> {
    let s = ctx.str_attr(name)?;
    DeviceSpec::parse(s).map_err(|m| InferError::new(Blame::Attr(name), m))?;
    Ok(())
}

pub fn send(ctx: &InferCtx) -> R {
    ctx.tensor(0)?;
    non_empty_name(ctx, "key")?;
    device_attr(ctx, "to")?;
    Ok(vec![Type::Token])
}

pub fn recv(ctx: &InferCtx) -> R {
    non_empty_name(ctx, "key")?;
    device_attr(ctx, "from")?;
    let ty = ctx.declared_one()?;
    match ty {
        Type::Tensor(_) => Ok(vec![ty.clone()]),
        _ => err(Blame::Result(0), format!("recv receives a tensor, so its result type cannot be {ty}")),
    }
}
