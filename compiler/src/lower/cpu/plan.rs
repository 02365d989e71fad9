//! What a loop kernel computes, decided before any code is generated: which nodes of a graph
//! lower to one elementwise loop nest, the shape it iterates over, and how each input is
//! indexed from it. Everything here is plain analysis of the IR; `codegen.rs` turns a plan
//! into Cranelift IR.

use graphc_ir::{DType, Graph, Node, Op, Region, TensorType, Type, Value};

/// How a kernel input is read at output row `r`, column `j` (in elements): at
/// `r * row_stride + j * col_stride`, after the caller materializes it in full when
/// `materialize` (a broadcast the two strides cannot express).
#[derive(Clone, Debug, PartialEq)]
pub struct InputMap {
    pub row_stride: i64,
    /// 1 (contiguous) or 0 (the same element for every column).
    pub col_stride: i64,
    pub materialize: bool,
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
}

/// An elementwise loop kernel over a `[rows, cols]` view of the output shape.
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
}

/// The f32 ops a loop kernel computes.
pub fn supported(op: Op) -> bool {
    matches!(
        op,
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
            | Op::Less
            | Op::LessEqual
            | Op::Greater
            | Op::GreaterEqual
            | Op::Equal
            | Op::NotEqual
            | Op::And
            | Op::Or
            | Op::Not
            | Op::Broadcast
            | Op::Identity
            | Op::Constant
    )
}

/// The plan for node `n` of `g`: a `fusion` whose kernel is elementwise, or a lone
/// elementwise op. `None` for anything else, which the interpreter keeps.
pub fn plan(g: &Graph, n: Node) -> Option<LoopPlan> {
    let nd = &g.nodes[n];
    let tensor = |v: Value| g.values[v].ty.as_tensor().cloned();
    let out = tensor(*nd.results.first()?)?;
    if out.dtype != DType::F32 || out.num_elements()? == 0 {
        return None;
    }
    // Every result is a full f32 tensor of the output shape.
    if nd.results.iter().any(|&r| tensor(r).as_ref() != Some(&out)) {
        return None;
    }
    let mut steps = Vec::new();
    let mut input_types = Vec::new();
    let mut index = std::collections::HashMap::new();
    let results = match nd.op {
        Op::Fusion => {
            let r: Region = nd.regions[0];
            for (i, &p) in g.regions[r].params.iter().enumerate() {
                input_types.push(tensor(p)?);
                steps.push(Step::Input(i));
                index.insert(p, steps.len() - 1);
            }
            for &m in &g.regions[r].nodes {
                let md = &g.nodes[m];
                let step = lower_node(g, m, &index)?;
                steps.push(step);
                index.insert(md.results[0], steps.len() - 1);
            }
            g.regions[r].yields.iter().map(|v| index.get(v).copied()).collect::<Option<Vec<_>>>()?
        }
        op if op != Op::Constant && supported(op) => {
            for (i, &v) in nd.operands.iter().enumerate() {
                input_types.push(tensor(v)?);
                steps.push(Step::Input(i));
                index.insert(v, steps.len() - 1);
            }
            steps.push(lower_node(g, n, &index)?);
            vec![steps.len() - 1]
        }
        _ => return None,
    };
    // Inputs are f32 buffers; each step takes masks exactly where it needs bools; results
    // are f32 (a bool result would need a store of its own).
    if input_types.iter().any(|t| t.dtype != DType::F32) {
        return None;
    }
    let masks = mask_steps(&steps)?;
    if results.iter().any(|&i| masks[i]) {
        return None;
    }
    let (inputs, rows, cols) = layout(&out, &input_types)?;
    Some(LoopPlan { out, rows, cols, inputs, input_types, steps, results })
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
        };
        mask.push(m);
    }
    Some(mask)
}

fn is_comparison(op: Op) -> bool {
    matches!(op, Op::Less | Op::LessEqual | Op::Greater | Op::GreaterEqual | Op::Equal | Op::NotEqual)
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
    Some(match md.op {
        Op::Constant => {
            let lit = match md.attrs.get("value")? {
                graphc_ir::Attr::Tensor(t) => t,
                _ => return None,
            };
            match lit.data() {
                graphc_ir::TensorData::F32(v) if lit.is_splat() && !v.is_empty() => Step::Const(v[0]),
                _ => return None,
            }
        }
        Op::Select => Step::Select(arg(0)?, arg(1)?, arg(2)?),
        op if md.operands.len() == 1 => Step::Unary(op, arg(0)?),
        op if md.operands.len() == 2 => Step::Binary(op, arg(0)?, arg(1)?),
        _ => return None,
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

/// How an input of type `t` is read for output `out` (numpy broadcasting, right-aligned).
fn access(t: &TensorType, out: &TensorType) -> Option<Access> {
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
    let (lead, last) = aligned.split_at(orank - 1);
    let (olead, olast) = out.shape.split_at(orank - 1);
    Some(if last == [1] && lead == olead {
        Access::PerRow
    } else if last == olast && lead.iter().all(|&a| a == 1) {
        Access::PerColumn
    } else {
        Access::Expand
    })
}

/// The input maps and the `[rows, cols]` view to iterate: the output's leading dims by its
/// last; or, when every input is read in full or as one element, blocks of up to 4096
/// elements (so that a long vector splits into rows that threads can share).
fn layout(out: &TensorType, types: &[TensorType]) -> Option<(Vec<InputMap>, usize, usize)> {
    let n = out.num_elements()? as usize;
    let accesses: Vec<Access> = types.iter().map(|t| access(t, out)).collect::<Option<_>>()?;
    let last = out.shape.last().copied().unwrap_or(1).max(1) as usize;
    let flat = accesses.iter().all(|a| matches!(a, Access::Full | Access::Splat | Access::Expand));
    let cols = if flat {
        let mut block = 4096.min(n);
        while n % block != 0 {
            block /= 2;
        }
        if block >= 64 {
            block
        } else if out.rank() >= 2 {
            last
        } else {
            n
        }
    } else {
        last
    };
    let maps = accesses
        .iter()
        .map(|a| match a {
            Access::Full => InputMap { row_stride: cols as i64, col_stride: 1, materialize: false },
            Access::Expand => InputMap { row_stride: cols as i64, col_stride: 1, materialize: true },
            Access::Splat => InputMap { row_stride: 0, col_stride: 0, materialize: false },
            Access::PerRow => InputMap { row_stride: 1, col_stride: 0, materialize: false },
            Access::PerColumn => InputMap { row_stride: 0, col_stride: 1, materialize: false },
        })
        .collect();
    Some((maps, n / cols, cols))
}
