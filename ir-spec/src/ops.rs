//! The op table: every op declared once, with its operands, attributes, regions, traits, type
//! rule, prose semantics and an example. The parser, the verifier, the builder and the op
//! reference in SPEC.md all come from here. The types the table is made of, `Op` itself
//! included, are in `opdef.rs`, which the type rules can see without seeing the table.

use crate::attr::{Attr, AttrKind};
use crate::rules;

pub use crate::opdef::{
    AttrDef, AttrDefault, Blame, Cost, Gradient, InferCtx, InferError, Op, OpDef, OpKind, RegionFlow, RegionSig,
    TypeRule,
};

impl Op {
    /// The op's table entry.
    pub fn def(self) -> &'static OpDef {
        &table()[self as usize]
    }

    pub fn is_stateful(self) -> bool {
        self.def().stateful
    }

    pub fn kind(self) -> OpKind {
        self.def().kind
    }
}

fn table() -> &'static [OpDef] {
    static TABLE: std::sync::OnceLock<Vec<OpDef>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let defs: Vec<OpDef> = Op::ALL.iter().map(|&op| build_def(op)).collect();
        debug_assert!(defs.iter().enumerate().all(|(i, d)| d.op as usize == i));
        defs
    })
}

fn attr(name: &'static str, kind: AttrKind, default: AttrDefault, doc: &'static str) -> AttrDef {
    AttrDef { name, kind, default, doc }
}

fn required(name: &'static str, kind: AttrKind, doc: &'static str) -> AttrDef {
    attr(name, kind, AttrDefault::Required, doc)
}

struct Def {
    summary: &'static str,
    operands: &'static str,
    arity: (usize, Option<usize>),
    attrs: Vec<AttrDef>,
    regions: &'static [&'static str],
    kind: OpKind,
    stateful: bool,
    flow: RegionFlow,
    resident: bool,
    semantics: &'static str,
    example: &'static str,
    infer: TypeRule,
    cost: Cost,
    gradient: Gradient,
}

/// An elementwise op's entry: as many operands as `operands` names.
fn elementwise(
    summary: &'static str,
    operands: &'static str,
    semantics: &'static str,
    example: &'static str,
    infer: TypeRule,
    cost: Cost,
    gradient: Gradient,
) -> Def {
    let n = operands.split(", ").count();
    Def {
        summary,
        operands,
        arity: (n, Some(n)),
        attrs: vec![],
        regions: &[],
        kind: OpKind::Elementwise,
        stateful: false,
        flow: RegionFlow::NoRegions,
        resident: false,
        semantics,
        example,
        infer,
        cost,
        gradient,
    }
}

fn reduction(
    summary: &'static str,
    semantics: &'static str,
    example: &'static str,
    infer: TypeRule,
    cost: Cost,
    gradient: Gradient,
) -> Def {
    Def {
        summary,
        operands: "input",
        arity: (1, Some(1)),
        attrs: vec![
            required(
                "axes",
                AttrKind::Ints,
                "Axes to reduce, distinct; negative values count from the end. `[]` reduces nothing.",
            ),
            attr(
                "keep_dims",
                AttrKind::Bool,
                AttrDefault::Value(Attr::Bool(false)),
                "Keep reduced axes as size-1 dimensions.",
            ),
        ],
        regions: &[],
        kind: OpKind::Reduction,
        stateful: false,
        flow: RegionFlow::NoRegions,
        resident: false,
        semantics,
        example,
        infer,
        cost,
        gradient,
    }
}

/// The entry of an op without regions, keeping nothing resident (`Def { resident: true,
/// ..plain.into() }` for one that does); whether it is stateful follows from its kind.
struct Plain {
    kind: OpKind,
    summary: &'static str,
    operands: &'static str,
    arity: (usize, Option<usize>),
    attrs: Vec<AttrDef>,
    semantics: &'static str,
    example: &'static str,
    infer: TypeRule,
    cost: Cost,
    gradient: Gradient,
}

impl From<Plain> for Def {
    fn from(p: Plain) -> Def {
        Def {
            summary: p.summary,
            operands: p.operands,
            arity: p.arity,
            attrs: p.attrs,
            regions: &[],
            kind: p.kind,
            stateful: p.kind == OpKind::Stateful || p.kind == OpKind::Communication,
            flow: RegionFlow::NoRegions,
            resident: false,
            semantics: p.semantics,
            example: p.example,
            infer: p.infer,
            cost: p.cost,
            gradient: p.gradient,
        }
    }
}

fn build_def(op: Op) -> OpDef {
    use AttrKind as K;
    use Gradient::{NotDifferentiable, Rule};
    use OpKind::*;
    let d: Def = match op {
        Op::Constant => Def {
            resident: true,
            ..Plain {
                kind: Source,
                summary: "A tensor given by a literal.",
                operands: "",
                arity: (0, Some(0)),
                attrs: vec![required("value", K::Tensor, "The tensor.")],
                semantics: "The result is the literal `value`, whose type is the result type.",
                example: "graph @g() -> (y: f32[2]) {\n  %0 = constant {value = dense<[1.0, 2.0]> : f32[2]} : f32[2]\n  return %0\n}\n",
                infer: rules::constant,
                cost: Cost::Move,
                gradient: NotDifferentiable,
            }
            .into()
        },
        Op::Identity => Plain {
            kind: Injective,
            summary: "Forwards its operand.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "The result equals the operand. Useful as a named fetch point and as the target of device moves.",
            example: "graph @g(%x: f32[3]) -> (y: f32[3]) {\n  %0 = identity %x : f32[3]\n  return %0\n}\n",
            infer: rules::identity,
            cost: Cost::Free,
            gradient: Rule,
        }
        .into(),
        Op::Cast => Plain {
            kind: Elementwise,
            summary: "Converts elements to another dtype.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![required("to", K::DType, "The result element type.")],
            semantics: "Float to int truncates toward zero (out-of-range values are undefined, NaN gives 0); int to int keeps the low bits (two's complement wrapping); to a float rounds to nearest, ties to even (beyond its range to ±inf); bool to number gives 0 or 1; number to bool is `x != 0`.",
            example: "graph @g(%x: f32[3]) -> (y: i32[3]) {\n  %0 = cast %x {to = i32} : i32[3]\n  return %0\n}\n",
            infer: rules::cast,
            cost: Cost::Arithmetic,
            gradient: Rule,
        }
        .into(),
        Op::Bitcast => Plain {
            kind: Elementwise,
            summary: "Reinterprets each element's bits as another dtype of the same width.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![required("to", K::DType, "The result element type, as wide as the input's (bool is one byte).")],
            semantics: "Each element's little-endian bytes read as `to` (numpy's `view`, ONNX's `BitCast`): `f32` 1.0 is `i32` 1065353216. A bool is the byte 0 or 1, and a byte becomes the bool `b != 0`. The shape is kept; the widths must be equal.",
            example: "graph @g(%x: f32[3]) -> (y: i32[3]) {\n  %0 = bitcast %x {to = i32} : i32[3]\n  return %0\n}\n",
            infer: rules::bitcast,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Reshape => Plain {
            kind: Injective,
            summary: "Same elements in row-major order, new shape.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![required("shape", K::Ints, "The new shape; at most one entry may be -1, meaning whatever makes the element counts equal.")],
            semantics: "The result holds the operand's elements in row-major order under the new shape; the element counts must be equal.",
            example: "graph @g(%x: f32[2,3]) -> (y: f32[3,2]) {\n  %0 = reshape %x {shape = [-1, 2]} : f32[3,2]\n  return %0\n}\n",
            infer: rules::reshape,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Broadcast => Plain {
            kind: Injective,
            summary: "Broadcasts to a shape (numpy `broadcast_to`).",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![required("shape", K::Ints, "The result shape.")],
            semantics: "The operand's shape is aligned with `shape` on the right; each operand dim must equal the target dim or be 1, and is repeated to fill it.",
            example: "graph @g(%x: f32[3]) -> (y: f32[2,3]) {\n  %0 = broadcast %x {shape = [2, 3]} : f32[2,3]\n  return %0\n}\n",
            infer: rules::broadcast,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Transpose => Plain {
            kind: Injective,
            summary: "Permutes dimensions.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![required("perm", K::Ints, "A permutation of 0..rank: result dim i is operand dim perm[i].")],
            semantics: "`result[i_0, ..., i_n] = input[j]` where `j[perm[k]] = i_k`.",
            example: "graph @g(%x: f32[2,3]) -> (y: f32[3,2]) {\n  %0 = transpose %x {perm = [1, 0]} : f32[3,2]\n  return %0\n}\n",
            infer: rules::transpose,
            cost: Cost::Strided,
            gradient: Rule,
        }
        .into(),
        Op::Concat => Plain {
            kind: Injective,
            summary: "Joins tensors along an axis.",
            operands: "inputs...",
            arity: (1, None),
            attrs: vec![required("axis", K::Int, "The axis to join along; negative counts from the end.")],
            semantics: "All operands have the same dtype and rank and agree on every dim but `axis`; the result's `axis` dim is the sum.",
            example: "graph @g(%a: f32[2,1], %b: f32[2,3]) -> (y: f32[2,4]) {\n  %0 = concat %a, %b {axis = 1} : f32[2,4]\n  return %0\n}\n",
            infer: rules::concat,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Slice => Plain {
            kind: Injective,
            summary: "A strided box of the input.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![
                required("starts", K::Ints, "First index per dim; negative counts from the end."),
                required("ends", K::Ints, "One past the last index per dim; negative counts from the end."),
                attr("steps", K::Ints, AttrDefault::Optional, "Stride per dim, each at least 1; all 1 when left out."),
            ],
            semantics: "Per dim, start and end are resolved like Python's (negative adds the dim, then clamped to [0, dim]); the result dim is `max(0, ceil((end - start) / step))` and takes indices start, start+step, ...",
            example: "graph @g(%x: f32[4,6]) -> (y: f32[2,3]) {\n  %0 = slice %x {starts = [1, 0], ends = [3, 6], steps = [1, 2]} : f32[2,3]\n  return %0\n}\n",
            infer: rules::slice,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Split => Plain {
            kind: Injective,
            summary: "Cuts a tensor into consecutive pieces along an axis.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![
                required("axis", K::Int, "The axis to cut; negative counts from the end."),
                required("sizes", K::Ints, "Size of each piece along the axis; they sum to the axis' dim. One result per entry."),
            ],
            semantics: "Result k holds the operand's indices `[sum(sizes[..k]), sum(sizes[..=k]))` along `axis`.",
            example: "graph @g(%x: f32[4,6]) -> (a: f32[4,2], b: f32[4,4]) {\n  %0, %1 = split %x {axis = 1, sizes = [2, 4]} : f32[4,2], f32[4,4]\n  return %0, %1\n}\n",
            infer: rules::split,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Gather => Plain {
            kind: Injective,
            summary: "Picks slices along an axis by index (numpy `take`).",
            operands: "data, indices",
            arity: (2, Some(2)),
            attrs: vec![
                attr("axis", K::Int, AttrDefault::Value(Attr::Int(0)), "The axis of `data` that `indices` select along."),
            ],
            semantics: "`result[a..., i..., b...] = data[a..., indices[i...], b...]`: the result shape is `data.shape[..axis] ++ indices.shape ++ data.shape[axis+1..]`. Indices are i32 or i64; a negative index counts from the end; an index out of range is a run-time error.",
            example: "graph @g(%x: f32[5,3], %i: i64[2]) -> (y: f32[2,3]) {\n  %0 = gather %x, %i : f32[2,3]\n  return %0\n}\n",
            infer: rules::gather,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::ScatterAdd => Plain {
            kind: Opaque,
            summary: "Adds slices into a tensor at indices along an axis (the gradient of gather).",
            operands: "base, indices, updates",
            arity: (3, Some(3)),
            attrs: vec![
                attr("axis", K::Int, AttrDefault::Value(Attr::Int(0)), "The axis of `base` that `indices` select along."),
            ],
            semantics: "The result is `base` (numeric; the result has its type) with, for every index tuple `i` of `indices`, `result[a..., indices[i...], b...] += updates[a..., i..., b...]`. `updates` has base's dtype and exactly gather's result shape, `base.shape[..axis] ++ indices.shape ++ base.shape[axis+1..]`. Indices are i32 or i64; a negative index counts from the end; an index out of range is a run-time error. Repeated indices accumulate, in the order of the indices (integers wrap).",
            example: "graph @g(%b: f32[5,3], %i: i64[4], %u: f32[4,3]) -> (y: f32[5,3]) {\n  %0 = scatter_add %b, %i, %u : f32[5,3]\n  return %0\n}\n",
            infer: rules::scatter_add,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Pad => Plain {
            kind: Injective,
            summary: "Pads each dim at both ends and between elements with a value (the gradient of slice).",
            operands: "input, value",
            arity: (2, Some(2)),
            attrs: vec![
                required("low", K::Ints, "Padding before each dim, each at least 0."),
                required("high", K::Ints, "Padding after each dim, each at least 0."),
                attr("interior", K::Ints, AttrDefault::Optional, "Padding between adjacent elements of each dim, each at least 0; all 0 when left out."),
            ],
            semantics: "`value` is a scalar of the input's dtype (any dtype), the fill. Per dim of size d, the result has `low + d + max(d - 1, 0) * interior + high` elements; input element j lands at `low + j * (interior + 1)` and every other position holds `value`. (XLA's Pad with non-negative padding.)",
            example: "graph @g(%x: f32[2,3], %v: f32[]) -> (y: f32[3,7]) {\n  %0 = pad %x, %v {low = [1, 0], high = [0, 2], interior = [0, 1]} : f32[3,7]\n  return %0\n}\n",
            infer: rules::pad,
            cost: Cost::Move,
            gradient: Rule,
        }
        .into(),
        Op::Shape => Plain {
            kind: Source,
            summary: "The operand's shape as a tensor.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "An i64 vector holding the operand's dims. Shapes are static, so folding replaces it with a constant.",
            example: "graph @g(%x: f32[4,6]) -> (y: i64[2]) {\n  %0 = shape %x : i64[2]\n  return %0\n}\n",
            infer: rules::shape_of,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Rank => Plain {
            kind: Source,
            summary: "The operand's rank as a scalar.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "An i64 scalar holding the number of dims of the operand.",
            example: "graph @g(%x: f32[4,6]) -> (y: i64[]) {\n  %0 = rank %x : i64[]\n  return %0\n}\n",
            infer: rules::rank_of,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::MatMul => Plain {
            kind: Contraction,
            summary: "Matrix product, batched with broadcasting (numpy `matmul`).",
            operands: "lhs, rhs",
            arity: (2, Some(2)),
            attrs: vec![
                attr("transpose_a", K::Bool, AttrDefault::Value(Attr::Bool(false)), "Read `lhs` as its transpose over its last two dims: `lhs` is then `[..., K, M]`."),
                attr("transpose_b", K::Bool, AttrDefault::Value(Attr::Bool(false)), "Read `rhs` as its transpose over its last two dims: `rhs` is then `[..., N, K]`."),
            ],
            semantics: "Both operands have rank at least 2 and the same numeric dtype. `lhs` is `[..., M, K]` and `rhs` `[..., K, N]` (with `transpose_a`, `lhs` is `[..., K, M]` and read as its transpose over the last two dims; with `transpose_b`, `rhs` is `[..., N, K]`, likewise); the batch dims `...` broadcast; the result is `[..., M, N]` with `result[b, m, n] = sum_k A[b, m, k] * B[b, k, n]`, where A and B are the operands as read.",
            example: "graph @g(%a: f32[2,3], %b: f32[3,4]) -> (y: f32[2,4]) {\n  %0 = matmul %a, %b : f32[2,4]\n  return %0\n}\n",
            infer: rules::matmul,
            cost: Cost::MatMul,
            gradient: Rule,
        }
        .into(),
        Op::Conv => Plain {
            kind: Contraction,
            summary: "Convolution over the spatial dims (NCHW layout, ONNX `Conv`).",
            operands: "input, weight",
            arity: (2, Some(2)),
            attrs: conv_attrs(None),
            semantics: "`input` is `[N, C, D1, ..., Dk]` (k at least 1) and `weight` `[M, C/group, K1, ..., Kk]`, both floats of one dtype. Output channel m sees the input channels of its group (`m / (M/group)`). `result[n, m, o...] = sum_{c, k...} input[n, g*C/group + c, o*stride - pad_begin + k*dilation] * weight[m, c, k...]`, positions outside the input counting as 0. Output size per dim: `floor((D + pad_begin + pad_end - dilation*(K-1) - 1) / stride) + 1`.",
            example: "graph @g(%x: f32[1,2,5,5], %w: f32[4,2,3,3]) -> (y: f32[1,4,3,3]) {\n  %0 = conv %x, %w : f32[1,4,3,3]\n  return %0\n}\n",
            infer: rules::conv,
            cost: Cost::Conv,
            gradient: Rule,
        }
        .into(),
        Op::ConvInputGrad => Plain {
            kind: Contraction,
            summary: "The gradient of conv with respect to its input (ONNX `ConvTranspose`).",
            operands: "grad_output, weight",
            arity: (2, Some(2)),
            attrs: conv_attrs(Some("The shape of the conv's input, `[N, C, D1, ..., Dk]`: the result's shape.")),
            semantics: "The adjoint of `conv` in its input, for the conv with these attributes of an input of shape `shape` by `weight`: `grad_output` is that conv's result `[N, M, O1, ..., Ok]` (its gradient) and `weight` `[M, C/group, K1, ..., Kk]`, floats of one dtype. `result[n, g*C/group + c, i...] = sum over m in group g and o..., k... with i = o*stride - pad_begin + k*dilation of grad_output[n, m, o...] * weight[m, c, k...]`. The conv of `shape` must give grad_output's shape by the output size formula of `conv`, so trailing input positions that no window reaches are allowed (their gradient is 0).",
            example: "graph @g(%dy: f32[1,4,3,3], %w: f32[4,2,3,3]) -> (dx: f32[1,2,5,5]) {\n  %0 = conv_input_grad %dy, %w {shape = [1, 2, 5, 5]} : f32[1,2,5,5]\n  return %0\n}\n",
            infer: rules::conv_input_grad,
            cost: Cost::ConvInputGrad,
            gradient: Rule,
        }
        .into(),
        Op::ConvFilterGrad => Plain {
            kind: Contraction,
            summary: "The gradient of conv with respect to its weight.",
            operands: "input, grad_output",
            arity: (2, Some(2)),
            attrs: conv_attrs(Some("The shape of the conv's weight, `[M, C/group, K1, ..., Kk]`: the result's shape.")),
            semantics: "The adjoint of `conv` in its weight, for the conv with these attributes of `input` `[N, C, D1, ..., Dk]` by a weight of shape `shape`: `grad_output` is that conv's result `[N, M, O1, ..., Ok]` (its gradient), floats of input's dtype. `result[m, c, k...] = sum_{n, o...} input[n, g*C/group + c, o*stride - pad_begin + k*dilation] * grad_output[n, m, o...]` with `g = m / (M/group)`, positions outside the input counting as 0. The conv must give grad_output's shape.",
            example: "graph @g(%x: f32[1,2,5,5], %dy: f32[1,4,3,3]) -> (dw: f32[4,2,3,3]) {\n  %0 = conv_filter_grad %x, %dy {shape = [4, 2, 3, 3]} : f32[4,2,3,3]\n  return %0\n}\n",
            infer: rules::conv_filter_grad,
            cost: Cost::ConvFilterGrad,
            gradient: Rule,
        }
        .into(),
        Op::Neg => elementwise("Negation.", "input", "`-x`, for numeric dtypes (integers wrap).", unary_example("neg", "f32"), rules::unary_numeric, Cost::Arithmetic, Rule),
        Op::Abs => elementwise("Absolute value.", "input", "`|x|`, for numeric dtypes (integers wrap at the minimum).", unary_example("abs", "f32"), rules::unary_numeric, Cost::Arithmetic, Rule),
        Op::Exp => elementwise("Exponential.", "input", "`e^x`, for floats.", unary_example("exp", "f32"), rules::unary_float, Cost::Transcendental, Rule),
        Op::Log => elementwise("Natural logarithm.", "input", "`ln x`, for floats; `log 0 = -inf`, negative gives NaN.", unary_example("log", "f32"), rules::unary_float, Cost::Transcendental, Rule),
        Op::Sqrt => elementwise("Square root.", "input", "`sqrt x`, for floats; negative gives NaN.", unary_example("sqrt", "f32"), rules::unary_float, Cost::Transcendental, Rule),
        Op::Tanh => elementwise("Hyperbolic tangent.", "input", "`tanh x`, for floats.", unary_example("tanh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Sigmoid => elementwise("Logistic function.", "input", "`1 / (1 + e^-x)`, for floats.", unary_example("sigmoid", "f32"), rules::unary_float, Cost::Transcendental, Rule),
        Op::Relu => elementwise("Rectifier.", "input", "`max(x, 0)`, for numeric dtypes; NaN stays NaN.", unary_example("relu", "f32"), rules::unary_numeric, Cost::Arithmetic, Rule),
        Op::Erf => elementwise("Error function.", "input", "`erf x`, for floats.", unary_example("erf", "f32"), rules::unary_float, Cost::Erf, Rule),
        Op::Sin => elementwise("Sine.", "input", "`sin x` (radians), for floats; infinities give NaN.", unary_example("sin", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Cos => elementwise("Cosine.", "input", "`cos x` (radians), for floats; infinities give NaN.", unary_example("cos", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Tan => elementwise("Tangent.", "input", "`tan x` (radians), for floats; infinities give NaN.", unary_example("tan", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Asin => elementwise("Inverse sine.", "input", "`asin x` in [-pi/2, pi/2], for floats; NaN outside [-1, 1].", unary_example("asin", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Acos => elementwise("Inverse cosine.", "input", "`acos x` in [0, pi], for floats; NaN outside [-1, 1].", unary_example("acos", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Atan => elementwise("Inverse tangent.", "input", "`atan x` in [-pi/2, pi/2], for floats; `atan(±inf) = ±pi/2`.", unary_example("atan", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Sinh => elementwise("Hyperbolic sine.", "input", "`sinh x`, for floats.", unary_example("sinh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Cosh => elementwise("Hyperbolic cosine.", "input", "`cosh x`, for floats.", unary_example("cosh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Asinh => elementwise("Inverse hyperbolic sine.", "input", "`asinh x`, for floats.", unary_example("asinh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Acosh => elementwise("Inverse hyperbolic cosine.", "input", "`acosh x` (at least 0), for floats; NaN below 1.", unary_example("acosh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Atanh => elementwise("Inverse hyperbolic tangent.", "input", "`atanh x`, for floats; `atanh(±1) = ±inf`, NaN outside [-1, 1].", unary_example("atanh", "f32"), rules::unary_float, Cost::Libm, Rule),
        Op::Floor => elementwise("Round down.", "input", "The largest integer not above `x`, for floats; NaN, infinities and zeros (with their sign) are kept.", unary_example("floor", "f32"), rules::unary_float, Cost::Arithmetic, Rule),
        Op::Ceil => elementwise("Round up.", "input", "The smallest integer not below `x`, for floats; NaN, infinities and zeros (with their sign) are kept; `ceil(-0.5) = -0`.", unary_example("ceil", "f32"), rules::unary_float, Cost::Arithmetic, Rule),
        Op::Round => elementwise("Round to nearest, ties to even.", "input", "The integer nearest `x`, halves to the even one (`round(2.5) = 2`, `round(-0.5) = -0`), for floats, as numpy's `round` and ONNX's `Round`; NaN, infinities and zeros are kept.", unary_example("round", "f32"), rules::unary_float, Cost::Arithmetic, Rule),
        Op::Sign => elementwise("Sign.", "input", "1 where `x > 0`, -1 where `x < 0`, 0 where `x` is 0 (+0 for either zero), for numeric dtypes; NaN stays NaN (numpy's `sign`).", unary_example("sign", "f32"), rules::unary_numeric, Cost::Arithmetic, Rule),
        Op::Not => elementwise("Logical or bitwise negation.", "input", "`!x` for bool; for integers every bit flipped (`~x`).", unary_example("not", "bool"), rules::unary_logical, Cost::Arithmetic, NotDifferentiable),
        Op::Add => elementwise("Addition.", "lhs, rhs", "`lhs + rhs` with numpy broadcasting; both operands have the same numeric dtype (integers wrap).", binary_example("add", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::Sub => elementwise("Subtraction.", "lhs, rhs", "`lhs - rhs` with numpy broadcasting (integers wrap).", binary_example("sub", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::Mul => elementwise("Multiplication.", "lhs, rhs", "`lhs * rhs` with numpy broadcasting (integers wrap).", binary_example("mul", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::Div => elementwise("Division.", "lhs, rhs", "`lhs / rhs` with numpy broadcasting. Integer division truncates toward zero; an integer division by zero is a run-time error; floats follow IEEE 754.", binary_example("div", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::Pow => elementwise("Power.", "base, exponent", "`base ^ exponent` with numpy broadcasting. For floats, `pow(x, 0) = 1` for every x; in f32 (and f16, bf16, computed in f32) a square or a cube (an exponent of exactly 2 or 3) is the product `x·x` or `(x·x)·x` computed in f64 and converted to f32, any other exponent the C library's `powf`. For integers a negative exponent is a run-time error.", binary_example("pow", "f32", "f32"), rules::binary_numeric, Cost::Libm, Rule),
        Op::Mod => Plain {
            kind: Elementwise,
            summary: "Remainder of division, floored or truncated (ONNX `Mod`).",
            operands: "lhs, rhs",
            arity: (2, Some(2)),
            attrs: vec![attr(
                "fmod",
                K::Bool,
                AttrDefault::Value(Attr::Bool(false)),
                "Truncated remainder, C's `fmod`: the result has the dividend's sign. Without it the remainder is floored (Python's `%`, numpy's `mod`): it has the divisor's sign.",
            )],
            semantics: "`lhs - rhs * q` with numpy broadcasting, both operands of one numeric dtype, where `q = floor(lhs / rhs)`, or `trunc(lhs / rhs)` with `fmod`. Integers: a division by zero is a run-time error; `MIN mod -1` is 0. Floats are computed exactly (`fmod`, then for the floored remainder the divisor added where the signs differ, as numpy's `mod`): a zero divisor or an infinite dividend gives NaN; an infinite divisor gives the dividend with `fmod`, and floored the dividend where its sign is the divisor's or it is zero, else the infinite divisor itself; a zero floored remainder has the divisor's sign, a zero truncated one the dividend's.",
            example: "graph @g(%a: i32[2,3], %b: i32[3]) -> (y: i32[2,3]) {\n  %0 = mod %a, %b {fmod = true} : i32[2,3]\n  return %0\n}\n",
            infer: rules::binary_numeric,
            cost: Cost::Arithmetic,
            gradient: Rule,
        }
        .into(),
        Op::Max => elementwise("Elementwise maximum.", "lhs, rhs", "`max(lhs, rhs)` with numpy broadcasting; NaN if either is NaN.", binary_example("max", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::Min => elementwise("Elementwise minimum.", "lhs, rhs", "`min(lhs, rhs)` with numpy broadcasting; NaN if either is NaN.", binary_example("min", "f32", "f32"), rules::binary_numeric, Cost::Arithmetic, Rule),
        Op::And => elementwise("Logical or bitwise and.", "lhs, rhs", "`lhs && rhs` on bools, `lhs & rhs` on integers (both of one dtype), with numpy broadcasting.", binary_example("and", "bool", "bool"), rules::binary_logical, Cost::Arithmetic, NotDifferentiable),
        Op::Or => elementwise("Logical or bitwise or.", "lhs, rhs", "`lhs || rhs` on bools, `lhs | rhs` on integers (both of one dtype), with numpy broadcasting.", binary_example("or", "bool", "bool"), rules::binary_logical, Cost::Arithmetic, NotDifferentiable),
        Op::Xor => elementwise("Logical or bitwise exclusive or.", "lhs, rhs", "`lhs != rhs` on bools, `lhs ^ rhs` on integers (both of one dtype), with numpy broadcasting.", binary_example("xor", "i32", "i32"), rules::binary_logical, Cost::Arithmetic, NotDifferentiable),
        Op::ShiftLeft => elementwise("Left shift.", "value, amount", "`value << amount` on integers of one dtype, with numpy broadcasting; the bits shifted out are lost, and an amount of the width or more (a negative amount counts as one) gives 0.", binary_example("shift_left", "u8", "u8"), rules::binary_int, Cost::Arithmetic, NotDifferentiable),
        Op::ShiftRight => elementwise("Right shift.", "value, amount", "`value >> amount` on integers of one dtype, with numpy broadcasting: unsigned values shift in zeros, signed ones copies of the sign bit (arithmetic shift); an amount of the width or more (a negative amount counts as one) gives 0, or -1 for a negative signed value.", binary_example("shift_right", "u8", "u8"), rules::binary_int, Cost::Arithmetic, NotDifferentiable),
        Op::Equal => elementwise("Equality test.", "lhs, rhs", "`lhs == rhs` as bool, with numpy broadcasting; any dtype, both the same. NaN equals nothing.", binary_example("equal", "f32", "bool"), rules::compare_eq, Cost::Arithmetic, NotDifferentiable),
        Op::NotEqual => elementwise("Inequality test.", "lhs, rhs", "`lhs != rhs` as bool, with numpy broadcasting; any dtype, both the same.", binary_example("not_equal", "f32", "bool"), rules::compare_eq, Cost::Arithmetic, NotDifferentiable),
        Op::Less => elementwise("Less-than test.", "lhs, rhs", "`lhs < rhs` as bool, with numpy broadcasting; numeric dtypes.", binary_example("less", "f32", "bool"), rules::compare_ordered, Cost::Arithmetic, NotDifferentiable),
        Op::LessEqual => elementwise("Less-or-equal test.", "lhs, rhs", "`lhs <= rhs` as bool, with numpy broadcasting; numeric dtypes.", binary_example("less_equal", "f32", "bool"), rules::compare_ordered, Cost::Arithmetic, NotDifferentiable),
        Op::Greater => elementwise("Greater-than test.", "lhs, rhs", "`lhs > rhs` as bool, with numpy broadcasting; numeric dtypes.", binary_example("greater", "f32", "bool"), rules::compare_ordered, Cost::Arithmetic, NotDifferentiable),
        Op::GreaterEqual => elementwise("Greater-or-equal test.", "lhs, rhs", "`lhs >= rhs` as bool, with numpy broadcasting; numeric dtypes.", binary_example("greater_equal", "f32", "bool"), rules::compare_ordered, Cost::Arithmetic, NotDifferentiable),
        Op::Select => elementwise("Chooses elements by a mask (numpy `where`).", "cond, on_true, on_false",
            "`cond ? on_true : on_false` elementwise; `cond` is bool; the three shapes broadcast together.",
            "graph @g(%c: bool[3], %a: f32[3], %b: f32[]) -> (y: f32[3]) {\n  %0 = select %c, %a, %b : f32[3]\n  return %0\n}\n",
            rules::select, Cost::Arithmetic, Rule),
        Op::ReduceSum => reduction("Sum over axes.", "Sum of the elements over `axes` (0 for an empty extent); numeric dtypes (integers wrap).",
            "graph @g(%x: f32[4,6]) -> (y: f32[4]) {\n  %0 = reduce_sum %x {axes = [1]} : f32[4]\n  return %0\n}\n", rules::reduce_numeric, Cost::Reduction, Rule),
        Op::ReduceMean => reduction("Mean over axes.", "Sum over `axes` divided by the number of reduced elements; floats only (NaN for an empty extent).",
            "graph @g(%x: f32[4,6]) -> (y: f32[1,6]) {\n  %0 = reduce_mean %x {axes = [0], keep_dims = true} : f32[1,6]\n  return %0\n}\n", rules::reduce_float, Cost::Reduction, Rule),
        Op::ReduceMax => reduction("Maximum over axes.", "Largest element over `axes`, the first of equal ones (a row of +0 and -0 gives its first zero); NaN if any is NaN; the dtype's lowest value (-inf for floats) for an empty extent.",
            "graph @g(%x: i32[4,6]) -> (y: i32[]) {\n  %0 = reduce_max %x {axes = [0, 1]} : i32[]\n  return %0\n}\n", rules::reduce_numeric, Cost::Reduction, Rule),
        Op::ReduceMin => reduction("Minimum over axes.", "Smallest element over `axes`, the first of equal ones (a row of +0 and -0 gives its first zero); NaN if any is NaN; the dtype's highest value (+inf for floats) for an empty extent.",
            "graph @g(%x: f32[4,6]) -> (y: f32[6]) {\n  %0 = reduce_min %x {axes = [-2]} : f32[6]\n  return %0\n}\n", rules::reduce_numeric, Cost::Reduction, Rule),
        Op::ReduceProd => reduction("Product over axes.", "Product of the elements over `axes` (1 for an empty extent); numeric dtypes (integers wrap; floats multiply in f64 and round once).",
            "graph @g(%x: f32[4,6]) -> (y: f32[4,1]) {\n  %0 = reduce_prod %x {axes = [1], keep_dims = true} : f32[4,1]\n  return %0\n}\n", rules::reduce_numeric, Cost::Reduction, Rule),
        Op::TopK => Plain {
            kind: Opaque,
            summary: "The k largest (or smallest) elements along an axis, and their indices.",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![
                required("k", K::Int, "How many to keep, from 0 to the axis' dim."),
                required("axis", K::Int, "The axis to search; negative counts from the end."),
                attr("largest", K::Bool, AttrDefault::Value(Attr::Bool(true)), "The largest elements (else the smallest)."),
            ],
            semantics: "Two results: the `k` elements of each slice along `axis` that come first in descending order (ascending without `largest`), in that order, and their indices along the axis as i64. Equal elements keep their index order (the lower index first); NaN ranks above every number, as in numpy's sort (first when largest, last otherwise). Numeric dtypes. ONNX `TopK`.",
            example: "graph @g(%x: f32[2,5]) -> (v: f32[2,3], i: i64[2,3]) {\n  %0, %1 = top_k %x {k = 3, axis = 1} : f32[2,3], i64[2,3]\n  return %0, %1\n}\n",
            infer: rules::top_k,
            cost: Cost::Sort,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Softmax => Plain {
            kind: Opaque,
            summary: "Normalized exponential along an axis (a composite).",
            operands: "input",
            arity: (1, Some(1)),
            attrs: vec![
                attr("axis", K::Int, AttrDefault::Value(Attr::Int(-1)), "The axis to normalize over."),
            ],
            semantics: "`exp(x - max(x)) / sum(exp(x - max(x)))` along `axis`, for floats. A composite: passes expand it into reduce_max, sub, exp, reduce_sum and div before fusion.",
            example: "graph @g(%x: f32[2,5]) -> (y: f32[2,5]) {\n  %0 = softmax %x : f32[2,5]\n  return %0\n}\n",
            infer: rules::softmax,
            cost: Cost::Softmax,
            gradient: Rule,
        }
        .into(),
        Op::MaxPool | Op::AvgPool => {
            let max = op == Op::MaxPool;
            let attrs = pool_attrs(op);
            Plain {
                kind: Opaque,
                summary: if max { "Maximum over sliding windows (ONNX `MaxPool`)." } else { "Mean over sliding windows (ONNX `AveragePool`)." },
                operands: "input",
                arity: (1, Some(1)),
                attrs,
                semantics: if max {
                    "`input` is `[N, C, D1, ..., Dk]`, numeric. Each output element is the largest input element in its window (padding never wins; NaN if any is NaN). Output size per dim: `floor((D + pad_begin + pad_end - dilation*(K-1) - 1) / stride) + 1` (with `ceil_mode`, rounded up, dropping a window that would start in the trailing padding)."
                } else {
                    "`input` is `[N, C, D1, ..., Dk]`, floats. Each output element is the sum of the input elements in its window divided by their count; with `count_include_pad`, padding positions (as 0) count too, but positions a `ceil_mode` window reaches beyond the padding never do. Output sizes as for `max_pool`."
                },
                example: if max {
                    "graph @g(%x: f32[1,1,4,4]) -> (y: f32[1,1,2,2]) {\n  %0 = max_pool %x {kernel = [2, 2], strides = [2, 2]} : f32[1,1,2,2]\n  return %0\n}\n"
                } else {
                    "graph @g(%x: f32[1,1,4,4]) -> (y: f32[1,1,4,4]) {\n  %0 = avg_pool %x {kernel = [3, 3], pads = [1, 1, 1, 1]} : f32[1,1,4,4]\n  return %0\n}\n"
                },
                infer: rules::pool,
                cost: Cost::Pool,
                gradient: Rule,
            }
            .into()
        }
        Op::AvgPoolGrad => Plain {
            kind: Opaque,
            summary: "The gradient of avg_pool with respect to its input.",
            operands: "grad_output",
            arity: (1, Some(1)),
            attrs: pool_attrs(op),
            semantics: "The adjoint of `avg_pool` with these attributes of an input of shape `shape` (`[N, C, D1, ..., Dk]`, the result's shape): `grad_output` is that pool's result (its gradient), floats. Each element of `grad_output` is divided by its window's divisor (the count avg_pool divided by) and added to every input position of its window. The pool of `shape` must give grad_output's shape.",
            example: "graph @g(%dy: f32[1,1,4,4]) -> (dx: f32[1,1,4,4]) {\n  %0 = avg_pool_grad %dy {kernel = [3, 3], pads = [1, 1, 1, 1], shape = [1, 1, 4, 4]} : f32[1,1,4,4]\n  return %0\n}\n",
            infer: rules::avg_pool_grad,
            cost: Cost::PoolGrad,
            gradient: Rule,
        }
        .into(),
        Op::SoftmaxCrossEntropy => Plain {
            kind: Opaque,
            summary: "Softmax cross-entropy of logits against integer class labels (a loss).",
            operands: "logits, labels",
            arity: (2, Some(2)),
            attrs: vec![loss_reduction()],
            semantics: "`logits` is floats `[..., C]` (rank at least 1) and `labels` i32 or i64 of the logits' shape without its last dim. Each example's loss is `logsumexp(logits[b, :]) - logits[b, labels[b]]`, computed with the row's maximum subtracted and the exponentials summed in f64. With `reduction` \"none\" the result holds the per-example losses (labels' shape); \"sum\" and \"mean\" give a scalar, their sum or mean (the mean of no examples is NaN). A label outside [0, C) is a run-time error naming it.",
            example: "graph @g(%x: f32[4,10], %l: i64[4]) -> (y: f32[]) {\n  %0 = softmax_cross_entropy %x, %l : f32[]\n  return %0\n}\n",
            infer: rules::softmax_cross_entropy,
            cost: Cost::Softmax,
            gradient: Rule,
        }
        .into(),
        Op::MeanSquaredError => Plain {
            kind: Opaque,
            summary: "Squared differences, summed or averaged (a loss).",
            operands: "prediction, target",
            arity: (2, Some(2)),
            attrs: vec![loss_reduction()],
            semantics: "`prediction` and `target` have one float type (no broadcasting). The elementwise `(prediction - target)^2`, then with `reduction` \"none\" that tensor, with \"sum\" its sum and with \"mean\" its mean, as scalars (sums accumulate in f64; the mean of no elements is NaN).",
            example: "graph @g(%p: f32[4,3], %t: f32[4,3]) -> (y: f32[]) {\n  %0 = mean_squared_error %p, %t : f32[]\n  return %0\n}\n",
            infer: rules::mean_squared_error,
            cost: Cost::SquaredError,
            gradient: Rule,
        }
        .into(),
        Op::Grad => Plain {
            kind: Opaque,
            summary: "Gradients of a scalar loss with respect to values (expanded by the autodiff lowering).",
            operands: "loss, wrt...",
            arity: (2, None),
            attrs: vec![],
            semantics: "`loss` is an f32 or f64 scalar and each `wrt` an f32 or f64 tensor; result i, of wrt i's type, is the gradient of `loss` with respect to wrt i (0 where the loss does not depend on it). A placeholder: the `autodiff` lowering replaces it with the ops that compute the gradients before the other passes run, and nothing executes it (one that reaches the interpreter is an internal error).",
            example: "graph @g(%x: f32[2,3], %w: f32[3,4]) -> (dx: f32[2,3], dw: f32[3,4]) {\n  %0 = matmul %x, %w : f32[2,4]\n  %1 = reduce_sum %0 {axes = [0, 1]} : f32[]\n  %2, %3 = grad %1, %x, %w : f32[2,3], f32[3,4]\n  return %2, %3\n}\n",
            infer: rules::grad,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Variable => Def {
            resident: true,
            ..Plain {
                kind: Stateful,
                summary: "Declares a variable: mutable state held by the session.",
                operands: "",
                arity: (0, Some(0)),
                attrs: vec![
                    required("name", K::Str, "The variable's name in the session and in checkpoints. Graphs of one module that name the same variable share it."),
                    attr("init", K::Tensor, AttrDefault::Optional, "Initial value, of the variable's type. Without it the variable is uninitialized until assigned, and reading it is a run-time error."),
                ],
                semantics: "The result is a handle `var<T>` to the session's variable `name`, created on first use. The result type must be written.",
                example: "graph @g() -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %0 = read %w : f32[2]\n  return %0\n}\n",
                infer: rules::variable,
                cost: Cost::Free,
                gradient: NotDifferentiable,
            }
            .into()
        },
        Op::Read => Plain {
            kind: Stateful,
            summary: "Reads a variable.",
            operands: "var",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "The variable's current value. Reads and writes of one variable happen in the order their dependencies (data or `after`) impose; unordered accesses may interleave in any order.",
            example: "graph @g() -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %0 = read %w : f32[2]\n  return %0\n}\n",
            infer: rules::read,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Assign => Plain {
            kind: Stateful,
            summary: "Writes a variable.",
            operands: "var, value",
            arity: (2, Some(2)),
            attrs: vec![],
            semantics: "Stores `value` (of the variable's type) into the variable; the result is the stored value.",
            example: "graph @g(%x: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\"} : var<f32[2]>\n  %0 = assign %w, %x : f32[2]\n  return %0\n}\n",
            infer: rules::assign,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::AssignAdd => Plain {
            kind: Stateful,
            summary: "Adds to a variable in place.",
            operands: "var, delta",
            arity: (2, Some(2)),
            attrs: vec![],
            semantics: "Atomically replaces the variable's value `v` by `v + delta` (same type, numeric); the result is the new value.",
            example: "graph @g(%d: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %0 = assign_add %w, %d : f32[2]\n  return %0\n}\n",
            infer: rules::assign_add,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::ApplySgd => Plain {
            kind: Stateful,
            summary: "A gradient-descent update of a variable, in place.",
            operands: "var, lr, grad",
            arity: (3, Some(3)),
            attrs: vec![],
            semantics: leak(format!("`var` is a handle to a variable of a float type T, `lr` a scalar of T's dtype and `grad` of type T. Atomically replaces the variable's value by `var - lr * grad`; the result is the new value. {OPTIMIZER}")),
            example: "graph @g(%lr: f32[], %dw: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %0 = apply_sgd %w, %lr, %dw : f32[2]\n  return %0\n}\n",
            infer: rules::apply_sgd,
            cost: Cost::Update { ops: 2, sqrt: false },
            gradient: NotDifferentiable,
        }
        .into(),
        Op::ApplyMomentum => Plain {
            kind: Stateful,
            summary: "A momentum update of a variable and its accumulator, in place.",
            operands: "var, accum, lr, grad, momentum",
            arity: (5, Some(5)),
            attrs: vec![attr("use_nesterov", K::Bool, AttrDefault::Value(Attr::Bool(false)), "Nesterov momentum: step along the gradient plus the momentum's look-ahead.")],
            semantics: leak(format!("`var` and `accum` are handles to variables of one float type T, `lr` and `momentum` scalars of T's dtype and `grad` of type T. Atomically, `accum = accum * momentum + grad`, then `var -= lr * accum`, or with `use_nesterov` `var -= lr * grad + lr * momentum * accum` (TensorFlow's ApplyMomentum); the result is the variable's new value. {OPTIMIZER}")),
            example: "graph @g(%lr: f32[], %dw: f32[2], %mu: f32[]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %a = variable {name = \"w/accum\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %0 = apply_momentum %w, %a, %lr, %dw, %mu : f32[2]\n  return %0\n}\n",
            infer: rules::apply_momentum,
            cost: Cost::Update { ops: 4, sqrt: false },
            gradient: NotDifferentiable,
        }
        .into(),
        Op::ApplyAdam => Plain {
            kind: Stateful,
            summary: "An Adam update of a variable, its moments and its step count, in place.",
            operands: "var, m, v, step, lr, grad",
            arity: (6, Some(6)),
            attrs: vec![
                attr("beta1", K::Float, AttrDefault::Value(Attr::Float(0.9)), "Decay of the first moment."),
                attr("beta2", K::Float, AttrDefault::Value(Attr::Float(0.999)), "Decay of the second moment."),
                attr("epsilon", K::Float, AttrDefault::Value(Attr::Float(1e-7)), "Added to the second moment's square root."),
            ],
            semantics: leak(format!("`var`, `m` and `v` are handles to variables of one float type T; `step` a handle to a scalar variable of T's dtype counting the updates (start it at 0); `lr` a scalar of T's dtype and `grad` of type T. Atomically: `t = step + 1` is stored in `step`; `lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)`; `m = beta1 * m + (1 - beta1) * grad`; `v = beta2 * v + (1 - beta2) * grad^2`; `var -= lr_t * m / (sqrt(v) + epsilon)` (TensorFlow's ApplyAdam, with the betas' powers from `step`); the result is the variable's new value. {OPTIMIZER}")),
            example: "graph @g(%lr: f32[], %dw: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %m = variable {name = \"w/m\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %v = variable {name = \"w/v\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %t = variable {name = \"step\", init = dense<0.0> : f32[]} : var<f32[]>\n  %0 = apply_adam %w, %m, %v, %t, %lr, %dw : f32[2]\n  return %0\n}\n",
            infer: rules::apply_adam,
            cost: Cost::Update { ops: 6, sqrt: true },
            gradient: NotDifferentiable,
        }
        .into(),
        Op::ApplyRmsprop => Plain {
            kind: Stateful,
            summary: "An RMSProp update of a variable and its accumulators, in place.",
            operands: "var, ms, mom, lr, grad",
            arity: (5, Some(5)),
            attrs: vec![
                attr("rho", K::Float, AttrDefault::Value(Attr::Float(0.9)), "Decay of the mean square."),
                attr("momentum", K::Float, AttrDefault::Value(Attr::Float(0.0)), "Decay of the momentum accumulator."),
                attr("epsilon", K::Float, AttrDefault::Value(Attr::Float(1e-7)), "Added to the mean square under the square root."),
            ],
            semantics: leak(format!("`var`, `ms` and `mom` are handles to variables of one float type T, `lr` a scalar of T's dtype and `grad` of type T. Atomically: `ms = rho * ms + (1 - rho) * grad^2`; `mom = momentum * mom + lr * grad / sqrt(ms + epsilon)`; `var -= mom`; the result is the variable's new value. {OPTIMIZER}")),
            example: "graph @g(%lr: f32[], %dw: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %s = variable {name = \"w/ms\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %m = variable {name = \"w/mom\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %0 = apply_rmsprop %w, %s, %m, %lr, %dw : f32[2]\n  return %0\n}\n",
            infer: rules::apply_rmsprop,
            cost: Cost::Update { ops: 5, sqrt: true },
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Queue => Plain {
            kind: Stateful,
            summary: "Declares a FIFO queue of tensor tuples held by the session.",
            operands: "",
            arity: (0, Some(0)),
            attrs: vec![
                required("name", K::Str, "The queue's name in the session; graphs of one module that name the same queue share it."),
                required("capacity", K::Int, "Most elements held at once, at least 1; enqueue blocks while full."),
            ],
            semantics: "The result is a handle `queue<T1, ..., Tn>` to the session's queue `name`; each element is a tuple of tensors of those types. The result type must be written.",
            example: "graph @g(%x: f32[4]) -> (y: f32[4]) {\n  %q = queue {name = \"q\", capacity = 8} : queue<f32[4]>\n  %0 = enqueue %q, %x : token\n  %1 = dequeue %q after(%0) : f32[4]\n  return %1\n}\n",
            infer: rules::queue,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Enqueue => Plain {
            kind: Stateful,
            summary: "Appends a tuple to a queue.",
            operands: "queue, components...",
            arity: (1, None),
            attrs: vec![],
            semantics: "Blocks while the queue is full; an error if it is closed. The components match the queue's types. The result is a token.",
            example: "graph @g(%x: f32[4], %i: i64[]) -> (t: token) {\n  %q = queue {name = \"q\", capacity = 8} : queue<f32[4], i64[]>\n  %0 = enqueue %q, %x, %i : token\n  return %0\n}\n",
            infer: rules::enqueue,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Dequeue => Plain {
            kind: Stateful,
            summary: "Removes the oldest tuple from a queue.",
            operands: "queue",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "Blocks while the queue is empty; an error once it is closed and empty. One result per component type.",
            example: "graph @g() -> (x: f32[4], i: i64[]) {\n  %q = queue {name = \"q\", capacity = 8} : queue<f32[4], i64[]>\n  %0, %1 = dequeue %q : f32[4], i64[]\n  return %0, %1\n}\n",
            infer: rules::dequeue,
            cost: Cost::Free,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::QueueClose => Plain {
            kind: Stateful,
            summary: "Closes a queue.",
            operands: "queue",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "Later enqueues fail; dequeues drain what is left and then fail; blocked waiters wake with that error.",
            example: "graph @g() -> (t: token) {\n  %q = queue {name = \"q\", capacity = 8} : queue<f32[4]>\n  %0 = queue_close %q : token\n  return %0\n}\n",
            infer: rules::queue_close,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::QueueSize => Plain {
            kind: Stateful,
            summary: "Number of tuples in a queue.",
            operands: "queue",
            arity: (1, Some(1)),
            attrs: vec![],
            semantics: "An i64 scalar: the queue's length when the op runs.",
            example: "graph @g() -> (n: i64[]) {\n  %q = queue {name = \"q\", capacity = 8} : queue<f32[4]>\n  %0 = queue_size %q : i64[]\n  return %0\n}\n",
            infer: rules::queue_size,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::NoOp => Plain {
            kind: Stateful,
            summary: "Does nothing; groups control dependencies.",
            operands: "",
            arity: (0, Some(0)),
            attrs: vec![],
            semantics: "Produces a token once everything in its `after` list has run; a target that stands for a group of effects (a training step's updates).",
            example: "graph @g(%x: f32[2]) -> (t: token) {\n  %w = variable {name = \"w\"} : var<f32[2]>\n  %0 = assign %w, %x : f32[2]\n  %1 = no_op after(%0) : token\n  return %1\n}\n",
            infer: rules::no_op,
            cost: Cost::Arithmetic,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Cond => Def {
            summary: "Runs one of two regions.",
            operands: "pred, args...",
            arity: (1, None),
            attrs: vec![],
            regions: &["then", "else"],
            flow: RegionFlow::OneOf,
            resident: false,
            kind: Control,
            stateful: false,
            semantics: "`pred` is a bool scalar. Both regions take parameters of the types of `args`; if `pred` is true `then` runs on `args`, else `else` does; the results are what the region that ran yields. Both regions yield the same types. Only the chosen region's effects happen.",
            example: "graph @g(%p: bool[], %x: f32[3]) -> (y: f32[3]) {\n  %0 = cond %p, %x : f32[3]\n    then(%a: f32[3]) {\n      %1 = exp %a : f32[3]\n      yield %1\n    }\n    else(%b: f32[3]) {\n      %2 = neg %b : f32[3]\n      yield %2\n    }\n  return %0\n}\n",
            infer: rules::cond,
            cost: Cost::Regions,
            gradient: Rule,
        },
        Op::While => Def {
            summary: "A loop with loop-carried values.",
            operands: "init...",
            arity: (0, None),
            attrs: vec![],
            regions: &["cond", "body"],
            flow: RegionFlow::Loop,
            resident: false,
            kind: Control,
            stateful: false,
            semantics: "Both regions take parameters of the operands' types (the loop-carried values). The values start as the operands; while `cond` yields true on them, `body` runs and yields the next values; the results are the values for which `cond` yielded false.",
            example: "graph @g(%n: i32[]) -> (y: i32[]) {\n  %0 = constant {value = dense<0> : i32[]} : i32[]\n  %1, %2 = while %0, %n : i32[], i32[]\n    cond(%i: i32[], %m: i32[]) {\n      %3 = less %i, %m : bool[]\n      yield %3\n    }\n    body(%j: i32[], %k: i32[]) {\n      %4 = constant {value = dense<1> : i32[]} : i32[]\n      %5 = add %j, %4 : i32[]\n      yield %5, %k\n    }\n  return %1\n}\n",
            infer: rules::while_loop,
            cost: Cost::Regions,
            gradient: Rule,
        },
        Op::Fusion => Def {
            summary: "A group of ops compiled as one kernel.",
            operands: "inputs...",
            arity: (0, None),
            attrs: vec![attr("kind", K::Str, AttrDefault::Optional, "How the group was formed: \"loop\" (elementwise and injective ops), \"input\" (a reduction with its producers and consumers), \"output\" (a contraction with its epilogue).")],
            regions: &["kernel"],
            flow: RegionFlow::Once,
            resident: false,
            kind: Opaque,
            stateful: false,
            semantics: "The `kernel` region takes parameters of the operands' types and yields the results. It holds only pure ops (no state, communication or nested control flow); running the fusion means running its region once.",
            example: "graph @g(%x: f32[8,4], %w: f32[4,2], %b: f32[2]) -> (y: f32[8,2]) {\n  %0 = fusion %x, %w, %b {kind = \"output\"} : f32[8,2]\n    kernel(%a: f32[8,4], %c: f32[4,2], %d: f32[2]) {\n      %1 = matmul %a, %c : f32[8,2]\n      %2 = add %1, %d : f32[8,2]\n      %3 = relu %2 : f32[8,2]\n      yield %3\n    }\n  return %0\n}\n",
            infer: rules::fusion,
            cost: Cost::Regions,
            gradient: NotDifferentiable,
        },
        Op::Send => Plain {
            kind: Communication,
            summary: "Hands a tensor to another device.",
            operands: "value",
            arity: (1, Some(1)),
            attrs: vec![
                required("key", K::Str, "The rendezvous key; exactly one recv in the module has it."),
                required("to", K::Str, "The receiving device, a device spec."),
            ],
            semantics: "Publishes `value` under `key` in the rendezvous for the step (inside loops, for the current iteration); never blocks. The result is a token.",
            example: "graph @g(%x: f32[4]) -> (t: token) {\n  %0 = send %x {key = \"x:0\", to = \"/device:cpu:1\"} : token\n  return %0\n}\n",
            infer: rules::send,
            cost: Cost::Move,
            gradient: NotDifferentiable,
        }
        .into(),
        Op::Recv => Plain {
            kind: Communication,
            summary: "Takes a tensor from another device.",
            operands: "",
            arity: (0, Some(0)),
            attrs: vec![
                required("key", K::Str, "The rendezvous key of the matching send."),
                required("from", K::Str, "The sending device, a device spec."),
            ],
            semantics: "Blocks until the send with the same key (and, inside loops, the same iteration) has published its tensor, then yields it. The result type must be written and equals the send's operand type.",
            example: "graph @g() -> (y: f32[4]) {\n  %0 = recv {key = \"x:0\", from = \"/device:cpu:0\"} : f32[4]\n  return %0\n}\n",
            infer: rules::recv,
            cost: Cost::Move,
            gradient: NotDifferentiable,
        }
        .into(),
    };
    OpDef {
        op,
        summary: d.summary,
        operands: d.operands,
        min_operands: d.arity.0,
        max_operands: d.arity.1,
        attrs: d.attrs,
        regions: d.regions,
        kind: d.kind,
        stateful: d.stateful,
        flow: d.flow,
        resident: d.resident,
        cost: d.cost,
        gradient: d.gradient,
        semantics: d.semantics,
        example: d.example,
        infer: d.infer,
    }
}

/// What every optimizer's semantics end with.
const OPTIMIZER: &str = "The arithmetic is in the variables' dtype, elementwise, as the same formula written with elementwise ops computes it up to rounding. An accumulator never assigned is an error, as reading it would be (give it `init = dense<0.0>`). Every variable the op writes is locked for the whole update (in the order of their names, so concurrent updates and checkpoints never deadlock and see all of one update or none), and each buffer is updated in place when nothing else holds it.";

/// conv's attributes, and the gradients' (which add the `shape` they produce).
fn conv_attrs(shape: Option<&'static str>) -> Vec<AttrDef> {
    let mut attrs = vec![
        attr(
            "strides",
            AttrKind::Ints,
            AttrDefault::Optional,
            "Step per spatial dim, each at least 1; all 1 when left out.",
        ),
        attr(
            "pads",
            AttrKind::Ints,
            AttrDefault::Optional,
            "Zero padding: every spatial dim's start, then every one's end; all 0 when left out.",
        ),
        attr(
            "dilations",
            AttrKind::Ints,
            AttrDefault::Optional,
            "Spacing of the filter taps per spatial dim; all 1 when left out.",
        ),
        attr(
            "group",
            AttrKind::Int,
            AttrDefault::Value(Attr::Int(1)),
            "Number of channel groups; input and output channels are both divisible by it.",
        ),
    ];
    attrs.extend(shape.map(|doc| required("shape", AttrKind::Ints, doc)));
    attrs
}

/// The attributes of `max_pool`, `avg_pool` and `avg_pool_grad`.
fn pool_attrs(op: Op) -> Vec<AttrDef> {
    let mut attrs = vec![
        required("kernel", AttrKind::Ints, "Window size per spatial dim."),
        attr("strides", AttrKind::Ints, AttrDefault::Optional, "Step per spatial dim, each at least 1; all 1 when left out."),
        attr("pads", AttrKind::Ints, AttrDefault::Optional, "Padding: every spatial dim's start, then every one's end; all 0 when left out."),
        attr("dilations", AttrKind::Ints, AttrDefault::Optional, "Spacing of the window taps per spatial dim; all 1 when left out."),
        attr("ceil_mode", AttrKind::Bool, AttrDefault::Value(Attr::Bool(false)), "Round output sizes up: a last, partial window counts if it starts inside the input or its leading padding."),
    ];
    if op == Op::MaxPool {
        attrs.push(attr("indices", AttrKind::Bool, AttrDefault::Value(Attr::Bool(false)), "Also return, as a second result of type i64, the row-major flat index into the whole input of each maximum (the first, on ties)."));
    } else {
        attrs.push(attr(
            "count_include_pad",
            AttrKind::Bool,
            AttrDefault::Value(Attr::Bool(false)),
            "Count padding positions in each window's divisor.",
        ));
    }
    if op == Op::AvgPoolGrad {
        attrs.push(required(
            "shape",
            AttrKind::Ints,
            "The shape of the pool's input, `[N, C, D1, ..., Dk]`: the result's shape.",
        ));
    }
    attrs
}

/// A loss's `reduction`.
fn loss_reduction() -> AttrDef {
    attr(
        "reduction",
        AttrKind::Str,
        AttrDefault::Value(Attr::Str("mean".into())),
        "How the losses combine: \"none\" (one per example), \"sum\" or \"mean\" (a scalar).",
    )
}

/// Example graphs for the many elementwise ops are generated so each stays a complete graph.
fn unary_example(op: &str, dtype: &str) -> &'static str {
    leak(format!("graph @g(%x: {dtype}[3]) -> (y: {dtype}[3]) {{\n  %0 = {op} %x : {dtype}[3]\n  return %0\n}}\n"))
}

fn binary_example(op: &str, dtype: &str, out: &str) -> &'static str {
    leak(format!("graph @g(%a: {dtype}[2,3], %b: {dtype}[3]) -> (y: {out}[2,3]) {{\n  %0 = {op} %a, %b : {out}[2,3]\n  return %0\n}}\n"))
}

/// The table is built once per process and lives for its whole run.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}
