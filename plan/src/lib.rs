//! What a loop kernel computes, decided before any code is generated: which nodes of a graph
//! lower to one elementwise loop nest, the shape it iterates over, and how each input is
//! indexed from it. Everything here is plain analysis of the IR; `cpu/codegen.rs` turns a plan
//! into Cranelift IR. `print.rs` writes plans as text (`graphc opt --emit plan`).

mod analysis;
mod concat;
mod copy;
mod print;

pub use analysis::*;
pub use concat::{concat_plan, ConcatPlan};
pub use copy::{copy_plan, gather_plan, CopyPart, CopyPlan, GatherPlan};
pub use print::{describe_node, kernel_header, print_kernels};
