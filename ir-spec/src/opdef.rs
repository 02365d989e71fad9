//! What the op table is made of: the ops, an entry's shape ([`OpDef`]) and the interface its
//! type rule implements ([`InferCtx`] in, result types or an [`InferError`] out). The table
//! (`ops.rs`) points at the type rules (`rules.rs`) and the rules see their op's entry
//! through this interface, so neither module needs the other.

use crate::attr::{Attr, AttrKind, Attrs};
use crate::types::Type;

macro_rules! define_ops {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// An operation of the IR.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Op { $($variant),* }

        impl Op {
            pub const ALL: &'static [Op] = &[$(Op::$variant),*];

            /// The op's spelling in the IR.
            pub fn name(self) -> &'static str {
                match self { $(Op::$variant => $name),* }
            }

            pub fn from_name(s: &str) -> Option<Op> {
                match s { $($name => Some(Op::$variant),)* _ => None }
            }
        }
    };
}

define_ops! {
    // Sources and array ops.
    Constant => "constant",
    Identity => "identity",
    Cast => "cast",
    Bitcast => "bitcast",
    Reshape => "reshape",
    Broadcast => "broadcast",
    Transpose => "transpose",
    Concat => "concat",
    Slice => "slice",
    Split => "split",
    Gather => "gather",
    ScatterAdd => "scatter_add",
    Pad => "pad",
    Shape => "shape",
    Rank => "rank",
    // Matrix.
    MatMul => "matmul",
    Conv => "conv",
    ConvInputGrad => "conv_input_grad",
    ConvFilterGrad => "conv_filter_grad",
    // Elementwise unary.
    Neg => "neg",
    Abs => "abs",
    Exp => "exp",
    Log => "log",
    Sqrt => "sqrt",
    Tanh => "tanh",
    Sigmoid => "sigmoid",
    Relu => "relu",
    Erf => "erf",
    Sin => "sin",
    Cos => "cos",
    Tan => "tan",
    Asin => "asin",
    Acos => "acos",
    Atan => "atan",
    Sinh => "sinh",
    Cosh => "cosh",
    Asinh => "asinh",
    Acosh => "acosh",
    Atanh => "atanh",
    Floor => "floor",
    Ceil => "ceil",
    Round => "round",
    Sign => "sign",
    Not => "not",
    // Elementwise binary.
    Add => "add",
    Sub => "sub",
    Mul => "mul",
    Div => "div",
    Pow => "pow",
    Mod => "mod",
    Max => "max",
    Min => "min",
    And => "and",
    Or => "or",
    Xor => "xor",
    ShiftLeft => "shift_left",
    ShiftRight => "shift_right",
    Equal => "equal",
    NotEqual => "not_equal",
    Less => "less",
    LessEqual => "less_equal",
    Greater => "greater",
    GreaterEqual => "greater_equal",
    Select => "select",
    // Reductions and composites.
    ReduceSum => "reduce_sum",
    ReduceMean => "reduce_mean",
    ReduceMax => "reduce_max",
    ReduceMin => "reduce_min",
    ReduceProd => "reduce_prod",
    TopK => "top_k",
    Softmax => "softmax",
    MaxPool => "max_pool",
    AvgPool => "avg_pool",
    AvgPoolGrad => "avg_pool_grad",
    // Training: losses and the gradient placeholder.
    SoftmaxCrossEntropy => "softmax_cross_entropy",
    MeanSquaredError => "mean_squared_error",
    Grad => "grad",
    // State.
    Variable => "variable",
    Read => "read",
    Assign => "assign",
    AssignAdd => "assign_add",
    ApplySgd => "apply_sgd",
    ApplyMomentum => "apply_momentum",
    ApplyAdam => "apply_adam",
    ApplyRmsprop => "apply_rmsprop",
    Queue => "queue",
    Enqueue => "enqueue",
    Dequeue => "dequeue",
    QueueClose => "queue_close",
    QueueSize => "queue_size",
    NoOp => "no_op",
    // Structure.
    Cond => "cond",
    While => "while",
    Fusion => "fusion",
    Send => "send",
    Recv => "recv",
}

/// How an op behaves for fusion and scheduling (after XLA's and TVM's op kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Each output element depends on the input elements at the same (broadcast) index.
    Elementwise,
    /// Each output element is one input element moved (reshape, transpose, slice, ...).
    Injective,
    /// Reduces over axes.
    Reduction,
    /// A contraction (matmul): expensive, takes elementwise epilogues.
    Contraction,
    /// Computes its value from attributes alone.
    Source,
    /// Touches session state (variables, queues).
    Stateful,
    /// Holds regions that run conditionally or repeatedly.
    Control,
    /// Crosses devices.
    Communication,
    /// Cannot be fused with anything (a fusion region itself, composites that expand first).
    Opaque,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Elementwise => "elementwise",
            OpKind::Injective => "injective",
            OpKind::Reduction => "reduction",
            OpKind::Contraction => "contraction",
            OpKind::Source => "source",
            OpKind::Stateful => "stateful",
            OpKind::Control => "control",
            OpKind::Communication => "communication",
            OpKind::Opaque => "opaque",
        }
    }
}

/// How an op's regions run (MLIR's region-branch interface, in brief). Passes that follow
/// control into regions (placement's simulation, the cost model) read it instead of naming ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionFlow {
    /// The op has no regions.
    NoRegions,
    /// Each region runs once, in order (`fusion`).
    Once,
    /// One of the regions runs, chosen at run time (`cond`).
    OneOf,
    /// A loop: the first region (the condition) runs, and while it yields true the second
    /// (the body) runs and the condition again (`while`).
    Loop,
}

/// The kind of work an op does, by which a cost model prices it: the op says what it does,
/// the model (placement's `cost.rs`) what that costs on a device. Elements are counted in
/// the result unless a class says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Nothing beyond dispatch: a forwarded value, a handle, a shape, a queue's hand-over.
    Free,
    /// A few instructions per result element (add, compare, select, cast, a small update).
    Arithmetic,
    /// A short polynomial per result element (exp, log, sigmoid, sqrt).
    Transcendental,
    /// A libm call per result element (tanh, pow, the trigonometric and hyperbolic ones).
    Libm,
    /// The error function per result element.
    Erf,
    /// Elements copied to the result (array ops, a literal, a transfer).
    Move,
    /// Elements copied to the result by strided reads (transpose).
    Strided,
    /// A fold over each element of the first operand.
    Reduction,
    /// A sort of each slice of the first operand.
    Sort,
    /// A softmax's work (max, exp, sum, divide) per element of the first operand.
    Softmax,
    /// A difference squared and summed per element of the first operand.
    SquaredError,
    /// A matrix product: two flops per result element per element of the contracted dim.
    MatMul,
    /// A convolution: two flops per result element per weight tap of one group.
    Conv,
    /// A convolution's input gradient: conv's flops per element of the gradient (operand 0).
    ConvInputGrad,
    /// A convolution's filter gradient: conv's flops per element of the gradient (operand 1).
    ConvFilterGrad,
    /// A pooling: per result element, its window.
    Pool,
    /// A pooling's gradient: per element of the gradient, its window.
    PoolGrad,
    /// An optimizer's update of each element: `ops` arithmetic instructions, and a square root
    /// when `sqrt`.
    Update { ops: u8, sqrt: bool },
    /// What its regions cost, as they run ([`RegionFlow`]).
    Regions,
}

/// Whether reverse mode differentiates through an op: the table declares it, the autodiff
/// rules (`compiler/src/autodiff/rules/`) implement it, and a test checks the two agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gradient {
    /// A rule gives the adjoints of its operands (zero ones, for a piecewise constant op).
    Rule,
    /// No rule: integer or bool results, state, communication, or no adjoint expressible
    /// with the IR's ops; the reverse sweep reports a loss that depends on it.
    NotDifferentiable,
}

/// Whether an attribute must be written, and its value when it is not.
#[derive(Clone, Debug)]
pub enum AttrDefault {
    Required,
    /// May be left out; the op's semantics say what its absence means.
    Optional,
    /// May be left out, meaning this value. Canonical text leaves it out.
    Value(Attr),
}

#[derive(Clone, Debug)]
pub struct AttrDef {
    pub name: &'static str,
    pub kind: AttrKind,
    pub default: AttrDefault,
    pub doc: &'static str,
}

/// A region's signature as the type rules see it.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionSig {
    pub params: Vec<Type>,
    pub yields: Vec<Type>,
}

/// What a type-rule error is about, so the diagnostic can point at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    Op,
    Operand(usize),
    Attr(&'static str),
    Region(usize),
    Result(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InferError {
    pub blame: Blame,
    pub message: String,
}

impl InferError {
    pub fn new(blame: Blame, message: impl Into<String>) -> Self {
        InferError { blame, message: message.into() }
    }
}

/// What a type rule sees of a node.
#[derive(Clone, Copy, Debug)]
pub struct InferCtx<'a> {
    pub op: Op,
    /// The op's table entry (`op.def()`), for its attribute defaults and region names. Handed
    /// in because the table points at the rules: a rule that looked the table up would make
    /// the two depend on each other.
    pub def: &'a OpDef,
    pub operands: &'a [Type],
    pub attrs: &'a Attrs,
    /// The result types written in the text or held by the node, for ops whose result type
    /// is not determined by operands and attributes (recv, variable, queue).
    pub declared: Option<&'a [Type]>,
    pub regions: &'a [RegionSig],
}

pub type TypeRule = fn(&InferCtx<'_>) -> Result<Vec<Type>, InferError>;

/// Everything about one op.
#[derive(Debug)]
pub struct OpDef {
    pub op: Op,
    pub summary: &'static str,
    /// Operand names for the docs; a trailing `...` marks a variadic tail.
    pub operands: &'static str,
    pub min_operands: usize,
    pub max_operands: Option<usize>,
    pub attrs: Vec<AttrDef>,
    /// Region names, in order; they are also the region labels in the text.
    pub regions: &'static [&'static str],
    pub kind: OpKind,
    /// Reads or writes session state or communicates: never removed, reordered or duplicated
    /// by passes on their own account.
    pub stateful: bool,
    /// How its regions run (`NoRegions` exactly when `regions` is empty).
    pub flow: RegionFlow,
    /// Keeps its result on its device for as long as the session lives (a variable's value,
    /// a constant's literal): placement counts it against the device's memory.
    pub resident: bool,
    /// What work it does, for a cost model.
    pub cost: Cost,
    /// Whether the autodiff has a rule for it.
    pub gradient: Gradient,
    pub semantics: &'static str,
    /// A complete graph using the op; the test suite checks that it verifies.
    pub example: &'static str,
    pub infer: TypeRule,
}

impl OpDef {
    pub fn attr(&self, name: &str) -> Option<&AttrDef> {
        self.attrs.iter().find(|a| a.name == name)
    }

    /// The canonical position of an attribute in the printed dictionary.
    pub fn attr_rank(&self, name: &str) -> usize {
        self.attrs.iter().position(|a| a.name == name).unwrap_or(usize::MAX)
    }
}
