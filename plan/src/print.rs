//! Plans as text, for `graphc opt --emit plan` and the plan filetests: deterministic, one
//! fact a line. The loop plan of `softmax(x + b)` along the last axis, `x: f32[4,8]`,
//! `b: f32[8]`:
//!
//! ```text
//! loop f32[4,8]: 4 rows x 8 cols
//!   in0: f32[4,8], row stride 8, col stride 1
//!   in1: f32[8], row stride 0, col stride 1
//!   s0 = in0
//!   s1 = in1
//!   s2 = add s0, s1
//!   s3 = reduce_max s2  ; row value, pass 1
//!   s4 = sub s2, s3
//!   s5 = exp s4  ; cached in slot 0
//!   s6 = reduce_sum s5  ; row value, pass 2
//!   s7 = div s5, s6
//!   out0 = s7: f32[4,8]
//!   reductions: s3, s6
//!   cached: s5
//!   overwritable: in0
//! ```
//!
//! Steps are numbered `sN` in order (inputs first); a step computed once per row says `row
//! value`, a reduction its pass, a step kept in the scratch row its slot. Results are `outK`,
//! `per row` when one value per row. An input read as a view of its operand (a slice, a gather
//! of one index) says where the view begins: `in0: f32[1,512], view at 128, row stride 0, col
//! stride 1`. A matmul plan names the kernel operands it multiplies
//! (`opN`), each factor as stored with the strides the product reads it with (`transposed`
//! where the matmul's flag says so: `lhs: f32[K,M] transposed, row stride 1, col stride M`),
//! and its epilogue's inputs, then the epilogue's loop plan, indented.

use crate::analysis::{
    kernels, ColumnPlan, ConvPlan, Epilogue, InputMap, Kernel, KernelPlan, LoopPlan, MatMulPlan, PoolPlan, Step,
};
use crate::concat::ConcatPlan;
use crate::copy::{CopyPlan, GatherPlan};
use graphc_ir::{Graph, Module, Node};
use std::fmt::{self, Write};

impl fmt::Display for LoopPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_loop(f, self, "")
    }
}

impl fmt::Display for MatMulPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_matmul(f, self, "")
    }
}

/// How a plan of rank `rank` runs in the kernels' three spatial dims.
fn lifted(rank: usize) -> &'static str {
    match rank {
        3 => "1-D as 3-D of depth and height 1; ",
        4 => "2-D as 3-D of depth 1; ",
        _ => "",
    }
}

impl fmt::Display for ConvPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        if g.transposed {
            writeln!(
                f,
                "conv_input_grad op{} {} * op{} {} ({}group {}, strides {:?}, pads before {:?}, dilations {:?}): per image and group, weight^T x grad on gemm, col2im -> {}",
                self.x,
                g.out,
                self.w,
                g.weight,
                lifted(g.input.rank()),
                g.group,
                g.strides,
                g.pads,
                g.dilations,
                g.input
            )?;
        } else {
            writeln!(
                f,
                "conv op{} {} * op{} {} ({}group {}, strides {:?}, pads before {:?}, dilations {:?}): im2col per image and group, products on gemm -> {}",
                self.x,
                g.input,
                self.w,
                g.weight,
                lifted(g.input.rank()),
                g.group,
                g.strides,
                g.pads,
                g.dilations,
                g.out
            )?;
        }
        write_epilogue(f, &self.epilogue, "")
    }
}

impl fmt::Display for PoolPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.window;
        writeln!(
            f,
            "{} {} ({}kernel {:?}, strides {:?}, pads {:?} {:?}, dilations {:?}{}): per plane, taps inside the input -> {}",
            self.op.name(),
            self.input,
            lifted(self.input.rank()),
            w.kernel,
            w.strides,
            w.pads_begin,
            w.pads_end,
            w.dilations,
            if self.count_include_pad { ", padding counted" } else { "" },
            self.out
        )
    }
}

impl fmt::Display for ConcatPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inputs: Vec<String> = self.inputs.iter().map(ToString::to_string).collect();
        let rows: Vec<String> = self.rows.iter().map(ToString::to_string).collect();
        let room = if self.reserve > self.rows.iter().sum::<usize>() * self.outer {
            format!(", room for {} (a chain appends in place)", self.reserve)
        } else {
            String::new()
        };
        writeln!(
            f,
            "concat {}: {} blocks of rows {}{room} -> {}",
            inputs.join(", "),
            self.outer,
            rows.join(" + "),
            self.out
        )
    }
}

impl fmt::Display for CopyPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fill = if self.fill { ", the rest op1" } else { "" };
        writeln!(f, "copy ({}) {}{fill}:", self.op.name(), self.input)?;
        for (k, p) in self.parts.iter().enumerate() {
            writeln!(
                f,
                "  out{k}: box {:?}, input strides {:?} from {}, result strides {:?} from {} -> {}",
                p.dims, p.in_strides, p.in_offset, p.out_strides, p.out_offset, p.out
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for GatherPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "gather {} by {} on axis {}: {} blocks of {} rows of {}, picked -> {}",
            self.data, self.indices, self.axis, self.outer, self.n, self.inner, self.out
        )
    }
}

impl fmt::Display for ColumnPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "columns {} {}: {} x {} rows x {} cols, f64 sums down each column -> {}",
            self.op.name(),
            self.input,
            self.batch,
            self.rows,
            self.cols,
            self.out
        )
    }
}

impl fmt::Display for KernelPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelPlan::Loop(p) => write_loop(f, p, ""),
            KernelPlan::MatMul(p) => write_matmul(f, p, ""),
            KernelPlan::Columns(p) => write!(f, "{p}"),
            KernelPlan::Conv(p) => write!(f, "{p}"),
            KernelPlan::Pool(p) => write!(f, "{p}"),
            KernelPlan::Concat(p) => write!(f, "{p}"),
            KernelPlan::Copy(p) => write!(f, "{p}"),
            KernelPlan::Gather(p) => write!(f, "{p}"),
        }
    }
}

/// `s2, s5`, or `none`.
fn list(prefix: &str, items: impl IntoIterator<Item = usize>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| format!("{prefix}{i}")).collect();
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

fn write_input(f: &mut impl Write, i: usize, m: &InputMap, p: &LoopPlan, indent: &str) -> fmt::Result {
    let materialize = if m.materialize { ", materialized" } else { "" };
    let view = m.view.map(|o| format!(", view at {o}")).unwrap_or_default();
    writeln!(
        f,
        "{indent}  in{i}: {}{materialize}{view}, row stride {}, col stride {}",
        p.input_types[i], m.row_stride, m.col_stride
    )
}

fn write_step(f: &mut impl Write, i: usize, p: &LoopPlan, indent: &str) -> fmt::Result {
    write!(f, "{indent}  s{i} = ")?;
    match p.steps[i] {
        Step::Input(k) => write!(f, "in{k}")?,
        Step::Const(c) => write!(f, "const {c:?}")?,
        Step::Unary(op, a) => write!(f, "{} s{a}", op.name())?,
        Step::Binary(op, a, b) => write!(f, "{} s{a}, s{b}", op.name())?,
        Step::Select(c, a, b) => write!(f, "select s{c}, s{a}, s{b}")?,
        Step::Reduce(op, a) => write!(f, "{} s{a}", op.name())?,
    }
    let mut notes = Vec::new();
    if p.row_values[i] {
        notes.push("row value".to_string());
    }
    if let Some(pass) = p.reduces.iter().position(|&r| r == i) {
        notes.push(format!("pass {}", pass + 1));
    }
    if let Some(slot) = p.cached.iter().position(|&c| c == i) {
        notes.push(format!("cached in slot {slot}"));
    }
    if notes.is_empty() {
        writeln!(f)
    } else {
        writeln!(f, "  ; {}", notes.join(", "))
    }
}

fn write_loop(f: &mut impl Write, p: &LoopPlan, indent: &str) -> fmt::Result {
    writeln!(f, "{indent}loop {}: {} rows x {} cols", p.out, p.rows, p.cols)?;
    for (i, m) in p.inputs.iter().enumerate() {
        write_input(f, i, m, p, indent)?;
    }
    for i in 0..p.steps.len() {
        write_step(f, i, p, indent)?;
    }
    for (k, &s) in p.results.iter().enumerate() {
        let per_row = if p.per_row[k] { ", per row" } else { "" };
        writeln!(f, "{indent}  out{k} = s{s}: {}{per_row}", p.result_type(k))?;
    }
    writeln!(f, "{indent}  reductions: {}", list("s", p.reduces.iter().copied()))?;
    writeln!(f, "{indent}  cached: {}", list("s", p.cached.iter().copied()))?;
    writeln!(f, "{indent}  overwritable: {}", list("in", p.overwritable()))
}

fn write_matmul(f: &mut impl Write, p: &MatMulPlan, indent: &str) -> fmt::Result {
    writeln!(
        f,
        "{indent}matmul f32[{m},{k}] x f32[{k},{n}]: lhs op{}, rhs op{}",
        p.lhs,
        p.rhs,
        m = p.m,
        k = p.k,
        n = p.n
    )?;
    if let Some(b) = &p.batch {
        if b.dims.is_empty() {
            writeln!(f, "{indent}  batch: {} by {} -> {}, the lhs's rows folded into m", b.lhs, b.rhs, b.out)?;
        } else {
            writeln!(
                f,
                "{indent}  batch: {} by {} -> {}, {:?} products, lhs strides {:?}, rhs strides {:?}",
                b.lhs, b.rhs, b.out, b.dims, b.lhs_strides, b.rhs_strides
            )?;
        }
    }
    // Each factor as stored, and the strides the product reads it with as `[m,k]` and
    // `[k,n]`: a transposed one (the matmul's flag) through swapped strides.
    let product = p.product();
    let factors = [
        ("lhs", product.lhs_shape(), product.lhs_strides(), p.transpose_a),
        ("rhs", product.rhs_shape(), product.rhs_strides(), p.transpose_b),
    ];
    for (name, [r, c], (row, col), transposed) in factors {
        let transposed = if transposed { " transposed" } else { "" };
        writeln!(f, "{indent}  {name}: f32[{r},{c}]{transposed}, row stride {row}, col stride {col}")?;
    }
    write_epilogue(f, &p.epilogue, indent)
}

/// A kernel's epilogue: its inputs (the head's result first), then its loop.
fn write_epilogue(f: &mut impl Write, epilogue: &Option<Epilogue>, indent: &str) -> fmt::Result {
    match epilogue {
        None => writeln!(f, "{indent}  epilogue: none"),
        Some((lp, used)) => {
            let inputs: Vec<String> = std::iter::once("in0 = product".to_string())
                .chain(used.iter().enumerate().map(|(i, &o)| format!("in{} = op{o}", i + 1)))
                .collect();
            writeln!(f, "{indent}  epilogue: {}", inputs.join(", "))?;
            write_loop(f, lp, &format!("{indent}  "))
        }
    }
}

/// A kernel's node as a header line: `@g: %y = fusion {kind = "loop"}` (unnamed results by
/// their value number).
pub fn describe_node(g: &Graph, n: Node) -> String {
    let nd = &g.nodes[n];
    let results: Vec<String> = nd
        .results
        .iter()
        .map(|&v| match &g.values[v].name {
            Some(name) => format!("%{name}"),
            None => format!("%{v}"),
        })
        .collect();
    let mut s = format!("@{}: ", g.name);
    if !results.is_empty() {
        let _ = write!(s, "{} = ", results.join(", "));
    }
    s.push_str(nd.op.name());
    if !nd.attrs.is_empty() {
        let attrs: Vec<String> = nd.attrs.iter().map(|(k, a)| format!("{k} = {a}")).collect();
        let _ = write!(s, " {{{}}}", attrs.join(", "));
    }
    s
}

/// `kernel N: @g: %y = ...`, the line that heads kernel `index` (from 0) in every listing.
pub fn kernel_header(m: &Module, index: usize, k: &Kernel) -> String {
    match m.graph(&k.graph) {
        Some(g) => format!("kernel {}: {}", index + 1, describe_node(g, k.node)),
        None => format!("kernel {}: @{}", index + 1, k.graph),
    }
}

/// The plan of every kernel of the module ([`kernels`]), each headed by its node, a
/// blank line between.
pub fn print_kernels(m: &Module) -> String {
    let mut out = String::new();
    for (i, k) in kernels(m).iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", kernel_header(m, i, k));
        let _ = write!(out, "{}", k.plan);
    }
    out
}
