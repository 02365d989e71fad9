//! The gradient rules, one module per family laid out like the reference kernels
//! (`runtime/src/kernels/`): given a node and its results' adjoints, the adjoints of its
//! operands, built as more graph. Every op is listed (a new op fails to compile until it is
//! placed), and has a rule exactly when its op table entry says `Gradient::Rule` (a test
//! checks). One without a rule is not differentiable, and the reverse sweep reports it when
//! the loss depends on it through a value differentiated with respect to.

mod array;
mod control;
mod elementwise;
mod matmul;
mod reduce;
mod window;

use super::emit::{Backprop, Emit, Result, Site};
use graphc_ir::{Node, Op, Value};

type Rule = fn(&mut Emit<'_>, &Site) -> Result<Vec<Option<Value>>>;

/// The rule for `op`, or `None` when it has none.
fn rule(op: Op) -> Option<Rule> {
    Some(match op {
        Op::Identity
        | Op::Cast
        | Op::Neg
        | Op::Abs
        | Op::Exp
        | Op::Log
        | Op::Sqrt
        | Op::Tanh
        | Op::Sigmoid
        | Op::Relu
        | Op::Erf
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
        | Op::Sign => elementwise::unary,
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Pow | Op::Mod | Op::Max | Op::Min => elementwise::binary,
        Op::Select => elementwise::select,
        Op::ReduceSum | Op::ReduceMean | Op::ReduceMax | Op::ReduceMin | Op::ReduceProd => reduce::reduce,
        Op::Softmax => reduce::softmax,
        Op::SoftmaxCrossEntropy => reduce::softmax_cross_entropy,
        Op::MeanSquaredError => reduce::mean_squared_error,
        Op::MatMul => matmul::matmul,
        Op::Reshape => array::reshape,
        Op::Broadcast => array::broadcast,
        Op::Transpose => array::transpose,
        Op::Slice => array::slice,
        Op::Pad => array::pad,
        Op::Concat => array::concat,
        Op::Split => array::split,
        Op::Gather => array::gather,
        Op::ScatterAdd => array::scatter_add,
        Op::Conv => window::conv,
        Op::ConvInputGrad => window::conv_input_grad,
        Op::ConvFilterGrad => window::conv_filter_grad,
        Op::MaxPool => window::max_pool,
        Op::AvgPool => window::avg_pool,
        Op::AvgPoolGrad => window::avg_pool_grad,
        Op::Cond => control::cond,
        Op::While => control::while_loop,
        // Integer and bool results carry no gradient; state, communication and the optimizers
        // are not functions of their operands; fusion regions are formed after autodiff runs,
        // and a `grad` before this one is already expanded.
        Op::Constant
        | Op::Shape
        | Op::Rank
        | Op::Not
        | Op::Xor
        | Op::ShiftLeft
        | Op::ShiftRight
        | Op::Bitcast
        | Op::And
        | Op::Or
        | Op::Equal
        | Op::NotEqual
        | Op::Less
        | Op::LessEqual
        | Op::Greater
        | Op::GreaterEqual
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
        | Op::Fusion
        | Op::Grad
        | Op::Send
        | Op::Recv => return None,
        // Its adjoint is a scatter of the values' adjoint along the axis at the indices, which
        // scatter_add (gather-shaped) does not express: no rule, so the sweep reports it.
        Op::TopK => return None,
    })
}

/// The adjoints of node `n`'s operands (`None` for those that get none) from its results'
/// (`dys`), or `None` when the op is not differentiable.
pub fn vjp(e: &mut Emit<'_>, n: Node, dys: &[Option<Value>], backprop: Backprop) -> Option<Result<Vec<Option<Value>>>> {
    let site = Site::new(e.g, n, dys, backprop);
    let rule = rule(site.op)?;
    Some(rule(e, &site))
}

#[cfg(test)]
mod tests {
    use graphc_ir::{Gradient, Op};

    /// The op table says which ops are differentiable; the rules here must say the same, so a
    /// new op is declared one way or the other and given a rule when it says it has one.
    #[test]
    fn every_op_has_a_rule_exactly_when_its_entry_says() {
        for &op in Op::ALL {
            let declared = op.def().gradient == Gradient::Rule;
            assert_eq!(
                super::rule(op).is_some(),
                declared,
                "'{}': the op table says {:?}, the autodiff rules disagree",
                op.name(),
                op.def().gradient
            );
        }
    }
}
