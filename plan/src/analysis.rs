//! The analysis: plans of loops, matrix products and column reductions, and which nodes
//! become kernels ([`kernels`]).

use graphc_ir::{DType, Graph, Module, Node, Op, Region, TensorType, Type, Value};

/// How a kernel input is read at output row `r`, column `j` (in elements): at
/// `r * row_stride + j * col_stride`, after the caller materializes it in full when
/// `materialize` (a broadcast the two strides cannot express).
#[derive(Clone, Debug, PartialEq)]
pub struct InputMap {
    pub row_stride: i64,
    /// 1 (contiguous) or 0 (the same element for every column).
    pub col_stride: i64,
    pub materialize: bool,
    /// `Some(offset)`: the input is a view of its operand (a `slice`, or a `gather` of one
    /// constant index, inside the kernel: see [`view`]), read from element `offset` of the
    /// operand's buffer on through the two strides, never copied. The caller passes the
    /// buffer from `offset` on and checks its extent from there.
    pub view: Option<usize>,
}

/// One operation of the loop body, on body values numbered in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Kernel input `i`.
    Input(usize),
    /// A constant splat.
    Const(f32),
    Unary(Op, usize),
    Binary(Op, usize, usize),
    /// `select(cond, a, b)`.
    Select(usize, usize, usize),
    /// A reduction of a full-shape value over the axes that make the plan's columns (the last,
    /// or a block of trailing axes; sum, max, min, mean): one value per row, computed in a pass
    /// over the row of its own and then read by every column.
    Reduce(Op, usize),
}

impl Step {
    /// The steps this one reads per element (a reduction's operand is read by its own pass,
    /// not per element).
    pub fn operands(&self) -> Vec<usize> {
        match *self {
            Step::Input(_) | Step::Const(_) | Step::Reduce(..) => vec![],
            Step::Unary(_, a) => vec![a],
            Step::Binary(_, a, b) => vec![a, b],
            Step::Select(c, a, b) => vec![c, a, b],
        }
    }
}

/// An elementwise loop kernel over a `[rows, cols]` view of the output shape. With reductions,
/// the view splits the shape where the reduced axes begin: `cols` is the product of the reduced
/// (trailing) dims, so each row is the contiguous run of elements one reduced value folds, in
/// the reference's order.
#[derive(Clone, Debug)]
pub struct LoopPlan {
    pub out: TensorType,
    pub rows: usize,
    pub cols: usize,
    pub inputs: Vec<InputMap>,
    pub input_types: Vec<TensorType>,
    pub steps: Vec<Step>,
    /// Which step values are the kernel's results, in order.
    pub results: Vec<usize>,
    /// Per result: one value per row (a reduction, or what follows from row values; of the
    /// output's type with the reduced axes 1, or without them for a reduction that drops them)
    /// rather than the full output.
    pub per_row: Vec<bool>,
    /// Per result: its type (`out` for a full one; the same `rows` elements in either row type).
    pub result_types: Vec<TensorType>,
    /// Per step: one value per row, computed once per row when the values it depends on
    /// are known (the reductions, inputs read once per row, and f32 steps of those and
    /// constants).
    pub row_values: Vec<bool>,
    /// The steps that reduce each row, in order: a kernel makes one pass over the row for
    /// each (with the row in cache), and a last pass for the results.
    pub reduces: Vec<usize>,
    /// Steps that a reduction pass stores in a scratch row so that later passes read them
    /// instead of computing them again (the expensive operands of reductions, like softmax's
    /// exponentials); slot `i` of the scratch holds `cached[i]`.
    pub cached: Vec<usize>,
}

impl LoopPlan {
    /// The type of result `k`.
    pub fn result_type(&self, k: usize) -> TensorType {
        self.result_types[k].clone()
    }

    /// The inputs a full result may be written over, should this be their last use: f32 inputs
    /// read element for element in the output's own layout. The kernel reads every element of
    /// them before it writes that element (the reduction passes only read, and the last pass
    /// loads all it needs of a column block before it stores it).
    pub fn overwritable(&self) -> Vec<usize> {
        let n = (self.rows * self.cols) as u64;
        (0..self.inputs.len())
            .filter(|&i| {
                let (m, t) = (&self.inputs[i], &self.input_types[i]);
                t.dtype == DType::F32
                    && t.num_elements() == Some(n)
                    && !m.materialize
                    && m.view.is_none()
                    // An input of a view's operand type may be that very operand (a value read
                    // whole and through a view of it, as two parameters): never written over,
                    // whatever the run half knows of their buffers.
                    && !self.inputs.iter().zip(&self.input_types).any(|(v, vt)| v.view.is_some() && vt == t)
                    && m.col_stride == 1
                    && (self.rows == 1 || m.row_stride == self.cols as i64)
            })
            .collect()
    }

    /// Which steps a loop body computes to get `wanted`: those and their operands, except
    /// past steps already `known` (row values, steps an earlier pass left in the scratch).
    pub fn needed(&self, wanted: &[usize], known: impl Fn(usize) -> bool) -> Vec<bool> {
        let mut need = vec![false; self.steps.len()];
        let mut stack = wanted.to_vec();
        while let Some(i) = stack.pop() {
            if !std::mem::replace(&mut need[i], true) && !known(i) {
                stack.extend(self.steps[i].operands());
            }
        }
        need
    }

    /// Whether step `i` can be computed once per row now, given the row values known
    /// (`known`): a row value, not a reduction (its pass gives it), not known yet, whose
    /// operands are known or constants.
    pub fn hoistable(&self, i: usize, known: impl Fn(usize) -> bool) -> bool {
        let step = &self.steps[i];
        self.row_values[i]
            && !matches!(step, Step::Reduce(..))
            && !known(i)
            && step.operands().iter().all(|&a| known(a) || matches!(self.steps[a], Step::Const(_)))
    }

    /// Whether step `i` is computed by the kernel (an op's result), not read from an input or
    /// given as a constant.
    pub fn computes(&self, i: usize) -> bool {
        !matches!(self.steps[i], Step::Input(_) | Step::Const(_))
    }

    /// Whether step `i` is at least 1 wherever it is not NaN: a row sum of exponentials of
    /// `x - max(x)` (softmax's denominator), which has a term exp(0) = 1 and none below 0.
    pub fn at_least_one(&self, i: usize) -> bool {
        let Step::Reduce(Op::ReduceSum, e) = self.steps[i] else { return false };
        matches!(self.steps[e], Step::Unary(Op::Exp, a) if matches!(self.steps[a], Step::Binary(Op::Sub, ..)) && self.at_most_zero(a))
    }

    /// Whether step `i` is at most zero wherever it is not NaN: `x - max(x)` along the row
    /// (softmax's shift: no element exceeds the row's maximum, and the rounded difference
    /// keeps the sign), or `-|x|`. An exponential of it cannot overflow.
    pub fn at_most_zero(&self, i: usize) -> bool {
        let strip = |mut i: usize| {
            while let Step::Unary(Op::Broadcast | Op::Identity, a) = self.steps[i] {
                i = a;
            }
            i
        };
        let same = |a: usize, b: usize| {
            let (a, b) = (strip(a), strip(b));
            a == b || matches!((&self.steps[a], &self.steps[b]), (Step::Input(x), Step::Input(y)) if x == y)
        };
        match self.steps[strip(i)] {
            Step::Binary(Op::Sub, a, m) => {
                matches!(self.steps[strip(m)], Step::Reduce(Op::ReduceMax, x) if same(x, a))
            }
            Step::Unary(Op::Neg, a) => matches!(self.steps[strip(a)], Step::Unary(Op::Abs, _)),
            _ => false,
        }
    }
}

/// What the kernels make of an op. Every op of the IR is listed in [`role`], so that a new op
/// does not compile until the backend decides what to do with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// An f32 (or mask) elementwise op of loop bodies: a unary, binary or select step.
    Elementwise,
    /// An elementwise comparison of f32s, yielding a mask.
    Comparison,
    /// A reduction, compiled over a block of trailing axes only (the kernel's columns): a pass
    /// over each row of its own.
    Reduction,
    /// A splat constant: a step of loop bodies, never a kernel alone.
    Constant,
    /// The head of a matrix-product kernel.
    MatMul,
    /// A kernel of its own, its region's nodes the body.
    Fusion,
    /// Not compiled: the interpreter runs it.
    Interpreted,
}

fn role(op: Op) -> Role {
    match op {
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Max
        | Op::Min
        | Op::Pow
        | Op::Neg
        | Op::Abs
        | Op::Relu
        | Op::Sqrt
        | Op::Exp
        | Op::Log
        | Op::Tanh
        | Op::Sigmoid
        | Op::Erf
        | Op::Select
        | Op::And
        | Op::Or
        | Op::Not
        | Op::Broadcast
        | Op::Identity => Role::Elementwise,
        Op::Less | Op::LessEqual | Op::Greater | Op::GreaterEqual | Op::Equal | Op::NotEqual => Role::Comparison,
        Op::ReduceSum | Op::ReduceMax | Op::ReduceMin | Op::ReduceMean => Role::Reduction,
        Op::Constant => Role::Constant,
        Op::MatMul => Role::MatMul,
        Op::Fusion => Role::Fusion,
        Op::Cast
        | Op::Reshape
        | Op::Transpose
        | Op::Concat
        | Op::Slice
        | Op::Split
        | Op::Gather
        | Op::ScatterAdd
        | Op::Pad
        | Op::Shape
        | Op::Rank
        | Op::Conv
        | Op::ConvInputGrad
        | Op::ConvFilterGrad
        | Op::Softmax
        | Op::MaxPool
        | Op::AvgPool
        | Op::AvgPoolGrad
        | Op::SoftmaxCrossEntropy
        | Op::MeanSquaredError
        | Op::Grad
        | Op::Variable
        | Op::Read
        | Op::Assign
        | Op::AssignAdd
        | Op::ApplySgd
        | Op::ApplyMomentum
        | Op::ApplyAdam
        | Op::ApplyRmsprop
        | Op::Queue
        | Op::Enqueue
        | Op::Dequeue
        | Op::QueueClose
        | Op::QueueSize
        | Op::NoOp
        | Op::Cond
        | Op::While
        | Op::Send
        | Op::Recv
        | Op::Sin
        | Op::Cos
        | Op::Tan
        | Op::Asin
        | Op::Acos
        | Op::Atan
        | Op::Sinh
        | Op::Cosh
        | Op::Asinh
        | Op::Acosh
        | Op::Atanh
        | Op::Floor
        | Op::Ceil
        | Op::Round
        | Op::Sign
        | Op::Mod
        | Op::Xor
        | Op::ShiftLeft
        | Op::ShiftRight
        | Op::Bitcast
        | Op::TopK
        | Op::ReduceProd => Role::Interpreted,
    }
}

/// The f32 ops a loop kernel computes.
pub fn supported(op: Op) -> bool {
    match role(op) {
        Role::Elementwise | Role::Comparison | Role::Reduction | Role::Constant => true,
        Role::MatMul | Role::Fusion | Role::Interpreted => false,
    }
}

/// The plan for node `n` of `g`: a `fusion` whose kernel is elementwise (with row
/// reductions), or a lone elementwise op or reduction over trailing axes. `None` for
/// anything else, which the interpreter keeps.
pub fn plan(g: &Graph, n: Node) -> Option<LoopPlan> {
    let nd = &g.nodes[n];
    match role(nd.op) {
        Role::Fusion => {
            let r: Region = nd.regions[0];
            build(g, &g.regions[r].params, &g.regions[r].nodes, &g.regions[r].yields, false)
        }
        Role::Elementwise | Role::Comparison | Role::Reduction => build(g, &nd.operands, &[n], &nd.results, false),
        Role::Constant | Role::MatMul | Role::Interpreted => None,
    }
}

/// A matrix product `[m,k] x [k,n]` with the elementwise ops that follow it in an "output"
/// fusion (or none, for a lone matmul), applied to each block of rows while it is in cache.
#[derive(Clone, Debug)]
pub struct MatMulPlan {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Which kernel operands are the two factors.
    pub lhs: usize,
    pub rhs: usize,
    /// The matmul's flags: the lhs operand is stored `[k, m]` and read as its transpose, the
    /// rhs `[n, k]` likewise (through swapped strides; nothing is transposed in memory).
    pub transpose_a: bool,
    pub transpose_b: bool,
    /// A product of factors of rank above 2: `None` for a 2-D one.
    pub batch: Option<Batch>,
    /// The epilogue over `[m, n]` rows: its input 0 is the product, input i > 0 is kernel
    /// operand `epilogue_operands[i - 1]`. `None`: the product is the result.
    pub epilogue: Option<(LoopPlan, Vec<usize>)>,
}

/// The batch of a product of factors of rank above 2 (numpy's `matmul`: the leading dims
/// broadcast): one `[m, k] x [k, n]` product per index of `dims`, the result's leading dims,
/// reading each factor's matrix at the index's offset by its strides (0 along a dim it
/// broadcasts). An lhs whose leading dims are the result's, by a 2-D rhs, has its rows folded
/// into `m` instead (`dims` empty): one product of the whole buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// The factors' and result's types as the graph has them.
    pub lhs: TensorType,
    pub rhs: TensorType,
    pub out: TensorType,
    pub dims: Vec<usize>,
    pub lhs_strides: Vec<usize>,
    pub rhs_strides: Vec<usize>,
}

impl Batch {
    /// The number of products.
    pub fn count(&self) -> usize {
        self.dims.iter().product()
    }

    /// The offsets of product `i`'s factors, in elements.
    pub fn offsets(&self, mut i: usize) -> (usize, usize) {
        let (mut a, mut b) = (0, 0);
        for d in (0..self.dims.len()).rev() {
            let at = i % self.dims[d];
            i /= self.dims[d];
            a += at * self.lhs_strides[d];
            b += at * self.rhs_strides[d];
        }
        (a, b)
    }
}

/// The plan for a 2-D f32 matmul, alone or heading an output fusion of elementwise ops.
pub fn matmul_plan(g: &Graph, node: Node) -> Option<MatMulPlan> {
    let (md, operands, epilogue) = headed(g, node, Op::MatMul)?;
    let md = &g.nodes[md];
    // A flagged factor is read as its transpose: `[k, m]` for the lhs, `[n, k]` for the rhs.
    let transpose_a = md.attrs.bool("transpose_a").unwrap_or(false);
    let transpose_b = md.attrs.bool("transpose_b").unwrap_or(false);
    let t = |v: Value| g.values[v].ty.as_tensor().cloned();
    let (a, b, c) = (t(md.operands[0])?, t(md.operands[1])?, t(md.results[0])?);
    if [&a, &b, &c].iter().any(|x| x.dtype != DType::F32 || x.rank() < 2) {
        return None;
    }
    // Every buffer's bytes within isize (and so every product of its dims).
    if [&a, &b, &c]
        .iter()
        .any(|x| x.num_elements().and_then(|e| e.checked_mul(4)).is_none_or(|e| e > isize::MAX as u64))
    {
        return None;
    }
    let last2 = |x: &TensorType| (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
    let read = |(r, c): (u64, u64), transpose: bool| if transpose { (c, r) } else { (r, c) };
    let ((m, k), (kb, n)) = (read(last2(&a), transpose_a), read(last2(&b), transpose_b));
    if k != kb || last2(&c) != (m, n) {
        return None;
    }
    let (m, k, n) = (m as usize, k as usize, n as usize);
    if m == 0 || k == 0 || n == 0 || c.num_elements() == Some(0) {
        return None;
    }
    let batch = if [&a, &b, &c].iter().all(|x| x.rank() == 2) {
        None
    } else {
        Some(batch(&a, &b, &c, m * k, k * n, !transpose_a)?)
    };
    // A folded batch is one product of all the lhs's rows.
    let m = match &batch {
        Some(bt) if bt.dims.is_empty() => (a.num_elements()? as usize) / k,
        _ => m,
    };
    let lhs = operands.iter().position(|&v| v == md.operands[0])?;
    let rhs = operands.iter().position(|&v| v == md.operands[1])?;
    Some(MatMulPlan { m, k, n, lhs, rhs, transpose_a, transpose_b, batch, epilogue })
}

/// The batch of a product of `a` by `b` into `c` (ranks 2 and up, `c`'s last two dims the
/// product's), whose factors hold `mk` and `kn` elements per matrix; `None` where the leading
/// dims do not broadcast to `c`'s. The lhs's rows fold into one product where `foldable` (it
/// is not read transposed).
fn batch(a: &TensorType, b: &TensorType, c: &TensorType, mk: usize, kn: usize, foldable: bool) -> Option<Batch> {
    let lead = c.rank() - 2;
    let dims: Vec<usize> = c.shape[..lead].iter().map(|&d| d as usize).collect();
    // Each factor's batch strides against the result's leading dims, right-aligned: 0 where
    // the factor lacks the dim or has it as 1.
    let strides = |x: &TensorType, per: usize| -> Option<Vec<usize>> {
        let own = &x.shape[..x.rank() - 2];
        if own.len() > lead {
            return None;
        }
        let mut out = vec![0; lead];
        let mut step = per;
        for (i, &d) in own.iter().enumerate().rev() {
            let at = lead - own.len() + i;
            match d as usize {
                1 => {}
                d if d == dims[at] => out[at] = step,
                _ => return None,
            }
            step *= d as usize;
        }
        Some(out)
    };
    let (lhs_strides, rhs_strides) = (strides(a, mk)?, strides(b, kn)?);
    let folds = foldable && b.rank() == 2 && a.shape[..a.rank() - 2] == c.shape[..lead];
    let (dims, lhs_strides, rhs_strides) =
        if folds { (Vec::new(), Vec::new(), Vec::new()) } else { (dims, lhs_strides, rhs_strides) };
    Some(Batch { lhs: a.clone(), rhs: b.clone(), out: c.clone(), dims, lhs_strides, rhs_strides })
}

/// A kernel's epilogue: its loop plan, and the kernel's operands it reads besides the head's
/// result (its input 0).
pub type Epilogue = (LoopPlan, Vec<usize>);

/// A node of op `head` standing alone, or heading an "output" fusion: the head node, the
/// kernel's operands (the fusion's parameters, or the head's own), and the epilogue of the
/// fusion's other nodes over the head's result (`None` alone). `None` when it is neither, or
/// when the epilogue is not one loop over the head result's own rows with results of its
/// shape (operands may broadcast into it, but a result wider, or one per row, is not this
/// kernel's).
fn headed(g: &Graph, node: Node, head: Op) -> Option<(Node, &[Value], Option<Epilogue>)> {
    let nd = &g.nodes[node];
    let (operands, nodes, yields): (&[Value], &[Node], &[Value]) = match role(nd.op) {
        Role::Fusion => {
            let r = &g.regions[nd.regions[0]];
            (&r.params, &r.nodes, &r.yields)
        }
        _ if nd.op == head => (&nd.operands, std::slice::from_ref(&node), &nd.results),
        _ => return None,
    };
    // The head comes first, but for views its epilogue reads (a gathered row and its index,
    // which may come before it in the region).
    let at = nodes.iter().position(|&m| !matches!(g.nodes[m].op, Op::Slice | Op::Gather | Op::Constant))?;
    let first = nodes[at];
    let rest: Vec<Node> = nodes[..at].iter().chain(&nodes[at + 1..]).copied().collect();
    let hd = &g.nodes[first];
    if hd.op != head || hd.results.len() != 1 {
        return None;
    }
    if rest.is_empty() {
        return (yields == [hd.results[0]]).then_some((first, operands, None));
    }
    // The epilogue reads the head's result and whichever operands its nodes use.
    let used: Vec<usize> = (0..operands.len())
        .filter(|&i| rest.iter().any(|&x| g.nodes[x].operands.contains(&operands[i])) || yields.contains(&operands[i]))
        .collect();
    let mut inputs = vec![hd.results[0]];
    inputs.extend(used.iter().map(|&i| operands[i]));
    let p = build(g, &inputs, &rest, yields, true)?;
    if Some(&p.out) != g.values[hd.results[0]].ty.as_tensor() || p.per_row.contains(&true) {
        return None;
    }
    Some((first, operands, Some((p, used))))
}

impl MatMulPlan {
    /// The product's sizes and how its factors are stored.
    pub fn product(&self) -> Product {
        Product { m: self.m, k: self.k, n: self.n, transpose_a: self.transpose_a, transpose_b: self.transpose_b }
    }

    /// The result's type: `[m, n]`, or a batched product's own.
    pub fn out(&self) -> TensorType {
        match &self.batch {
            Some(b) => b.out.clone(),
            None => TensorType::new(DType::F32, [self.m as u64, self.n as u64]),
        }
    }
}

/// A matrix product `[m, k] x [k, n]` and how its factors are stored: each row-major, the
/// lhs as `[k, m]` when `transpose_a` and the rhs as `[n, k]` when `transpose_b` (the
/// product reads a transposed factor through swapped strides, never a copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub transpose_a: bool,
    pub transpose_b: bool,
}

impl Product {
    /// The lhs as stored: `[m, k]`, or `[k, m]` when transposed.
    pub fn lhs_shape(&self) -> [usize; 2] {
        if self.transpose_a {
            [self.k, self.m]
        } else {
            [self.m, self.k]
        }
    }

    /// The rhs as stored: `[k, n]`, or `[n, k]` when transposed.
    pub fn rhs_shape(&self) -> [usize; 2] {
        if self.transpose_b {
            [self.n, self.k]
        } else {
            [self.k, self.n]
        }
    }

    /// The strides (row, column) at which the product reads its `[m, k]` lhs from the stored
    /// buffer.
    pub fn lhs_strides(&self) -> (usize, usize) {
        if self.transpose_a {
            (1, self.m)
        } else {
            (self.k, 1)
        }
    }

    /// The strides (row, column) at which the product reads its `[k, n]` rhs from the stored
    /// buffer.
    pub fn rhs_strides(&self) -> (usize, usize) {
        if self.transpose_b {
            (1, self.k)
        } else {
            (self.n, 1)
        }
    }
}

/// A lone sum or mean over leading axes of an f32 tensor (a bias gradient's sum over the
/// batch, a loss's mean): the operand viewed as `[rows, cols]`, the reduced dims then the kept
/// ones, and one result per column. The run half sums each column in order in f64 from -0, as
/// the reference kernel does, so the results are the reference's, bit for bit.
#[derive(Clone, Debug)]
pub struct ColumnPlan {
    /// `ReduceSum` or `ReduceMean`.
    pub op: Op,
    /// Independent column reductions, one after another in memory: the input is
    /// `[batch, rows, cols]`, the result `[batch, cols]` (1 for leading axes).
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
    pub input: TensorType,
    pub out: TensorType,
}

/// The plan for a lone `reduce_sum` or `reduce_mean` of an f32 tensor over a contiguous block
/// of its axes (the leading ones, every axis included, or a middle block: `[N, C, H, W]` over
/// axis 1 is `N` column reductions of `[C, H*W]`), or `None`. A block that runs to the last
/// axis is a loop plan's row reduction instead (`kernel_plan` asks for that first).
pub fn column_plan(g: &Graph, node: Node) -> Option<ColumnPlan> {
    let nd = &g.nodes[node];
    if !matches!(nd.op, Op::ReduceSum | Op::ReduceMean) {
        return None;
    }
    let input = g.values[nd.operands[0]].ty.as_tensor()?.clone();
    let out = g.values[nd.results[0]].ty.as_tensor()?.clone();
    let rank = input.rank() as i64;
    let mut axes: Vec<i64> = nd.attrs.ints("axes")?.iter().map(|&a| a.rem_euclid(rank.max(1))).collect();
    axes.sort_unstable();
    let first = *axes.first()?;
    let block = axes.iter().copied().eq(first..first + axes.len() as i64);
    let elements = input.num_elements()?;
    if input.dtype != DType::F32 || !block || elements == 0 || elements.checked_mul(4)? > isize::MAX as u64 {
        return None;
    }
    let (a, b) = (first as usize, first as usize + axes.len());
    let size = |dims: &[u64]| dims.iter().product::<u64>() as usize;
    let (batch, rows, cols) = (size(&input.shape[..a]), size(&input.shape[a..b]), size(&input.shape[b..]));
    Some(ColumnPlan { op: nd.op, batch, rows, cols, input, out })
}

/// A convolution of f32 tensors in 1, 2 or 3 spatial dims: input `[N, C, D, H, W]`, weight
/// `[M, C/group, KD, KH, KW]`, result `[N, M, OD, OH, OW]`; a 2-D one (`[N, C, H, W]`) as the
/// 3-D convolution of depth 1 and a 1-D one (`[N, C, L]`) of depth and height 1 (the same
/// memory: see [`ConvGeometry::dims`]). The run half computes it as matrix products on gemm,
/// per image and group: the weight's `[M/group, C/group*KD*KH*KW]` rows times the input's
/// patches laid out as columns (im2col; a 1x1 window of stride 1 without padding reads the
/// input as it is). A transposed one ([`ConvGeometry::transposed`], `conv_input_grad`) is
/// the weight's transpose times the gradient's columns, scattered back (col2im).
#[derive(Clone, Debug)]
pub struct ConvPlan {
    /// The kernel's operands that are the input and the weight (a transposed convolution's
    /// "input" is its `grad_output`, the forward convolution's result).
    pub x: usize,
    pub w: usize,
    /// The elementwise ops of an "output" fusion after it, over its result's rows.
    pub epilogue: Option<Epilogue>,
    pub geometry: ConvGeometry,
}

/// What a convolution computes, whatever reads its result: the tensors of the forward
/// convolution as the graph has them (rank 3, 4 or 5: what operands are checked against),
/// and the window in three spatial dims, those of the 5-D view kernels index by
/// ([`ConvGeometry::dims`]). A transposed convolution (`conv_input_grad`) reads `out`'s type
/// and the weight and yields `input`'s type.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvGeometry {
    pub input: TensorType,
    pub weight: TensorType,
    pub out: TensorType,
    /// Per spatial dim of the view (depth, height, width); a dim the graph's tensors do not
    /// have (a 2-D convolution's depth, a 1-D one's depth and height) is stride 1, no padding,
    /// dilation 1 (one tap over a size of 1).
    pub strides: [usize; 3],
    /// The padding before each spatial dim (the padding after only bounds the output size,
    /// which `out` already has).
    pub pads: [usize; 3],
    pub dilations: [usize; 3],
    pub group: usize,
    /// The adjoint in the input (`conv_input_grad`, ONNX's ConvTranspose): `grad_output`
    /// (of `out`'s type) by the weight into `input`'s type.
    pub transposed: bool,
}

/// The `[N, C, D, H, W]` view of a tensor of rank 3, 4 or 5 (`[N, C, 1, 1, L]`,
/// `[N, C, 1, H, W]`: the same elements in the same order), or `None` for another rank. Sizes
/// are those of a plan, which has checked that they fit in memory.
fn view_5d(t: &TensorType) -> Option<[usize; 5]> {
    let d = |i: usize| t.shape[i] as usize;
    match t.rank() {
        3 => Some([d(0), d(1), 1, 1, d(2)]),
        4 => Some([d(0), d(1), 1, d(2), d(3)]),
        5 => Some([d(0), d(1), d(2), d(3), d(4)]),
        _ => None,
    }
}

/// A window's per-dim attribute (kernel, strides, pads, dilations) in the three spatial dims
/// of the 5-D view: the dims a 1-D or 2-D window lacks (its leading ones) are `fill`.
fn spatial_3d(v: &[u64], fill: u64) -> Option<[u64; 3]> {
    match *v {
        [w] => Some([fill, fill, w]),
        [h, w] => Some([fill, h, w]),
        [d, h, w] => Some([d, h, w]),
        _ => None,
    }
}

/// The `[N, C, H, W]` view of a 5-D view of depth 1.
fn planar_view(v: [usize; 5]) -> Option<[usize; 4]> {
    (v[2] == 1).then_some([v[0], v[1], v[3], v[4]])
}

impl ConvGeometry {
    /// The input's, weight's and result's `[N, C, D, H, W]`, `[M, C/group, KD, KH, KW]` and
    /// `[N, M, OD, OH, OW]` views, which the kernels index by (a 2-D convolution's with depth
    /// 1, a 1-D one's with depth and height 1), or `None` where the three are not all of one
    /// rank of 3, 4 or 5, or where a dim the graph's tensors lack is not one tap of stride 1,
    /// unpadded, undilated.
    pub fn dims(&self) -> Option<[[usize; 5]; 3]> {
        let rank = self.input.rank();
        if self.weight.rank() != rank || self.out.rank() != rank || !(3..=5).contains(&rank) {
            return None;
        }
        let lacking = 5 - rank;
        if (0..lacking).any(|d| self.strides[d] != 1 || self.pads[d] != 0 || self.dilations[d] != 1) {
            return None;
        }
        Some([view_5d(&self.input)?, view_5d(&self.weight)?, view_5d(&self.out)?])
    }

    /// The 4-D views (`[N, C, H, W]`) of a forward convolution in at most two spatial dims,
    /// for kernels that index two (the GPU's), its window then `strides[1..]`, `pads[1..]`,
    /// `dilations[1..]`; `None` for a 3-D or transposed convolution.
    pub fn planar(&self) -> Option<[[usize; 4]; 3]> {
        if self.transposed || self.input.rank() > 4 {
            return None;
        }
        let [x, w, y] = self.dims()?;
        Some([planar_view(x)?, planar_view(w)?, planar_view(y)?])
    }
}

/// The plan for a `conv` of f32 `[N, C, D, H, W]` by `[M, C/group, KD, KH, KW]` (or of rank 4
/// or 3), or a `conv_input_grad` of such a convolution, whose sizes and geometry fit the run
/// half's indexing, or `None` (it stays with the reference kernel).
pub fn conv_plan(g: &Graph, node: Node) -> Option<ConvPlan> {
    let (head, operands, epilogue) = headed(g, node, Op::Conv).or_else(|| headed(g, node, Op::ConvInputGrad))?;
    let nd = &g.nodes[head];
    if nd.operands.len() != 2 {
        return None;
    }
    let transposed = nd.op == Op::ConvInputGrad;
    let x = operands.iter().position(|&v| v == nd.operands[0])?;
    let w = operands.iter().position(|&v| v == nd.operands[1])?;
    let tensor = |v: Value| g.values[v].ty.as_tensor().cloned();
    let (first, weight, result) = (tensor(nd.operands[0])?, tensor(nd.operands[1])?, tensor(nd.results[0])?);
    // The forward convolution's input and result.
    let (input, out) = if transposed { (result, first) } else { (first, result) };
    if transposed {
        let shape: Vec<u64> = nd.attrs.ints("shape")?.iter().map(|&d| u64::try_from(d).ok()).collect::<Option<_>>()?;
        if shape != input.shape {
            return None;
        }
    }
    let rank = input.rank();
    if !(3..=5).contains(&rank) || [&input, &weight, &out].iter().any(|t| t.dtype != DType::F32 || t.rank() != rank) {
        return None;
    }
    // Every size, and every buffer's bytes (the im2col buffer's too), within isize.
    let fits = |t: &TensorType| t.num_elements().and_then(|n| n.checked_mul(4)).is_some_and(|b| b <= isize::MAX as u64);
    let cols = weight.shape[1..].iter().chain(&out.shape[2..]).try_fold(1u64, |a, &d| a.checked_mul(d));
    if ![&input, &weight, &out].iter().all(|t| fits(t))
        || cols.and_then(|c| c.checked_mul(4)).is_none_or(|b| b > isize::MAX as u64)
    {
        return None;
    }
    if input.num_elements()? == 0 || weight.num_elements()? == 0 || out.num_elements()? == 0 {
        return None;
    }
    let window = graphc_ir::window::Window::from_attrs(&nd.attrs, weight.shape[2..].to_vec()).ok()?;
    let group = nd.attrs.int("group").unwrap_or(1);
    let group_u = u64::try_from(group).ok().filter(|&g| g >= 1)?;
    // The geometry agrees with itself, whatever checked the graph before: the kernels (the
    // GPU's generated code among them) index every buffer by it.
    let consistent = out.shape[0] == input.shape[0]
        && out.shape[1] == weight.shape[0]
        && weight.shape[0] % group_u == 0
        && weight.shape[1].checked_mul(group_u) == Some(input.shape[1])
        && window.output_dims(&input.shape[2..]).ok()?.as_slice() == &out.shape[2..];
    if !consistent {
        return None;
    }
    // The window in the view's three spatial dims (the dims the graph's tensors lack: one tap
    // of stride 1, unpadded, undilated, over a size of 1).
    let small = |v: &[u64], fill: u64| -> Option<[usize; 3]> {
        let [d, h, w] = spatial_3d(v, fill)?;
        Some([usize::try_from(d).ok()?, usize::try_from(h).ok()?, usize::try_from(w).ok()?])
    };
    let group = usize::try_from(group).ok()?;
    let geometry = ConvGeometry {
        strides: small(&window.strides, 1)?,
        pads: small(&window.pads_begin, 0)?,
        dilations: small(&window.dilations, 1)?,
        group,
        transposed,
        input,
        weight,
        out,
    };
    geometry.dims()?;
    Some(ConvPlan { x, w, epilogue, geometry })
}

/// A max or average pool in 1, 2 or 3 spatial dims of an f32 `[N, C, D, H, W]` input into
/// `[N, C, OD, OH, OW]` (a 2-D one, `[N, C, H, W]`, as the 3-D pool of depth 1; a 1-D one,
/// `[N, C, L]`, of depth and height 1: see [`PoolPlan::dims`]), each plane on its own: the run
/// half walks each window's taps inside the input (a range per dim, found from the geometry,
/// not by visiting the padding).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolPlan {
    /// `max_pool` (one result, no indices) or `avg_pool`.
    pub op: Op,
    /// The operand's and result's types as the graph has them (rank 5, 4 or 3).
    pub input: TensorType,
    pub out: TensorType,
    /// The window in the three spatial dims of the 5-D view (depth, height, width): a dim the
    /// graph's tensors lack is one tap of stride 1, unpadded, undilated, over a size of 1.
    pub window: graphc_ir::window::Window,
    /// `avg_pool`'s `count_include_pad`.
    pub count_include_pad: bool,
}

impl PoolPlan {
    /// The input's and result's `[N, C, D, H, W]` and `[N, C, OD, OH, OW]` views, which the
    /// kernels index by (a 2-D pool's with depth 1, a 1-D one's with depth and height 1), or
    /// `None` where the two are not of one rank of 3, 4 or 5, the window not of three dims, or
    /// a dim the graph's tensors lack not one tap of stride 1, unpadded, undilated.
    pub fn dims(&self) -> Option<[[usize; 5]; 2]> {
        let (rank, w) = (self.input.rank(), &self.window);
        if self.out.rank() != rank || !(3..=5).contains(&rank) {
            return None;
        }
        let all = [&w.kernel, &w.strides, &w.pads_begin, &w.pads_end, &w.dilations];
        if all.iter().any(|v| v.len() != 3) {
            return None;
        }
        let one = |d: usize| {
            w.kernel[d] == 1 && w.strides[d] == 1 && w.pads_begin[d] == 0 && w.pads_end[d] == 0 && w.dilations[d] == 1
        };
        if !(0..5 - rank).all(one) {
            return None;
        }
        Some([view_5d(&self.input)?, view_5d(&self.out)?])
    }

    /// The 4-D views (`[N, C, H, W]`) of a pool in at most two spatial dims, for kernels that
    /// index two (the GPU's), its window then the last two entries of each attribute; `None`
    /// for a 3-D pool.
    pub fn planar(&self) -> Option<[[usize; 4]; 2]> {
        if self.input.rank() > 4 {
            return None;
        }
        let [x, y] = self.dims()?;
        Some([planar_view(x)?, planar_view(y)?])
    }
}

/// The plan for a lone `max_pool` (without indices) or `avg_pool` of a non-empty f32 tensor of
/// rank 3, 4 or 5, or `None` (it stays with the reference kernel).
pub fn pool_plan(g: &Graph, node: Node) -> Option<PoolPlan> {
    let nd = &g.nodes[node];
    if !matches!(nd.op, Op::MaxPool | Op::AvgPool) || nd.operands.len() != 1 || nd.results.len() != 1 {
        return None;
    }
    let input = g.values[nd.operands[0]].ty.as_tensor()?.clone();
    let out = g.values[nd.results[0]].ty.as_tensor()?.clone();
    let fits = |t: &TensorType| t.num_elements().and_then(|n| n.checked_mul(4)).is_some_and(|b| b <= isize::MAX as u64);
    let rank = input.rank();
    if !(3..=5).contains(&rank)
        || [&input, &out]
            .iter()
            .any(|t| t.dtype != DType::F32 || t.rank() != rank || t.num_elements() == Some(0) || !fits(t))
    {
        return None;
    }
    let kernel: Vec<u64> = nd.attrs.ints("kernel")?.iter().map(|&k| u64::try_from(k).ok()).collect::<Option<_>>()?;
    let window = graphc_ir::window::Window::from_attrs(&nd.attrs, kernel).ok()?;
    if window.output_dims(&input.shape[2..]).ok()? != out.shape[2..] || input.shape[..2] != out.shape[..2] {
        return None;
    }
    // The window in the view's three spatial dims (those the tensors lack: one tap over one).
    let lift = |v: &[u64], fill: u64| spatial_3d(v, fill).map(|d| d.to_vec());
    let window = graphc_ir::window::Window {
        kernel: lift(&window.kernel, 1)?,
        strides: lift(&window.strides, 1)?,
        pads_begin: lift(&window.pads_begin, 0)?,
        pads_end: lift(&window.pads_end, 0)?,
        dilations: lift(&window.dilations, 1)?,
        ceil_mode: window.ceil_mode,
    };
    let count_include_pad = nd.op == Op::AvgPool && nd.attrs.bool("count_include_pad").unwrap_or(false);
    let plan = PoolPlan { op: nd.op, input, out, window, count_include_pad };
    plan.dims()?;
    Some(plan)
}

/// What a kernel computes.
#[derive(Clone, Debug)]
pub enum KernelPlan {
    Loop(LoopPlan),
    MatMul(MatMulPlan),
    Columns(ColumnPlan),
    Conv(ConvPlan),
    Pool(PoolPlan),
    Concat(crate::concat::ConcatPlan),
    Copy(crate::copy::CopyPlan),
    Gather(crate::copy::GatherPlan),
}

impl KernelPlan {
    /// The loop plan code is generated from: the loop's own, or a matmul's epilogue (`None`
    /// for a lone product, which the run half computes).
    pub fn code(&self) -> Option<&LoopPlan> {
        match self {
            KernelPlan::Loop(p) => Some(p),
            KernelPlan::MatMul(mp) => mp.epilogue.as_ref().map(|(p, _)| p),
            KernelPlan::Conv(cp) => cp.epilogue.as_ref().map(|(p, _)| p),
            KernelPlan::Columns(_)
            | KernelPlan::Pool(_)
            | KernelPlan::Concat(_)
            | KernelPlan::Copy(_)
            | KernelPlan::Gather(_) => None,
        }
    }
}

/// A node that runs as a kernel, with its plan.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The name of its graph.
    pub graph: String,
    pub node: Node,
    pub plan: KernelPlan,
}

/// Every node of the module that becomes a kernel: graph by graph, each in walk order (nested
/// regions included; the nodes inside a fusion run as part of it), with its [`kernel_plan`].
/// Backends compile them in this order.
pub fn kernels(m: &Module) -> Vec<Kernel> {
    let mut out = Vec::new();
    for g in &m.graphs {
        for n in g.walk() {
            let inside_fusion = g.regions[g.nodes[n].parent].parent.is_some_and(|p| g.nodes[p].op == Op::Fusion);
            if inside_fusion {
                continue;
            }
            if let Some(plan) = kernel_plan(g, n) {
                out.push(Kernel { graph: g.name.clone(), node: n, plan });
            }
        }
    }
    out
}

/// The plan of node `n` when it runs as a kernel: a matmul plan where the node has one, else
/// a loop plan, else a column, convolution, pooling, concat, copy or gather plan; `None` for a node the
/// interpreter runs.
pub fn kernel_plan(g: &Graph, n: Node) -> Option<KernelPlan> {
    if let Some(mp) = matmul_plan(g, n) {
        Some(KernelPlan::MatMul(mp))
    } else if let Some(p) = plan(g, n) {
        Some(KernelPlan::Loop(p))
    } else if let Some(cp) = column_plan(g, n) {
        Some(KernelPlan::Columns(cp))
    } else if let Some(cp) = conv_plan(g, n) {
        Some(KernelPlan::Conv(cp))
    } else if let Some(pp) = pool_plan(g, n) {
        Some(KernelPlan::Pool(pp))
    } else if let Some(cp) = crate::concat::concat_plan(g, n) {
        Some(KernelPlan::Concat(cp))
    } else if let Some(cp) = crate::copy::copy_plan(g, n) {
        Some(KernelPlan::Copy(cp))
    } else {
        crate::copy::gather_plan(g, n).map(KernelPlan::Gather)
    }
}

/// A loop plan computing `yields` from `inputs` through `nodes`, all elementwise; with
/// `by_rows`, over the output's own rows (as a matmul epilogue must be) rather than blocks.
fn build(g: &Graph, inputs: &[Value], nodes: &[Node], yields: &[Value], by_rows: bool) -> Option<LoopPlan> {
    let tensor = |v: Value| g.values[v].ty.as_tensor().cloned();
    // The shape iterated: what the reductions reduce, or else the results'.
    let reductions: Vec<Node> = nodes.iter().copied().filter(|&m| is_reduction(g.nodes[m].op)).collect();
    let reduced = reductions.first().map(|&m| g.nodes[m].operands[0]);
    let out = tensor(reduced.unwrap_or(*yields.first()?))?;
    // The axis where the reduced block begins, the same for every reduction: the rows are the
    // dims before it, the columns those from it on.
    let split = match reductions.split_first() {
        None => None,
        Some((&first, rest)) => {
            let s = trailing_axes(g, first)?;
            if rest.iter().any(|&m| trailing_axes(g, m) != Some(s)) {
                return None;
            }
            Some(s)
        }
    };
    // Every buffer the kernel touches holds at most `out`'s elements; their bytes must fit the
    // i64 offsets of generated code (no allocation could hold more anyway).
    let elements = out.num_elements()?;
    if out.dtype != DType::F32 || elements == 0 || elements.checked_mul(4)? > isize::MAX as u64 {
        return None;
    }
    // Every result is an f32 tensor of the output shape, or (with reductions) one value per
    // row of it: of the output's shape with the reduced axes 1, or (a reduction that drops
    // them) without them.
    let row_types = split.map(|s| {
        let kept: Vec<u64> = out.shape.iter().enumerate().map(|(i, &d)| if i < s { d } else { 1 }).collect();
        (TensorType::new(DType::F32, kept), TensorType::new(DType::F32, out.shape[..s].to_vec()))
    });
    // The results of reductions that drop their axes.
    let dropped: std::collections::HashSet<Value> = (nodes.iter())
        .filter(|&&m| is_reduction(g.nodes[m].op) && !keeps_dims(g, m))
        .filter_map(|&m| g.nodes[m].results.first().copied())
        .collect();
    let mut per_row = Vec::with_capacity(yields.len());
    let mut result_types = Vec::with_capacity(yields.len());
    for &r in yields {
        let t = tensor(r)?;
        let row = match &row_types {
            _ if t == out => false,
            Some((kept, _)) if t == *kept => true,
            // Only a reduction's own result has the dropped shape (nothing in the body reads it).
            Some((_, dropped_type)) if t == *dropped_type && dropped.contains(&r) => true,
            _ => return None,
        };
        per_row.push(row);
        result_types.push(t);
    }
    let mut steps = Vec::new();
    let mut input_types = Vec::new();
    let mut index = std::collections::HashMap::new();
    // Inputs read only by a view node (a slice, a gather of one constant index): the node's
    // result is the input, read through the view's strides.
    let mut views: Vec<Option<View>> = Vec::with_capacity(inputs.len());
    let mut view_nodes: Vec<Node> = Vec::new();
    for (i, &v) in inputs.iter().enumerate() {
        let ty = tensor(v)?;
        let boolean = ty.dtype == DType::Bool;
        input_types.push(ty);
        steps.push(Step::Input(i));
        // A bool input is read as f32 0 or 1 (the run half converts it) and made a mask here.
        if boolean {
            steps.push(Step::Const(0.0));
            steps.push(Step::Binary(Op::NotEqual, steps.len() - 2, steps.len() - 1));
        }
        let viewed = match g.uses(v) {
            [graphc_ir::Use::Operand(user, 0)] if nodes.contains(user) && !yields.contains(&v) => {
                view(g, *user).map(|w| (*user, w))
            }
            _ => None,
        };
        match viewed {
            Some((user, w)) => {
                index.insert(g.nodes[user].results[0], steps.len() - 1);
                view_nodes.push(user);
                views.push(Some(w));
            }
            None => {
                index.insert(v, steps.len() - 1);
                views.push(None);
            }
        }
    }
    // The types the inputs broadcast from: a view's own.
    let access_types: Vec<TensorType> = (input_types.iter().zip(&views))
        .map(|(t, w)| w.as_ref().map_or_else(|| t.clone(), |w| TensorType::new(DType::F32, w.shape.clone())))
        .collect();
    // A gather's index, copied into the kernel, is read by the view alone.
    let index_only = |m: Node| {
        g.nodes[m].op == Op::Constant
            && g.nodes[m].results.iter().all(|&r| {
                let uses = g.uses(r);
                !uses.is_empty()
                    && !yields.contains(&r)
                    && uses.iter().all(|u| u.user().is_some_and(|n| view_nodes.contains(&n)))
            })
    };
    for &m in nodes {
        if view_nodes.contains(&m) || index_only(m) {
            continue;
        }
        // A reduction that drops its axes has a result that numpy's broadcasting would align
        // with the wrong axes of `out` (`[N, C]` against `[N, C, H, W]`): the body reads none.
        if g.nodes[m].operands.iter().any(|v| dropped.contains(v)) {
            return None;
        }
        // Every step is computed once per element of `out`, which is right for any value
        // that broadcasts into it, and wrong for one wider (its other elements have no place).
        if !g.nodes[m].results.first().is_some_and(|v| dropped.contains(v)) {
            access(&tensor(*g.nodes[m].results.first()?)?, &out, out.rank().saturating_sub(1))?;
        }
        let step = lower_node(g, m, &index)?;
        steps.push(step);
        index.insert(g.nodes[m].results[0], steps.len() - 1);
    }
    let results = yields.iter().map(|v| index.get(v).copied()).collect::<Option<Vec<_>>>()?;
    // Reductions of values of the output's full shape, over its columns.
    let reduces: Vec<usize> = (0..steps.len()).filter(|&i| matches!(steps[i], Step::Reduce(..))).collect();
    for &m in nodes {
        if is_reduction(g.nodes[m].op) && g.values[g.nodes[m].operands[0]].ty.as_tensor() != Some(&out) {
            return None;
        }
    }
    let cached = cached_steps(&steps, &reduces, &results);
    // Inputs are f32 buffers (bool ones converted); each step takes masks exactly where it
    // needs bools; results are f32 (a bool result would need a store of its own).
    if input_types.iter().any(|t| !matches!(t.dtype, DType::F32 | DType::Bool)) {
        return None;
    }
    let masks = mask_steps(&steps)?;
    if results.iter().any(|&i| masks[i]) {
        return None;
    }
    let (inputs, rows, cols) = layout(&out, &access_types, !by_rows && reduces.is_empty(), split, &views)?;
    // A per-row result must be one the kernel computes once per row.
    let row_values = row_steps(&steps, &inputs, &masks);
    if results.iter().zip(&per_row).any(|(&i, &p)| p && !row_values[i]) {
        return None;
    }
    Some(LoopPlan {
        out,
        rows,
        cols,
        inputs,
        input_types,
        steps,
        results,
        per_row,
        result_types,
        row_values,
        reduces,
        cached,
    })
}

/// Which steps have one value per row (`LoopPlan::row_values`).
fn row_steps(steps: &[Step], inputs: &[InputMap], masks: &[bool]) -> Vec<bool> {
    let mut uniform: Vec<bool> = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let u = match *step {
            Step::Reduce(..) => true,
            Step::Input(k) => inputs[k].col_stride == 0,
            Step::Const(_) => false,
            _ => !masks[i] && step.operands().iter().all(|&a| uniform[a] || matches!(steps[a], Step::Const(_))),
        };
        uniform.push(u);
    }
    uniform
}

/// The reduction operands worth keeping for the passes after their own: those read again
/// (by another step or as a result) whose computation since the inputs and earlier row
/// values holds an exponential, logarithm, division or the like. A cheap one (`x - mean`) is
/// recomputed from the row, which is in cache anyway.
fn cached_steps(steps: &[Step], reduces: &[usize], results: &[usize]) -> Vec<usize> {
    let operands = Step::operands;
    let expensive = |root: usize| {
        let mut stack = vec![root];
        let mut seen = vec![false; steps.len()];
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            let costly = matches!(
                steps[i],
                Step::Unary(Op::Exp | Op::Log | Op::Tanh | Op::Sigmoid | Op::Erf | Op::Sqrt, _)
                    | Step::Binary(Op::Div | Op::Pow, ..)
            );
            if costly {
                return true;
            }
            stack.extend(operands(&steps[i]));
        }
        false
    };
    let mut cached = Vec::new();
    for &ri in reduces {
        let Step::Reduce(_, a) = steps[ri] else { continue };
        let read_again =
            results.contains(&a) || steps.iter().enumerate().any(|(i, s)| i != ri && operands(s).contains(&a));
        if read_again && !cached.contains(&a) && expensive(a) {
            cached.push(a);
        }
    }
    cached
}

/// Which steps yield bools; `None` when a step gets a bool where it needs f32 or the reverse.
fn mask_steps(steps: &[Step]) -> Option<Vec<bool>> {
    let mut mask = Vec::with_capacity(steps.len());
    for step in steps {
        let m = match *step {
            Step::Input(_) | Step::Const(_) => false,
            Step::Unary(Op::Broadcast | Op::Identity, a) => mask[a],
            Step::Unary(Op::Not, a) => mask[a].then_some(true)?,
            Step::Unary(_, a) => (!mask[a]).then_some(false)?,
            Step::Binary(Op::And | Op::Or, a, b) => (mask[a] && mask[b]).then_some(true)?,
            Step::Binary(op, a, b) if is_comparison(op) => (!mask[a] && !mask[b]).then_some(true)?,
            Step::Binary(_, a, b) => (!mask[a] && !mask[b]).then_some(false)?,
            Step::Select(c, a, b) => (mask[c] && !mask[a] && !mask[b]).then_some(false)?,
            Step::Reduce(_, a) => (!mask[a]).then_some(false)?,
        };
        mask.push(m);
    }
    Some(mask)
}

fn is_reduction(op: Op) -> bool {
    role(op) == Role::Reduction
}

fn is_comparison(op: Op) -> bool {
    role(op) == Role::Comparison
}

/// Where the axes reduction `m` reduces begin, when they are a nonempty block running to its
/// operand's last axis (`[2, 3]` of `[N, C, H, W]`: 2; `[-1]`: the last): a row reduction of
/// the operand viewed as `[rows, cols]`, each row's elements contiguous and in the order the
/// reference kernel folds them. `None` for other axes.
fn trailing_axes(g: &Graph, m: Node) -> Option<usize> {
    let nd = &g.nodes[m];
    let rank = g.values[nd.operands[0]].ty.as_tensor()?.rank();
    let mut axes = Vec::new();
    for &a in nd.attrs.ints("axes")? {
        let a = usize::try_from(if a < 0 { a + rank as i64 } else { a }).ok().filter(|&a| a < rank)?;
        axes.push(a);
    }
    axes.sort_unstable();
    let first = *axes.first()?;
    // Exactly `first..rank`: an axis twice is the reference's error, not a reduction here.
    axes.iter().copied().eq(first..rank).then_some(first)
}

/// Whether reduction `m` keeps its reduced axes as dims of size 1.
fn keeps_dims(g: &Graph, m: Node) -> bool {
    g.nodes[m].attrs.get("keep_dims") == Some(&graphc_ir::Attr::Bool(true))
}

fn lower_node(g: &Graph, m: Node, index: &std::collections::HashMap<Value, usize>) -> Option<Step> {
    let md = &g.nodes[m];
    if !supported(md.op) || md.results.len() != 1 || !md.regions.is_empty() {
        return None;
    }
    let ty = g.values[md.results[0]].ty.as_tensor()?;
    // Values inside are f32, or bool from comparisons.
    if !matches!(ty.dtype, DType::F32 | DType::Bool) {
        return None;
    }
    for &v in &md.operands {
        if !matches!(g.values[v].ty, Type::Tensor(ref t) if matches!(t.dtype, DType::F32 | DType::Bool)) {
            return None;
        }
    }
    let arg = |i: usize| md.operands.get(i).and_then(|v| index.get(v).copied());
    Some(match role(md.op) {
        Role::Constant => {
            let lit = match md.attrs.get("value")? {
                graphc_ir::Attr::Tensor(t) => t,
                _ => return None,
            };
            // Only a literal in the text: a weights file's tensor is read at run time.
            match lit.text_data()? {
                // One value for every element: a scalar, or a splat of any shape.
                graphc_ir::TensorData::F32(v) if v.len() == 1 => Step::Const(v[0]),
                _ => return None,
            }
        }
        Role::Reduction => {
            // Over a block of trailing axes only (the kernel's columns; `build` checks that
            // every reduction's block is the same).
            trailing_axes(g, m)?;
            Step::Reduce(md.op, arg(0)?)
        }
        Role::Elementwise if md.op == Op::Select => Step::Select(arg(0)?, arg(1)?, arg(2)?),
        Role::Elementwise | Role::Comparison => match md.operands.len() {
            1 => Step::Unary(md.op, arg(0)?),
            2 => Step::Binary(md.op, arg(0)?, arg(1)?),
            _ => return None,
        },
        Role::MatMul | Role::Fusion | Role::Interpreted => return None,
    })
}

/// How an input relates to the output shape.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Access {
    /// The input has the output's shape.
    Full,
    /// One element for every output element.
    Splat,
    /// One element per output row (`[R,1]` against `[R,C]`).
    PerRow,
    /// One row for every output row (`[C]` against `[R,C]`).
    PerColumn,
    /// A broadcast the two strides cannot express: the caller expands it to the full shape.
    Expand,
}

/// How an input of type `t` is read for output `out` (numpy broadcasting, right-aligned)
/// viewed as `[rows, cols]` with its first `split` dims as the rows.
fn access(t: &TensorType, out: &TensorType, split: usize) -> Option<Access> {
    let (rank, orank) = (t.rank(), out.rank());
    if rank > orank {
        return None;
    }
    let aligned: Vec<u64> = std::iter::repeat_n(1, orank - rank).chain(t.shape.iter().copied()).collect();
    for (&a, &o) in aligned.iter().zip(&out.shape) {
        if a != o && a != 1 {
            return None;
        }
    }
    if aligned == out.shape {
        return Some(Access::Full);
    }
    if aligned.iter().all(|&a| a == 1) {
        return Some(Access::Splat);
    }
    let (lead, trail) = aligned.split_at(split.min(orank));
    let (olead, otrail) = out.shape.split_at(split.min(orank));
    Some(if trail.iter().all(|&a| a == 1) && lead == olead {
        Access::PerRow
    } else if trail == otrail && lead.iter().all(|&a| a == 1) {
        Access::PerColumn
    } else {
        Access::Expand
    })
}

/// The input maps and the `[rows, cols]` view to iterate: when every input is read in full
/// or as one element and `blocks` allows, blocks of up to 4096 elements (so that a long
/// vector splits into rows that threads can share); else the output's dims before `reduced`
/// (where reductions' axes begin) by those from it on, or without reductions its leading dims
/// by its last, or by the last few, where that reads every input through strides (a
/// per-channel operand of `[N, C, H, W]` at batch 1: `[C, H*W]` rows, read once per row) where
/// the last axis alone would expand one.
///
/// A view input (`views[i]`, with `types[i]` the view's own type) is read through the strides
/// of the output's leading dims by its last (or by the reduced block): no blocks and no other
/// split, so that the fusion pass can tell whether a view fits ([`view_fits`]).
fn layout(
    out: &TensorType,
    types: &[TensorType],
    blocks: bool,
    reduced: Option<usize>,
    views: &[Option<View>],
) -> Option<(Vec<InputMap>, usize, usize)> {
    let any_view = views.iter().any(Option::is_some);
    let blocks = blocks && !any_view;
    let n = out.num_elements()? as usize;
    let rank = out.rank();
    // A view's access is decided by `view_map` below; as seen here it is read in full.
    let accesses_at = |split: usize| {
        (types.iter().zip(views))
            .map(|(t, v)| if v.is_some() { Some(Access::Full) } else { access(t, out, split) })
            .collect::<Option<Vec<Access>>>()
    };
    let last_split = reduced.unwrap_or(rank.saturating_sub(1));
    let mut accesses = accesses_at(last_split)?;
    let strided = |a: &Vec<Access>| !a.contains(&Access::Expand);
    let mut split = last_split;
    if reduced.is_none() && !any_view && !strided(&accesses) {
        if let Some((s, a)) = (1..last_split).rev().find_map(|s| accesses_at(s).filter(strided).map(|a| (s, a))) {
            (split, accesses) = (s, a);
        }
    }
    let flat = blocks && accesses.iter().all(|a| matches!(a, Access::Full | Access::Splat | Access::Expand));
    let cols = if flat {
        let mut block = 4096.min(n);
        while !n.is_multiple_of(block) {
            block /= 2;
        }
        if block >= 64 {
            block
        } else if rank >= 2 {
            out.shape[rank - 1].max(1) as usize
        } else {
            n
        }
    } else {
        out.shape[split..].iter().product::<u64>().max(1) as usize
    };
    let maps = accesses
        .iter()
        .map(|a| match a {
            Access::Full => InputMap { row_stride: cols as i64, col_stride: 1, materialize: false, view: None },
            Access::Expand => InputMap { row_stride: cols as i64, col_stride: 1, materialize: true, view: None },
            Access::Splat => InputMap { row_stride: 0, col_stride: 0, materialize: false, view: None },
            Access::PerRow => InputMap { row_stride: 1, col_stride: 0, materialize: false, view: None },
            Access::PerColumn => InputMap { row_stride: 0, col_stride: 1, materialize: false, view: None },
        })
        .zip(views)
        .map(|(m, v)| match v {
            None => Some(m),
            Some(v) => view_map(v, out, split),
        })
        .collect::<Option<Vec<_>>>()?;
    Some((maps, n / cols, cols))
}

/// A node a loop kernel reads as a view of its operand instead of a copy: its result is the
/// operand's elements at `offset + sum(index[k] * strides[k])` (row-major buffers).
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// The result's shape.
    pub shape: Vec<u64>,
    /// Per result dim, in elements of the operand's buffer.
    pub strides: Vec<i64>,
    pub offset: usize,
}

/// The view node `n` is, when it is one: an f32 `slice` (its steps are at least 1), or an f32
/// `gather` of one scalar index given as a constant (`x[t]` of the ONNX importer) that is in
/// range, each with a nonempty result whose type is what the attributes say. `None` for
/// anything else (a gather of a computed or out-of-range index stays with the interpreter,
/// which reports it).
pub fn view(g: &Graph, n: Node) -> Option<View> {
    let nd = &g.nodes[n];
    if nd.results.len() != 1 || !nd.regions.is_empty() {
        return None;
    }
    let src = g.values[*nd.operands.first()?].ty.as_tensor()?;
    let res = g.values[nd.results[0]].ty.as_tensor()?;
    if src.dtype != DType::F32 || res.dtype != DType::F32 || res.num_elements()? == 0 {
        return None;
    }
    let elements = src.num_elements()?;
    if elements.checked_mul(4)? > isize::MAX as u64 {
        return None;
    }
    // Row-major strides of the operand.
    let mut own = vec![1i64; src.rank()];
    for d in (0..src.rank().saturating_sub(1)).rev() {
        own[d] = own[d + 1].checked_mul(i64::try_from(src.shape[d + 1]).ok()?)?;
    }
    let (shape, strides, offset) = match nd.op {
        Op::Slice if nd.operands.len() == 1 => {
            let (starts, ends) = (nd.attrs.ints("starts")?, nd.attrs.ints("ends")?);
            let steps = nd.attrs.ints("steps");
            let rank = src.rank();
            if starts.len() != rank || ends.len() != rank || steps.is_some_and(|s| s.len() != rank) {
                return None;
            }
            let (mut shape, mut strides, mut offset) = (Vec::new(), Vec::new(), 0i64);
            for d in 0..rank {
                let dim = i64::try_from(src.shape[d]).ok()?;
                let step = steps.map_or(1, |s| s[d]);
                if step < 1 {
                    return None;
                }
                let resolve = |i: i64| (if i < 0 { i.saturating_add(dim) } else { i }).clamp(0, dim);
                let (start, end) = (resolve(starts[d]), resolve(ends[d]));
                let len = if end > start { (end - start + step - 1) / step } else { 0 };
                shape.push(len as u64);
                strides.push(step.checked_mul(own[d])?);
                offset += start * own[d];
            }
            (shape, strides, offset)
        }
        Op::Gather if nd.operands.len() == 2 => {
            let rank = src.rank() as i64;
            let axis = nd.attrs.int("axis").unwrap_or(0);
            let axis = usize::try_from(if axis < 0 { axis + rank } else { axis }).ok().filter(|&a| a < src.rank())?;
            let idx = nd.operands[1];
            let it = g.values[idx].ty.as_tensor()?;
            let p = g.producer(idx)?;
            if it.rank() != 0 || g.nodes[p].op != Op::Constant {
                return None;
            }
            let lit = match g.nodes[p].attrs.get("value")? {
                graphc_ir::Attr::Tensor(t) => t,
                _ => return None,
            };
            let i = match lit.text_data()? {
                graphc_ir::TensorData::I64(v) if v.len() == 1 => v[0],
                graphc_ir::TensorData::I32(v) if v.len() == 1 => i64::from(v[0]),
                _ => return None,
            };
            let dim = i64::try_from(src.shape[axis]).ok()?;
            let i = if i < 0 { i + dim } else { i };
            if !(0..dim).contains(&i) {
                return None;
            }
            let kept = || (0..src.rank()).filter(move |&d| d != axis);
            (kept().map(|d| src.shape[d]).collect(), kept().map(|d| own[d]).collect(), i * own[axis])
        }
        _ => return None,
    };
    if shape != res.shape {
        return None;
    }
    Some(View { shape, strides, offset: usize::try_from(offset).ok()? })
}

/// How a loop over `out`, with its first `split` dims as the rows, reads view `v` (which
/// broadcasts into `out`): through one row stride and a column stride of 0 or 1 from the
/// view's offset, or `None` where the view's elements, laid out as the loop's `[rows, cols]`,
/// are not such an affine function of the position (a slice of the last axis read by rows
/// that span two dims, a step along the columns).
pub fn view_map(v: &View, out: &TensorType, split: usize) -> Option<InputMap> {
    let (rank, orank) = (v.shape.len(), out.rank());
    if rank > orank || split > orank {
        return None;
    }
    let pad = orank - rank;
    // Per dim of `out`: the step in the buffer (0 where the view broadcasts or has one index).
    let mut stride = vec![0i64; orank];
    for k in 0..rank {
        let (a, o) = (v.shape[k], out.shape[pad + k]);
        if a == o {
            if o > 1 {
                stride[pad + k] = v.strides[k];
            }
        } else if a != 1 {
            return None;
        }
    }
    // The stride of dims `lo..hi` merged into one index, when they merge.
    let merged = |lo: usize, hi: usize| -> Option<i64> {
        let (mut base, mut expect) = (None, None);
        for k in (lo..hi).rev() {
            let o = i64::try_from(out.shape[k]).ok()?;
            if o == 1 {
                continue;
            }
            if expect.is_some_and(|e| e != stride[k]) {
                return None;
            }
            base.get_or_insert(stride[k]);
            expect = Some(stride[k].checked_mul(o)?);
        }
        Some(base.unwrap_or(0))
    };
    let (row_stride, col_stride) = (merged(0, split)?, merged(split, orank)?);
    if !matches!(col_stride, 0 | 1) {
        return None;
    }
    Some(InputMap { row_stride, col_stride, materialize: false, view: Some(v.offset) })
}

/// Whether a loop kernel over `out` (with its row reductions' axes beginning at `reduced`)
/// can read view node `n` as a view: the fusion pass asks, for the shape its group iterates,
/// before it makes `n` a member (the loop plans read views by exactly this split).
pub fn view_fits(g: &Graph, n: Node, out: &TensorType, reduced: Option<usize>) -> bool {
    let split = reduced.unwrap_or(out.rank().saturating_sub(1));
    view(g, n).is_some_and(|v| view_map(&v, out, split).is_some())
}
