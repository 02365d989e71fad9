//! Which kernels a GPU runs, and their `gpu.module`: loop kernels (`emit.rs`), tiled matrix
//! products and convolutions (`gpu_product.rs`), pools and column reductions
//! (`gpu_reduce.rs`), concats (`gpu_concat.rs`). Backends answer placement node by node with
//! [`gpu_runs`] (`Backend::accepts`), so a node the GPU has no kernel for is placed on a CPU
//! device rather than run on the host inside a GPU's partition.

use super::emit;
use super::gpu_concat;
use super::gpu_product::{self, Contraction};
use super::gpu_reduce::{self, Reduction};
use crate::lower::plan::{self, KernelPlan};
use graphc_ir::{Graph, Module, Node, Op};

/// The GPU kernels of `m`'s graph `graph`: each kernel (in [`plan::kernels`]' order) the GPU
/// can run, named `graphc_gpu_N`, as one `gpu.module` for `chip`; and those it cannot, headed
/// as in listings, with why.
pub fn gpu_listing(m: &Module, graph: &str, chip: &str) -> Result<(String, Vec<GpuKernel>, Vec<String>), String> {
    let g = m.graph(graph).ok_or_else(|| format!("no graph @{graph}"))?;
    let mut kernels = Vec::new();
    let mut texts = Vec::new();
    let mut kept = Vec::new();
    for (i, k) in plan::kernels(m).into_iter().enumerate() {
        if k.graph != graph {
            continue;
        }
        let name = format!("graphc_gpu_{i}");
        match gpu_kernel(g, k.node, &k.plan, &name) {
            Ok((text, plan)) => {
                texts.push(text);
                kernels.push(GpuKernel { name, node: k.node, plan });
            }
            Err(e) => kept.push(format!("{}: {e}", plan::kernel_header(m, i, &k))),
        }
    }
    Ok((emit::gpu_module(&texts, chip), kernels, kept))
}

/// Whether a GPU runs node `n` of `g` (a node outside fusions; a fusion as a whole): with a
/// GPU kernel, as one of the ops that need none ([`needs_no_kernel`]), or as scalar integer
/// arithmetic in host memory ([`host_scalar`]). The error says why not.
pub fn gpu_runs(g: &Graph, n: Node) -> Result<(), String> {
    let op = g.nodes[n].op;
    match plan::kernel_plan(g, n) {
        // What a check decides without writing the kernel: its writers fail on nothing else.
        Some(KernelPlan::Columns(p)) => gpu_reduce::check(&Reduction::Columns(p)),
        Some(KernelPlan::Pool(p)) => gpu_reduce::check(&Reduction::Pool(p)),
        Some(KernelPlan::Concat(_)) => Ok(()),
        // Loop bodies and products' epilogues are decided by writing them.
        Some(p) => gpu_kernel(g, n, &p, "graphc_gpu").map(|_| ()),
        None if needs_no_kernel(op) || host_scalar(g, n) => Ok(()),
        None if op == Op::Fusion => Err("its region is not one kernel the GPU has".into()),
        None if plan::supported(op) => Err(format!(
            "the GPU's kernels for '{}' take f32 tensors and reduce a block of trailing axes or the leading ones",
            op.name()
        )),
        None => Err(format!("the GPU backend has none for '{}'", op.name())),
    }
}

/// Ops a device runs without a kernel of its own: constants, views and copies, state, control
/// flow (whose regions' nodes must each be runnable there too) and transfers.
fn needs_no_kernel(op: Op) -> bool {
    matches!(
        op,
        Op::Constant
            | Op::Identity
            | Op::Reshape
            | Op::Shape
            | Op::Rank
            | Op::Variable
            | Op::Read
            | Op::Assign
            | Op::NoOp
            | Op::Cond
            | Op::While
            | Op::Send
            | Op::Recv
    )
}

/// Integer and boolean scalar arithmetic (a loop's counter and condition), which a GPU device
/// keeps in host memory, as TensorFlow's GPU kernels keep int32 scalars: no kernel launch.
fn host_scalar(g: &Graph, n: Node) -> bool {
    let nd = &g.nodes[n];
    let scalar = |v: &graphc_ir::Value| {
        g.values[*v].ty.as_tensor().is_some_and(|t| t.num_elements() == Some(1) && !t.dtype.is_float())
    };
    plan::supported(nd.op) && !nd.results.is_empty() && nd.results.iter().chain(&nd.operands).all(scalar)
}

/// The GPU kernel of node `n` of `g`, whose plan is `plan`, as a `gpu.func` named `name`.
fn gpu_kernel(g: &Graph, n: Node, plan: &KernelPlan, name: &str) -> Result<(String, GpuPlan), String> {
    // The GPU's kernels read every input from its start: a loop that reads an operand as a
    // view (a slice fused into it) is the CPU's.
    if plan.code().is_some_and(|p| p.inputs.iter().any(|m| m.view.is_some())) {
        return Err("its loop reads an operand as a view (a fused slice), which the GPU's kernels do not".into());
    }
    if plan.code().is_some_and(|p| p.input_types.iter().any(|t| t.dtype != graphc_ir::DType::F32)) {
        return Err("its loop reads a bool operand, which the GPU's kernels do not".into());
    }
    match plan {
        KernelPlan::Loop(p) => emit::gpu_kernel(p, name).map(|text| (text, GpuPlan::Loop(Box::new(p.clone())))),
        KernelPlan::MatMul(p) => product(g, n, Contraction::MatMul(p.clone()), name),
        KernelPlan::Conv(p) => product(g, n, Contraction::Conv(p.clone()), name),
        KernelPlan::Columns(p) => reduction(Reduction::Columns(p.clone()), name),
        KernelPlan::Pool(p) => reduction(Reduction::Pool(p.clone()), name),
        KernelPlan::Concat(p) => Ok((gpu_concat::gpu_concat_kernel(p, name), GpuPlan::Concat(Box::new(p.clone())))),
        KernelPlan::Copy(p) => Err(format!("the GPU backend has no kernel for '{}' yet", p.op.name())),
        KernelPlan::Gather(_) => Err("the GPU backend has no kernel for 'gather' yet".into()),
    }
}

/// The tiled kernel of contraction `c`, node `n` of `g`.
fn product(g: &Graph, n: Node, c: Contraction, name: &str) -> Result<(String, GpuPlan), String> {
    let operands = g.nodes[n]
        .operands
        .iter()
        .map(|&v| g.values[v].ty.as_tensor().cloned().ok_or_else(|| "an operand is not a tensor".to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let types = gpu_product::operand_types(&c, &operands)?;
    let text = gpu_product::gpu_product_kernel(&c, types.len(), name)?;
    Ok((text, GpuPlan::Product(Box::new(c), types)))
}

/// The kernel of pool or column reduction `r`.
fn reduction(r: Reduction, name: &str) -> Result<(String, GpuPlan), String> {
    let text = gpu_reduce::gpu_reduce_kernel(&r, name)?;
    Ok((text, GpuPlan::Reduce(Box::new(r))))
}

/// A kernel of a graph as a GPU runs it.
#[derive(Clone, Debug)]
pub struct GpuKernel {
    /// Its function in the `gpu.module` and the PTX.
    pub name: String,
    pub node: Node,
    pub plan: GpuPlan,
}

/// What a GPU kernel computes.
#[derive(Clone, Debug)]
pub enum GpuPlan {
    /// A loop kernel: a thread per element, or per row.
    Loop(Box<plan::LoopPlan>),
    /// A tiled matrix product or convolution (`gpu_product.rs`), with the type each operand
    /// of its node must have and whether it is expanded to the result's shape first.
    Product(Box<Contraction>, Vec<(graphc_ir::TensorType, bool)>),
    /// A pool or column reduction (`gpu_reduce.rs`): a thread per output element.
    Reduce(Box<Reduction>),
    /// A concat (`gpu_concat.rs`): a thread per output element.
    Concat(Box<plan::ConcatPlan>),
}
