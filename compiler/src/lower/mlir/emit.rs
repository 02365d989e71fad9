//! Loop plans to MLIR, as text: the same kernels `cpu/codegen.rs` gives Cranelift, with the
//! same C signature (`fn(inputs: *const *const f32, outputs: *const *mut f32, row_begin: i64,
//! row_end: i64, scratch: *mut f32)`), the same passes over each row and the same arithmetic
//! (Cephes-style `exp`, `tanh` and `sigmoid` inline, `erf` by [`crate::lower::erf`]'s
//! polynomials, `log` and `pow` by the run half's scalar functions, sums in f64 from -0,
//! NaN-propagating max and min with the first zero), but `lanes` wide: the host's widest
//! vectors (16 f32 lanes with AVX-512), which Cranelift's x86-64 backend does not emit.
//!
//! Control flow is `scf`, arithmetic `arith`, `math` and `vector` on `vector<LxF32>` (or on
//! scalars for a row's tail and its values), and memory the `llvm` dialect's unaligned loads
//! and stores through the bare pointers the run half passes, so no memref descriptors are
//! built. The text is what `graphc opt --emit mlir` prints; `jit.rs` parses and lowers it.

use crate::lower::plan::{LoopPlan, Step};
use graphc_ir::Op;
use std::collections::HashMap;
use std::fmt::Write;

/// The scalar functions kernels call lane by lane (`graphc_cpu_runtime::math::symbols`), as
/// MLIR declarations.
pub const MATH_DECLS: &str =
    "  func.func private @graphc_logf(f32) -> f32\n  func.func private @graphc_powf(f32, f32) -> f32\n";

/// How many f32 lanes the host's widest vectors hold: 16 with AVX-512, 8 with AVX, else 4.
pub fn host_lanes() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx") {
            return 8;
        }
    }
    4
}

/// One kernel as a `func.func` named `name`.
pub fn kernel(plan: &LoopPlan, name: &str, lanes: usize) -> Result<String, String> {
    if lanes < 2 || !lanes.is_power_of_two() {
        return Err(format!("{lanes} lanes: a kernel's vectors have a power of two lanes, at least 2"));
    }
    let mut e =
        Emitter { out: String::new(), next: 0, depth: 2, lanes, scratch: "%scratch".into(), gpu: false, ptx: false };
    e.cpu_function(name);
    e.kernel(plan)?;
    e.line("return");
    e.out.push_str("  }\n");
    Ok(e.out)
}

/// How a GPU kernel's threads cover its plan's `[rows, cols]` view: one thread per element
/// where no step needs the whole row (no reductions, no per-row results), else one per row.
pub fn gpu_threads_per_element(plan: &LoopPlan) -> bool {
    plan.reduces.is_empty() && !plan.per_row.iter().any(|&r| r)
}

/// The f32 elements of scratch each row of a GPU kernel needs (its cached steps' rows).
pub fn gpu_scratch_per_row(plan: &LoopPlan) -> usize {
    plan.cached.len() * plan.cols
}

/// GPU kernels ([`gpu_kernel`]'s functions) as one `gpu.module` for an NVIDIA GPU of compute
/// capability `chip` (`sm_90`).
pub fn gpu_module(kernels: &[String], chip: &str) -> String {
    let mut out = format!(
        "module attributes {{gpu.container_module}} {{\n  gpu.module @graphc_kernels [#nvvm.target<chip = \"{chip}\", features = \"+ptx80\">] {{\n"
    );
    for k in kernels {
        out.push_str(k);
    }
    out.push_str("  }\n}\n");
    out
}

/// One GPU kernel as a `gpu.func` named `name`: a pointer per input, per result and for the
/// scratch, then the row count (i64); thread `t` of the grid computes element `t` or row `t`
/// ([`gpu_threads_per_element`]) with the CPU kernels' scalar code. Plans the GPU cannot run
/// (the run half's scalar math functions: log, pow) are errors.
pub fn gpu_kernel(plan: &LoopPlan, name: &str) -> Result<String, String> {
    let mut e = Emitter::thread(3);
    let (ins, outs) = e.gpu_function(name, plan.inputs.len(), plan.results.len(), "");
    let t = e.grid_thread();
    if gpu_threads_per_element(plan) {
        let total = e.imul("%rows", plan.cols as i64);
        let inside = e.op(&format!("arith.cmpi slt, {t}, {total} : i64"));
        e.line(&format!("scf.if {inside} {{"));
        e.depth += 1;
        let cols = e.i64c(plan.cols as i64);
        let r = e.op(&format!("arith.divsi {t}, {cols} : i64"));
        let j = e.op(&format!("arith.remsi {t}, {cols} : i64"));
        e.row(plan, &r, &ins, &outs, Some(&j))?;
    } else {
        let inside = e.op(&format!("arith.cmpi slt, {t}, %rows : i64"));
        e.line(&format!("scf.if {inside} {{"));
        e.depth += 1;
        let off = e.imul(&t, gpu_scratch_per_row(plan) as i64);
        e.scratch = e.gep("%scratch", &off);
        e.row(plan, &t, &ins, &outs, None)?;
    }
    e.depth -= 1;
    e.line("}");
    e.line("gpu.return");
    e.out.push_str("    }\n");
    Ok(e.out)
}

/// The width of the values a body computes: a vector of `n` lanes, or scalars (`n` = 1).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Lanes(pub(super) usize);

impl Lanes {
    fn of(self, elem: &str) -> String {
        if self.0 == 1 {
            elem.to_string()
        } else {
            format!("vector<{}x{elem}>", self.0)
        }
    }
    fn f(self) -> String {
        self.of("f32")
    }
    fn i(self) -> String {
        self.of("i32")
    }
    fn m(self) -> String {
        self.of("i1")
    }
}

/// A body value: f32 data, or a comparison's mask.
#[derive(Clone, Debug)]
enum V {
    F(String),
    M(String),
}

impl V {
    fn f(&self) -> Result<&str, String> {
        match self {
            V::F(v) => Ok(v),
            V::M(_) => Err("a mask where the kernel needs f32 data".into()),
        }
    }
    fn m(&self) -> Result<&str, String> {
        match self {
            V::M(v) => Ok(v),
            V::F(_) => Err("f32 data where the kernel needs a mask".into()),
        }
    }
}

/// What a pass over a row can read besides the inputs (`codegen.rs`'s `Row`): the steps with
/// one value per row, computed before the pass, and the steps earlier passes left in scratch.
struct Row {
    in_base: Vec<String>,
    uniform: HashMap<usize, String>,
    /// For uniform divisors: (r1, r2) with x / d = (x r1) r2, r2 a power of two.
    recip: HashMap<usize, (String, Option<String>)>,
    stored: Vec<usize>,
}

/// e^x and e^x - 1 of one operand, shared by its sigmoid and tanh.
#[derive(Clone)]
struct Decay {
    e: String,
    em1: String,
}

/// SSA text being written: values are numbered `%vN`, one op per line.
pub(super) struct Emitter {
    pub(super) out: String,
    pub(super) next: usize,
    pub(super) depth: usize,
    /// The vector width of the column loops (1: scalar code, a GPU thread's).
    lanes: usize,
    /// Where the current row's scratch starts (`%scratch` on the CPU, where a call's rows
    /// share one scratch row; a row's own on a GPU).
    scratch: String,
    /// Code for a GPU thread, which has no run-half functions to call.
    gpu: bool,
    /// The code may hold inline PTX (for an NVIDIA GPU, not a CPU twin of its code).
    ptx: bool,
}

/// What writes element `t` of a per-element kernel: `(emitter, t, inputs, result)`.
pub(super) type ElementBody<'a> = dyn FnMut(&mut Emitter, &str, &[String], &str) + 'a;

impl Emitter {
    /// An emitter of a GPU thread's scalar code, `depth` levels in.
    pub(super) fn thread(depth: usize) -> Emitter {
        Emitter { ptx: true, ..Emitter::cpu_thread(depth) }
    }

    /// [`Emitter::thread`] for the CPU: the same code with no inline PTX (a square root is
    /// `math.sqrt`, correctly rounded as PTX's `sqrt.rn.f32` is).
    pub(super) fn cpu_thread(depth: usize) -> Emitter {
        Emitter { out: String::new(), next: 0, depth, lanes: 1, scratch: "%scratch".into(), gpu: true, ptx: false }
    }

    /// The `n` pointers of the array `base` points to.
    pub(super) fn pointers(&mut self, base: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let c = self.i64c(i as i64);
                let at = self.op(&format!("llvm.getelementptr {base}[{c}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr"));
                self.op(&format!("llvm.load {at} : !llvm.ptr -> !llvm.ptr"))
            })
            .collect()
    }

    /// Opens a `func.func` named `name` with the CPU kernels' signature.
    pub(super) fn cpu_function(&mut self, name: &str) {
        let _ = writeln!(
            self.out,
            "  func.func @{name}(%ins: !llvm.ptr, %outs: !llvm.ptr, %row_begin: i64, %row_end: i64, %scratch: !llvm.ptr) {{"
        );
    }

    /// Opens a `gpu.func` kernel named `name` with every GPU kernel's parameters: a pointer per
    /// input and per result, the scratch's, then the row count (`%rows`, i64); `attributes`
    /// are the kernel's own (empty: none). Returns the inputs' and results' names.
    pub(super) fn gpu_function(
        &mut self,
        name: &str,
        inputs: usize,
        results: usize,
        attributes: &str,
    ) -> (Vec<String>, Vec<String>) {
        let ins: Vec<String> = (0..inputs).map(|i| format!("%in{i}")).collect();
        let outs: Vec<String> = (0..results).map(|k| format!("%out{k}")).collect();
        let params: Vec<String> = ins
            .iter()
            .chain(&outs)
            .map(|p| format!("{p}: !llvm.ptr"))
            .chain(["%scratch: !llvm.ptr".into(), "%rows: i64".into()])
            .collect();
        let attributes = if attributes.is_empty() { String::new() } else { format!(" attributes {{{attributes}}}") };
        let _ = writeln!(self.out, "    gpu.func @{name}({}) kernel{attributes} {{", params.join(", "));
        (ins, outs)
    }

    /// The thread's index in the whole grid (i64).
    pub(super) fn grid_thread(&mut self) -> String {
        let block = self.op("gpu.block_id x");
        let dim = self.op("gpu.block_dim x");
        let thread = self.op("gpu.thread_id x");
        let first = self.op(&format!("arith.muli {block}, {dim} : index"));
        let at = self.op(&format!("arith.addi {first}, {thread} : index"));
        self.op(&format!("arith.index_cast {at} : index to i64"))
    }

    /// A `gpu.func` named `name` of a thread per element of a `[rows, cols]` view (`cols`
    /// fixed, the rows the launch's): a pointer per input (`inputs`), the result's, the
    /// scratch's (unused) and the row count; thread `t` of the grid, when inside the view,
    /// runs `body(e, t, inputs, result)`, which writes element `t`.
    pub(super) fn per_element_gpu(name: &str, inputs: usize, cols: usize, body: &mut ElementBody<'_>) -> String {
        let mut e = Emitter::thread(3);
        let (ins, outs) = e.gpu_function(name, inputs, 1, "");
        let t = e.grid_thread();
        let total = e.imul("%rows", cols as i64);
        let inside = e.op(&format!("arith.cmpi slt, {t}, {total} : i64"));
        e.line(&format!("scf.if {inside} {{"));
        e.depth += 1;
        body(&mut e, &t, &ins, &outs[0]);
        e.depth -= 1;
        e.line("}");
        e.line("gpu.return");
        e.out.push_str("    }\n");
        e.out
    }

    /// [`Emitter::per_element_gpu`]'s kernel as a CPU function named `name` with the CPU
    /// kernels' signature over the view's rows: each row's threads one after another, each
    /// running the same body (a GPU kernel's twin, which tests run without a GPU).
    pub(super) fn per_element_twin(name: &str, inputs: usize, cols: usize, body: &mut ElementBody<'_>) -> String {
        let mut e = Emitter::cpu_thread(2);
        e.cpu_function(name);
        let ins = e.pointers("%ins", inputs);
        let y = e.pointers("%outs", 1).remove(0);
        let (lo, hi) = (e.imul("%row_begin", cols as i64), e.imul("%row_end", cols as i64));
        let one = e.i64c(1);
        let t = format!("%t{}", e.next);
        e.next += 1;
        e.line(&format!("scf.for {t} = {lo} to {hi} step {one} : i64 {{"));
        e.depth += 1;
        body(&mut e, &t, &ins, &y);
        e.depth -= 1;
        e.line("}");
        e.line("return");
        e.out.push_str("  }\n");
        e.out
    }

    pub(super) fn line(&mut self, s: &str) {
        let _ = writeln!(self.out, "{:width$}{s}", "", width = self.depth * 2);
    }

    /// Writes `%vN = rhs` and returns `%vN`.
    pub(super) fn op(&mut self, rhs: &str) -> String {
        let v = format!("%v{}", self.next);
        self.next += 1;
        self.line(&format!("{v} = {rhs}"));
        v
    }

    /// An i64 constant where it is used (LLVM merges the copies).
    pub(super) fn i64c(&mut self, c: i64) -> String {
        self.op(&format!("arith.constant {c} : i64"))
    }

    /// An f32 constant on every lane, exact (by its bits).
    fn konst(&mut self, c: f32, l: Lanes) -> String {
        let s = self.op(&format!("arith.constant 0x{:08X} : f32", c.to_bits()));
        self.splat(&s, l)
    }

    fn splat(&mut self, s: &str, l: Lanes) -> String {
        if l.0 == 1 {
            s.to_string()
        } else {
            self.op(&format!("vector.broadcast {s} : f32 to {}", l.f()))
        }
    }

    fn bin(&mut self, op: &str, a: &str, b: &str, l: Lanes) -> String {
        self.op(&format!("{op} {a}, {b} : {}", l.f()))
    }

    fn cmp(&mut self, pred: &str, a: &str, b: &str, l: Lanes) -> String {
        self.op(&format!("arith.cmpf {pred}, {a}, {b} : {}", l.f()))
    }

    fn select(&mut self, m: &str, a: &str, b: &str, l: Lanes) -> String {
        self.op(&format!("arith.select {m}, {a}, {b} : {}, {}", l.m(), l.f()))
    }

    /// `a * x + c`, fused (one rounding), as `codegen.rs`'s `fused` on a host with FMA.
    pub(super) fn fma(&mut self, a: &str, x: &str, c: &str, l: Lanes) -> String {
        self.op(&format!("math.fma {a}, {x}, {c} : {}", l.f()))
    }

    fn unary(&mut self, op: &str, a: &str, l: Lanes) -> String {
        self.op(&format!("{op} {a} : {}", l.f()))
    }

    fn as_int(&mut self, x: &str, l: Lanes) -> String {
        self.op(&format!("arith.bitcast {x} : {} to {}", l.f(), l.i()))
    }

    fn as_float(&mut self, x: &str, l: Lanes) -> String {
        self.op(&format!("arith.bitcast {x} : {} to {}", l.i(), l.f()))
    }

    fn i32c(&mut self, c: i32, l: Lanes) -> String {
        let s = self.op(&format!("arith.constant {c} : i32"));
        if l.0 == 1 {
            s
        } else {
            self.op(&format!("vector.broadcast {s} : i32 to {}", l.i()))
        }
    }

    /// `p + off` f32 elements.
    pub(super) fn gep(&mut self, p: &str, off: &str) -> String {
        self.op(&format!("llvm.getelementptr {p}[{off}] : (!llvm.ptr, i64) -> !llvm.ptr, f32"))
    }

    pub(super) fn load(&mut self, at: &str, l: Lanes) -> String {
        self.op(&format!("llvm.load {at} {{alignment = 4 : i64}} : !llvm.ptr -> {}", l.f()))
    }

    pub(super) fn store(&mut self, v: &str, at: &str, l: Lanes) {
        self.line(&format!("llvm.store {v}, {at} {{alignment = 4 : i64}} : {}, !llvm.ptr", l.f()));
    }

    pub(super) fn imul(&mut self, a: &str, c: i64) -> String {
        let c = self.i64c(c);
        self.op(&format!("arith.muli {a}, {c} : i64"))
    }

    pub(super) fn iadd(&mut self, a: &str, b: &str) -> String {
        self.op(&format!("arith.addi {a}, {b} : i64"))
    }

    fn kernel(&mut self, plan: &LoopPlan) -> Result<(), String> {
        let in_ptrs = self.pointers("%ins", plan.inputs.len());
        let out_ptrs = self.pointers("%outs", plan.results.len());
        let one = self.i64c(1);
        self.line(&format!("scf.for %r = %row_begin to %row_end step {one} : i64 {{"));
        self.depth += 1;
        self.row(plan, "%r", &in_ptrs, &out_ptrs, None)?;
        self.depth -= 1;
        self.line("}");
        Ok(())
    }

    /// Row `r` of the plan: its per-row values, a pass per reduction, the per-row results,
    /// and the full results over every column, or only at column `only` (a GPU thread's
    /// element of a plan without reductions).
    pub(super) fn row(
        &mut self,
        plan: &LoopPlan,
        r: &str,
        in_ptrs: &[String],
        out_ptrs: &[String],
        only: Option<&str>,
    ) -> Result<(), String> {
        let cols = plan.cols as i64;
        let in_base: Vec<String> = plan
            .inputs
            .iter()
            .zip(in_ptrs)
            .map(|(m, p)| {
                if m.row_stride == 0 {
                    p.clone()
                } else {
                    let off = self.imul(r, m.row_stride);
                    self.gep(p, &off)
                }
            })
            .collect();
        let out_base: Vec<String> = out_ptrs
            .iter()
            .zip(&plan.per_row)
            .map(|(p, &per_row)| {
                let off = if per_row { r.to_string() } else { self.imul(r, cols) };
                self.gep(p, &off)
            })
            .collect();
        let mut row = Row { in_base, uniform: HashMap::new(), recip: HashMap::new(), stored: Vec::new() };
        self.hoist_uniform(plan, &mut row)?;
        // One pass per reduction, each seeing the ones before; the row stays in cache.
        for &ri in &plan.reduces {
            let v = self.reduce_row(plan, ri, &row)?;
            row.uniform.insert(ri, v);
            if let Step::Reduce(_, arg) = plan.steps[ri] {
                if plan.cached.contains(&arg) {
                    row.stored.push(arg);
                }
            }
            self.hoist_uniform(plan, &mut row)?;
        }
        // Results with one value per row, then a last pass for the full ones.
        for (k, &i) in plan.results.iter().enumerate() {
            if plan.per_row[k] {
                let v = row.uniform.get(&i).ok_or("a per-row result that is not a row value")?.clone();
                self.store(&v, &out_base[k], Lanes(1));
            }
        }
        let full: Vec<(usize, usize)> =
            plan.results.iter().enumerate().filter(|&(k, _)| !plan.per_row[k]).map(|(k, &i)| (k, i)).collect();
        if full.is_empty() {
            return Ok(());
        }
        let wanted: Vec<usize> = full.iter().map(|&(_, i)| i).collect();
        let mut each = |e: &mut Emitter, j: &str, l: Lanes| {
            let vals = e.body(plan, &row, j, l, &wanted)?;
            for &(k, i) in &full {
                let at = e.gep(&out_base[k], j);
                let v = vals[i].as_ref().ok_or("a result not computed")?.f()?.to_string();
                e.store(&v, &at, l);
            }
            Ok(())
        };
        match only {
            Some(j) => each(self, j, Lanes(1)),
            None => self.col_loops(cols, &mut each),
        }
    }

    /// `each(e, j, lanes)` for j = 0, L, 2L, ... while j + L <= cols, then for each remaining
    /// column with one lane.
    fn col_loops(
        &mut self,
        cols: i64,
        each: &mut dyn FnMut(&mut Emitter, &str, Lanes) -> Result<(), String>,
    ) -> Result<(), String> {
        let lanes = self.lanes;
        let vec_end = if lanes == 1 { 0 } else { cols / lanes as i64 * lanes as i64 };
        for (from, to, l) in [(0, vec_end, Lanes(lanes)), (vec_end, cols, Lanes(1))] {
            if from >= to {
                continue;
            }
            let (f, t, s) = (self.i64c(from), self.i64c(to), self.i64c(l.0 as i64));
            let j = format!("%j{}", self.next);
            self.next += 1;
            self.line(&format!("scf.for {j} = {f} to {t} step {s} : i64 {{"));
            self.depth += 1;
            each(self, &j, l)?;
            self.depth -= 1;
            self.line("}");
        }
        Ok(())
    }
}

impl Emitter {
    /// Computes, once per row, every f32 step with one value per row that the row values
    /// known so far determine, and the reciprocals of uniform divisors (`codegen.rs`'s
    /// `hoist_uniform`, to the bit).
    fn hoist_uniform(&mut self, plan: &LoopPlan, row: &mut Row) -> Result<(), String> {
        let zero = self.i64c(0);
        for i in 0..plan.steps.len() {
            if plan.hoistable(i, |a| row.uniform.contains_key(&a)) {
                let vals = self.body(plan, row, &zero, Lanes(1), &[i])?;
                let v = vals[i].as_ref().ok_or("the wanted step is computed")?;
                // A mask with one value per row stays per element (it is cheap).
                if let V::F(v) = v {
                    row.uniform.insert(i, v.clone());
                }
            }
        }
        let s = Lanes(1);
        for step in &plan.steps {
            let Step::Binary(Op::Div, a, d) = *step else { continue };
            // As codegen.rs: only a divisor the kernel computes, not one it reads or is given.
            if row.recip.contains_key(&d) || row.uniform.contains_key(&a) || !plan.computes(d) {
                continue;
            }
            let Some(den) = row.uniform.get(&d).cloned() else { continue };
            let one = self.konst(1.0, s);
            if plan.at_least_one(d) {
                let r1 = self.bin("arith.divf", &one, &den, s);
                row.recip.insert(d, (r1, None));
                continue;
            }
            // A nonzero divisor below 2^-126, whose reciprocal would overflow, is scaled by
            // 2^64 first and the product by 2^64 after.
            let scale = self.konst(18_446_744_073_709_551_616.0, s);
            let zero = self.konst(0.0, s);
            let tiny = self.konst(f32::MIN_POSITIVE, s);
            let mag = self.abs(&den, s);
            let small = self.cmp("olt", &mag, &tiny, s);
            let nonzero = self.cmp("une", &den, &zero, s);
            let subnormal = self.op(&format!("arith.andi {small}, {nonzero} : i1"));
            let scaled = self.bin("arith.mulf", &den, &scale, s);
            let den = self.select(&subnormal, &scaled, &den, s);
            let r1 = self.bin("arith.divf", &one, &den, s);
            let r2 = self.select(&subnormal, &scale, &one, s);
            row.recip.insert(d, (r1, Some(r2)));
        }
        Ok(())
    }

    /// Where cached step `step` sits in the scratch at column `j`.
    fn slot(&mut self, plan: &LoopPlan, step: usize, j: &str) -> Option<String> {
        let slot = plan.cached.iter().position(|&c| c == step)?;
        let base = self.i64c((slot * plan.cols) as i64);
        let off = self.iadd(&base, j);
        let scratch = self.scratch.clone();
        Some(self.gep(&scratch, &off))
    }

    /// A pass over the row folding reduction `ri`'s operand into one f32 (storing the operand
    /// in the scratch when later passes read it): sums and means in f64 from -0, max and min
    /// with NaN lanes kept apart and the first zero (`codegen.rs`'s `reduce_row`).
    fn reduce_row(&mut self, plan: &LoopPlan, ri: usize, row: &Row) -> Result<String, String> {
        let Step::Reduce(op, arg) = plan.steps[ri] else { return Err("a reduction that is not one".into()) };
        let sum = matches!(op, Op::ReduceSum | Op::ReduceMean);
        let max = op == Op::ReduceMax;
        let cols = plan.cols as i64;
        let (v, s) = (Lanes(self.lanes), Lanes(1));
        let vec_end = if v.0 == 1 { 0 } else { cols / v.0 as i64 * v.0 as i64 };
        // Vector accumulators: f64 sums, or f32 extremes with a mask of NaN lanes.
        let (vacc_ty, sacc_ty) = if sum { (v.of("f64"), "f64".to_string()) } else { (v.f(), "f32".to_string()) };
        let init = if sum {
            self.op("arith.constant -0.0 : f64")
        } else {
            self.konst(if max { f32::NEG_INFINITY } else { f32::INFINITY }, s)
        };
        let mut vector = None;
        if vec_end > 0 {
            let vinit = self.op(&format!("vector.broadcast {init} : {sacc_ty} to {vacc_ty}"));
            let fls = self.op("arith.constant false");
            let no_nan = self.op(&format!("vector.broadcast {fls} : i1 to {}", v.m()));
            let (f, t, st) = (self.i64c(0), self.i64c(vec_end), self.i64c(v.0 as i64));
            let res = format!("%v{}", self.next);
            let j = format!("%j{}", self.next);
            let (a, n) = (format!("%a{}", self.next), format!("%n{}", self.next));
            self.next += 1;
            self.line(&format!(
                "{res}:2 = scf.for {j} = {f} to {t} step {st} iter_args({a} = {vinit}, {n} = {no_nan}) -> ({vacc_ty}, {}) : i64 {{",
                v.m()
            ));
            self.depth += 1;
            let x = self.reduced(plan, row, arg, &j, v)?;
            let (a2, n2) = if sum {
                let x64 = self.op(&format!("arith.extf {x} : {} to {vacc_ty}", v.f()));
                (self.op(&format!("arith.addf {a}, {x64} : {vacc_ty}")), n.clone())
            } else {
                let better = if max { self.cmp("olt", &a, &x, v) } else { self.cmp("olt", &x, &a, v) };
                let a2 = self.select(&better, &x, &a, v);
                let uno = self.cmp("uno", &x, &x, v);
                (a2, self.op(&format!("arith.ori {n}, {uno} : {}", v.m())))
            };
            self.line(&format!("scf.yield {a2}, {n2} : {vacc_ty}, {}", v.m()));
            self.depth -= 1;
            self.line("}");
            vector = Some((format!("{res}#0"), format!("{res}#1")));
        }
        let mut sacc = init.clone();
        if vec_end < cols {
            let (f, t, st) = (self.i64c(vec_end), self.i64c(cols), self.i64c(1));
            let res = format!("%v{}", self.next);
            let j = format!("%j{}", self.next);
            let a = format!("%a{}", self.next);
            self.next += 1;
            self.line(&format!(
                "{res} = scf.for {j} = {f} to {t} step {st} iter_args({a} = {init}) -> ({sacc_ty}) : i64 {{"
            ));
            self.depth += 1;
            let x = self.reduced(plan, row, arg, &j, s)?;
            let a2 = if sum {
                let x64 = self.op(&format!("arith.extf {x} : f32 to f64"));
                self.op(&format!("arith.addf {a}, {x64} : f64"))
            } else {
                self.bin(if max { "arith.maximumf" } else { "arith.minimumf" }, &a, &x, s)
            };
            self.line(&format!("scf.yield {a2} : {sacc_ty}"));
            self.depth -= 1;
            self.line("}");
            sacc = res;
        }
        if sum {
            let mut total = match &vector {
                Some((vacc, _)) => self.op(&format!("vector.reduction <add>, {vacc}, {sacc} : {vacc_ty} into f64")),
                None => sacc,
            };
            if op == Op::ReduceMean {
                let n = self.op(&format!("arith.constant 0x{:016X} : f64", (cols as f64).to_bits()));
                total = self.op(&format!("arith.divf {total}, {n} : f64"));
            }
            return Ok(self.op(&format!("arith.truncf {total} : f64 to f32")));
        }
        // The scalar fold propagates NaN itself; the vector lanes keep theirs apart.
        let folded = match &vector {
            Some((vacc, nan)) => {
                let kind = if max { "maximumf" } else { "minimumf" };
                let folded = self.op(&format!("vector.reduction <{kind}>, {vacc}, {sacc} : {vacc_ty} into f32"));
                let any_nan = self.op(&format!("vector.reduction <or>, {nan} : {} into i1", v.m()));
                let qnan = self.konst(f32::NAN, s);
                self.select(&any_nan, &qnan, &folded, s)
            }
            None => sacc,
        };
        self.first_zero(plan, row, arg, &folded)
    }

    /// Reduction operand `arg` at column `j`, stored in its scratch slot when it has one.
    fn reduced(&mut self, plan: &LoopPlan, row: &Row, arg: usize, j: &str, l: Lanes) -> Result<String, String> {
        let vals = self.body(plan, row, j, l, &[arg])?;
        let x = vals[arg].as_ref().ok_or("the reduced operand is computed")?.f()?.to_string();
        if let Some(at) = self.slot(plan, arg, j) {
            self.store(&x, &at, l);
        }
        Ok(x)
    }

    /// A max or min of zero is the row's first zero, as the reference's fold keeps the first
    /// of equal values: a scalar scan, only where the extreme is a zero.
    fn first_zero(&mut self, plan: &LoopPlan, row: &Row, arg: usize, folded: &str) -> Result<String, String> {
        let s = Lanes(1);
        let zero = self.konst(0.0, s);
        let is_zero = self.cmp("oeq", folded, &zero, s);
        let res = format!("%v{}", self.next);
        self.next += 1;
        self.line(&format!("{res} = scf.if {is_zero} -> (f32) {{"));
        self.depth += 1;
        let (f, t, st) = (self.i64c(0), self.i64c(plan.cols as i64), self.i64c(1));
        let fls = self.op("arith.constant false");
        let scan = format!("%v{}", self.next);
        let (j, v, found) = (format!("%j{}", self.next), format!("%a{}", self.next), format!("%f{}", self.next));
        self.next += 1;
        self.line(&format!(
            "{scan}:2 = scf.for {j} = {f} to {t} step {st} iter_args({v} = {folded}, {found} = {fls}) -> (f32, i1) : i64 {{"
        ));
        self.depth += 1;
        let vals = self.body(plan, row, &j, s, &[arg])?;
        let x = vals[arg].as_ref().ok_or("the reduced operand is computed")?.f()?.to_string();
        let z = self.cmp("oeq", &x, &zero, s);
        let tru = self.op("arith.constant true");
        let fresh = self.op(&format!("arith.xori {found}, {tru} : i1"));
        let hit = self.op(&format!("arith.andi {z}, {fresh} : i1"));
        let v2 = self.select(&hit, &x, &v, s);
        let f2 = self.op(&format!("arith.ori {found}, {hit} : i1"));
        self.line(&format!("scf.yield {v2}, {f2} : f32, i1"));
        self.depth -= 1;
        self.line("}");
        self.line(&format!("scf.yield {scan}#0 : f32"));
        self.depth -= 1;
        self.line("} else {");
        self.depth += 1;
        self.line(&format!("scf.yield {folded} : f32"));
        self.depth -= 1;
        self.line("}");
        Ok(res)
    }

    /// The loop body at column `j`, `l` wide: the steps `wanted` needs and nothing else, with
    /// row values splat and stored steps loaded (`codegen.rs`'s `body`).
    fn body(
        &mut self,
        plan: &LoopPlan,
        row: &Row,
        j: &str,
        l: Lanes,
        wanted: &[usize],
    ) -> Result<Vec<Option<V>>, String> {
        let need = plan.needed(wanted, |i| row.uniform.contains_key(&i) || row.stored.contains(&i));
        let mut vals: Vec<Option<V>> = vec![None; plan.steps.len()];
        let mut decays: HashMap<usize, Decay> = HashMap::new();
        for (i, step) in plan.steps.iter().enumerate() {
            if !need[i] {
                continue;
            }
            if let Some(x) = row.uniform.get(&i) {
                vals[i] = Some(V::F(self.splat(x, l)));
                continue;
            }
            if row.stored.contains(&i) {
                let at = self.slot(plan, i, j).ok_or("a stored step without a slot")?;
                vals[i] = Some(V::F(self.load(&at, l)));
                continue;
            }
            let arg = |k: usize| vals[k].clone().ok_or_else(|| format!("step {k} is used before it is computed"));
            let v = match *step {
                Step::Input(k) => {
                    let m = &plan.inputs[k];
                    let base = row.in_base[k].clone();
                    if m.col_stride == 0 {
                        let x = self.load(&base, Lanes(1));
                        V::F(self.splat(&x, l))
                    } else {
                        let at = self.gep(&base, j);
                        V::F(self.load(&at, l))
                    }
                }
                Step::Const(c) => V::F(self.konst(c, l)),
                Step::Unary(op, a) => self.unary_step(plan, op, a, arg(a)?, l, &mut decays)?,
                // A square or a cube as the runtime's `powf` computes it (the product in f64,
                // converted to f32), vector-wide, instead of a call per lane.
                Step::Binary(Op::Pow, a, c) if matches!(plan.steps[c], Step::Const(2.0 | 3.0)) => {
                    let x = arg(a)?;
                    let wide = l.of("f64");
                    let w = self.op(&format!("arith.extf {} : {} to {wide}", x.f()?, l.f()));
                    let mut p = self.op(&format!("arith.mulf {w}, {w} : {wide}"));
                    if matches!(plan.steps[c], Step::Const(3.0)) {
                        p = self.op(&format!("arith.mulf {p}, {w} : {wide}"));
                    }
                    V::F(self.op(&format!("arith.truncf {p} : {wide} to {}", l.f())))
                }
                Step::Binary(op, a, c) => {
                    let (x, y) = (arg(a)?, arg(c)?);
                    self.binary_step(op, &x, &y, row.recip.get(&c), l)?
                }
                Step::Select(c, t, f) => {
                    let (c, t, f) = (arg(c)?, arg(t)?, arg(f)?);
                    V::F(self.select(c.m()?, t.f()?, f.f()?, l))
                }
                Step::Reduce(..) => return Err("a reduction read before its pass".into()),
            };
            vals[i] = Some(v);
        }
        Ok(vals)
    }

    fn unary_step(
        &mut self,
        plan: &LoopPlan,
        op: Op,
        a: usize,
        x: V,
        l: Lanes,
        decays: &mut HashMap<usize, Decay>,
    ) -> Result<V, String> {
        Ok(match op {
            Op::Broadcast | Op::Identity => x,
            Op::Not => {
                let t = self.op("arith.constant true");
                let t = if l.0 == 1 { t } else { self.op(&format!("vector.broadcast {t} : i1 to {}", l.m())) };
                V::M(self.op(&format!("arith.xori {}, {t} : {}", x.m()?, l.m())))
            }
            Op::Neg => V::F(self.unary("arith.negf", x.f()?, l)),
            Op::Abs => V::F(self.abs(x.f()?, l)),
            // NVVM lowers math.sqrt to libdevice, which the PTX cannot link here: PTX's own
            // correctly rounded square root instead.
            Op::Sqrt if self.ptx => {
                V::F(self.op(&format!("llvm.inline_asm \"sqrt.rn.f32 $0, $1;\", \"=f,f\" {} : (f32) -> f32", x.f()?)))
            }
            Op::Sqrt => V::F(self.unary("math.sqrt", x.f()?, l)),
            Op::Relu => {
                // The reference's `x > 0 or NaN ? x : +0` (so -0 gives +0).
                let z = self.konst(0.0, l);
                let keep = self.cmp("ugt", x.f()?, &z, l);
                V::F(self.select(&keep, x.f()?, &z, l))
            }
            // Softmax's exponential of x - max(x) skips the overflow side.
            Op::Exp if plan.at_most_zero(a) => V::F(self.exp_nonpositive(x.f()?, l).e),
            Op::Exp => V::F(self.exp(x.f()?, l)),
            Op::Log => V::F(self.call("graphc_logf", &[x.f()?], l)?),
            Op::Erf => V::F(self.erf(x.f()?, l)),
            Op::Tanh => {
                let d = self.decay(decays, a, x.f()?, l);
                V::F(self.tanh(x.f()?, &d, l))
            }
            Op::Sigmoid => {
                let d = self.decay(decays, a, x.f()?, l);
                V::F(self.sigmoid(x.f()?, &d, l))
            }
            other => return Err(format!("{other:?} is not a unary op of loop bodies")),
        })
    }

    fn binary_step(
        &mut self,
        op: Op,
        x: &V,
        y: &V,
        recip: Option<&(String, Option<String>)>,
        l: Lanes,
    ) -> Result<V, String> {
        let pred = |op: Op| match op {
            Op::Less => Some("olt"),
            Op::LessEqual => Some("ole"),
            Op::Greater => Some("ogt"),
            Op::GreaterEqual => Some("oge"),
            Op::Equal => Some("oeq"),
            Op::NotEqual => Some("une"),
            _ => None,
        };
        if let Some(p) = pred(op) {
            return Ok(V::M(self.cmp(p, x.f()?, y.f()?, l)));
        }
        if matches!(op, Op::And | Op::Or) {
            let name = if op == Op::And { "arith.andi" } else { "arith.ori" };
            return Ok(V::M(self.op(&format!("{name} {}, {} : {}", x.m()?, y.m()?, l.m()))));
        }
        let (x, y) = (x.f()?, y.f()?);
        Ok(V::F(match op {
            Op::Add => self.bin("arith.addf", x, y, l),
            Op::Sub => self.bin("arith.subf", x, y, l),
            Op::Mul => self.bin("arith.mulf", x, y, l),
            Op::Div => match recip {
                Some((r1, r2)) => {
                    let r1 = self.splat(r1, l);
                    let p = self.bin("arith.mulf", x, &r1, l);
                    match r2 {
                        Some(r2) => {
                            let r2 = self.splat(r2, l);
                            self.bin("arith.mulf", &p, &r2, l)
                        }
                        None => p,
                    }
                }
                None => self.bin("arith.divf", x, y, l),
            },
            Op::Max => self.max_min(x, y, "ogt", l),
            Op::Min => self.max_min(x, y, "olt", l),
            Op::Pow => self.call("graphc_powf", &[x, y], l)?,
            other => return Err(format!("{other:?} is not a binary op of loop bodies")),
        }))
    }

    /// The reference's max (`pred` ogt) or min (olt): y where it is NaN or beats x, else x.
    fn max_min(&mut self, x: &str, y: &str, pred: &str, l: Lanes) -> String {
        let beats = self.cmp(pred, y, x, l);
        let nan = self.cmp("uno", y, y, l);
        let take = self.op(&format!("arith.ori {beats}, {nan} : {}", l.m()));
        self.select(&take, y, x, l)
    }

    /// A scalar function of the run half on each lane; none on a GPU.
    fn call(&mut self, f: &str, args: &[&str], l: Lanes) -> Result<String, String> {
        if self.gpu {
            return Err(format!("no GPU code for {f} (the run half's function on the CPU)"));
        }
        let sig = format!("({}) -> f32", vec!["f32"; args.len()].join(", "));
        let call = |e: &mut Emitter, xs: &[String]| e.op(&format!("func.call @{f}({}) : {sig}", xs.join(", ")));
        if l.0 == 1 {
            return Ok(call(self, &args.iter().map(|a| a.to_string()).collect::<Vec<_>>()));
        }
        let mut out = self.konst(0.0, l);
        for lane in 0..l.0 {
            let xs: Vec<String> =
                args.iter().map(|a| self.op(&format!("vector.extract {a}[{lane}] : f32 from {}", l.f()))).collect();
            let r = call(self, &xs);
            out = self.op(&format!("vector.insert {r}, {out} [{lane}] : f32 into {}", l.f()));
        }
        Ok(out)
    }

    /// |x|, by clearing the sign bit (as an `and`, where NVVM would call libdevice's fabs).
    fn abs(&mut self, x: &str, l: Lanes) -> String {
        if !self.gpu {
            return self.unary("math.absf", x, l);
        }
        let xi = self.as_int(x, l);
        let m = self.i32c(i32::MAX, l);
        let a = self.op(&format!("arith.andi {xi}, {m} : {}", l.i()));
        self.as_float(&a, l)
    }

    /// |t| with the sign of x.
    fn copysign(&mut self, t: &str, x: &str, l: Lanes) -> String {
        if !self.gpu {
            return self.bin("math.copysign", t, x, l);
        }
        let magnitude = self.abs(t, l);
        let (mi, xi) = (self.as_int(&magnitude, l), self.as_int(x, l));
        let sign = self.i32c(i32::MIN, l);
        let xs = self.op(&format!("arith.andi {xi}, {sign} : {}", l.i()));
        let r = self.op(&format!("arith.ori {mi}, {xs} : {}", l.i()));
        self.as_float(&r, l)
    }

    /// x rounded to the nearest integer, ties to even, for |x| below 2^22 (or NaN): adding
    /// and subtracting 1.5 * 2^23 rounds in the default mode. On a GPU, where NVVM would
    /// call libdevice; elsewhere one instruction.
    fn round_even(&mut self, x: &str, l: Lanes) -> String {
        if !self.gpu {
            return self.unary("math.roundeven", x, l);
        }
        let magic = self.konst(12_582_912.0, l);
        let big = self.bin("arith.addf", x, &magic, l);
        self.bin("arith.subf", &big, &magic, l)
    }

    /// floor(h) for h an integer or an integer and a half (n / 2, n integer-valued), as
    /// `round_even(h - 1/4)`, which is exact for both.
    fn floor_of_half_integer(&mut self, h: &str, l: Lanes) -> String {
        if !self.gpu {
            return self.unary("math.floor", h, l);
        }
        let quarter = self.konst(0.25, l);
        let below = self.bin("arith.subf", h, &quarter, l);
        self.round_even(&below, l)
    }

    /// `2^n` for integer-valued lanes `n` in [-126, 127], built in the exponent bits.
    fn pow2(&mut self, n: &str, l: Lanes) -> String {
        let magic = self.konst(8_388_608.0 + 127.0, l);
        let t = self.bin("arith.addf", n, &magic, l);
        let bits = self.as_int(&t, l);
        let sh = self.i32c(23, l);
        let bits = self.op(&format!("arith.shli {bits}, {sh} : {}", l.i()));
        self.as_float(&bits, l)
    }

    /// e^x as `codegen.rs`'s `exp`: clamps, range reduction, the Cephes polynomial, scaling.
    fn exp(&mut self, x: &str, l: Lanes) -> String {
        let hi = self.konst(88.8, l);
        let above = self.cmp("ogt", x, &hi, l);
        let x = self.select(&above, &hi, x, l);
        let x = self.clamp_below(&x, l);
        let (q, n) = self.exp_reduced(&x, l);
        self.scale(&q, &n, l)
    }

    fn clamp_below(&mut self, x: &str, l: Lanes) -> String {
        let lo = self.konst(-104.0, l);
        let below = self.cmp("olt", x, &lo, l);
        self.select(&below, &lo, x, l)
    }

    /// (1 + q) 2^n for n in [-150, 128], 2^n as two halves.
    fn scale(&mut self, q: &str, n: &str, l: Lanes) -> String {
        let half = self.konst(0.5, l);
        let n1 = self.bin("arith.mulf", n, &half, l);
        let n1 = self.floor_of_half_integer(&n1, l);
        let n2 = self.bin("arith.subf", n, &n1, l);
        let s1 = self.pow2(&n1, l);
        let s2 = self.pow2(&n2, l);
        let y = self.fma(&s1, q, &s1, l);
        self.bin("arith.mulf", &y, &s2, l)
    }

    /// (e^r - 1, n) with x = n ln2 + r, |r| <= ln2/2.
    fn exp_reduced(&mut self, x: &str, l: Lanes) -> (String, String) {
        let log2e = self.konst(std::f32::consts::LOG2_E, l);
        let fx = self.bin("arith.mulf", x, &log2e, l);
        let n = self.round_even(&fx, l);
        let ln2_hi = self.konst(-0.693_359_4, l);
        let r = self.fma(&n, &ln2_hi, x, l);
        let ln2_lo = self.konst(2.121_944_4e-4, l);
        let r = self.fma(&n, &ln2_lo, &r, l);
        let r2 = self.bin("arith.mulf", &r, &r, l);
        let [c5, c4, c3, c2, c1, c0] =
            [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5]
                .map(|c| self.konst(c, l));
        let hi = self.fma(&c5, &r, &c4, l);
        let mid = self.fma(&c3, &r, &c2, l);
        let lo = self.fma(&c1, &r, &c0, l);
        let p = self.fma(&hi, &r2, &mid, l);
        let p = self.fma(&p, &r2, &lo, l);
        (self.fma(&p, &r2, &r, l), n)
    }

    /// exp(-|x|) of step `a`, once per body.
    fn decay(&mut self, memo: &mut HashMap<usize, Decay>, a: usize, x: &str, l: Lanes) -> Decay {
        if let Some(d) = memo.get(&a) {
            return d.clone();
        }
        let xi = self.as_int(x, l);
        let sign = self.i32c(i32::MIN, l);
        let n = self.op(&format!("arith.ori {xi}, {sign} : {}", l.i()));
        let n = self.as_float(&n, l);
        let d = self.exp_nonpositive(&n, l);
        memo.insert(a, d.clone());
        d
    }

    /// e^x and e^x - 1 for x <= 0 (or NaN).
    fn exp_nonpositive(&mut self, x: &str, l: Lanes) -> Decay {
        let x = self.clamp_below(x, l);
        let (q, n) = self.exp_reduced(&x, l);
        let e = self.scale(&q, &n, l);
        let one = self.konst(1.0, l);
        let zero = self.konst(0.0, l);
        let em1 = self.bin("arith.subf", &e, &one, l);
        let whole = self.cmp("oeq", &n, &zero, l);
        let em1 = self.select(&whole, &q, &em1, l);
        Decay { e, em1 }
    }

    /// sigmoid x from e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below; 0 where the
    /// reference's e^-x overflows.
    fn sigmoid(&mut self, x: &str, d: &Decay, l: Lanes) -> String {
        let one = self.konst(1.0, l);
        let den = self.bin("arith.addf", &one, &d.e, l);
        let p = self.bin("arith.divf", &one, &den, l);
        let q = self.bin("arith.mulf", &d.e, &p, l);
        let zero = self.konst(0.0, l);
        let negative = self.cmp("olt", x, &zero, l);
        let y = self.select(&negative, &q, &p, l);
        let cut = self.konst(-88.722_83, l);
        let gone = self.cmp("olt", x, &cut, l);
        self.select(&gone, &zero, &y, l)
    }

    /// erf x ([`crate::lower::erf`]'s steps).
    fn erf(&mut self, x: &str, l: Lanes) -> String {
        use crate::lower::erf::*;
        let horner = |e: &mut Self, c: &[f32], t: &str| {
            let mut p = e.konst(c[c.len() - 1], l);
            for &k in c[..c.len() - 1].iter().rev() {
                let k = e.konst(k, l);
                p = e.fma(&p, t, &k, l);
            }
            p
        };
        let a = self.abs(x, l);
        let t = self.bin("arith.mulf", &a, &a, l);
        let tail = horner(self, &SMALL[1..], &t);
        let q = self.bin("arith.mulf", &t, &tail, l);
        let aq = self.bin("arith.mulf", &a, &q, l);
        let lo = self.konst(SMALL_LO, l);
        let s = self.fma(&a, &lo, &aq, l);
        let hi = self.konst(SMALL[0], l);
        let small = self.fma(&a, &hi, &s, l);
        let mid_at = self.konst(MID_AT, l);
        let u = self.bin("arith.subf", &a, &mid_at, l);
        let mid = horner(self, &MID, &u);
        let far_at = self.konst(FAR_AT, l);
        let v = self.bin("arith.subf", &a, &far_at, l);
        let far = horner(self, &FAR, &v);
        let [small_end, mid_end, far_end] = [SMALL_END, MID_END, FAR_END].map(|c| self.konst(c, l));
        let is_mid = self.cmp("olt", &a, &mid_end, l);
        let r = self.select(&is_mid, &mid, &far, l);
        let is_small = self.cmp("olt", &a, &small_end, l);
        let r = self.select(&is_small, &small, &r, l);
        let one = self.konst(1.0, l);
        let is_one = self.cmp("oge", &a, &far_end, l);
        let r = self.select(&is_one, &one, &r, l);
        self.copysign(&r, x, l)
    }

    /// tanh |x| = (1 - e^2) / (1 + e^2) with e = exp(-|x|), the numerator by the form that
    /// keeps its precision on each side of |x| = 0.55; then x's sign.
    fn tanh(&mut self, x: &str, d: &Decay, l: Lanes) -> String {
        let one = self.konst(1.0, l);
        let e2 = self.bin("arith.mulf", &d.e, &d.e, l);
        let den = self.bin("arith.addf", &one, &e2, l);
        let two = self.konst(2.0, l);
        let ep1 = self.bin("arith.addf", &d.em1, &two, l);
        let near_zero = self.bin("arith.mulf", &d.em1, &ep1, l);
        let away = self.bin("arith.subf", &e2, &one, l);
        let small = self.konst((-0.55f32).exp(), l);
        let is_small = self.cmp("ogt", &d.e, &small, l);
        let num = self.select(&is_small, &near_zero, &away, l);
        let t = self.bin("arith.divf", &num, &den, l);
        self.copysign(&t, x, l)
    }
}
