//! Loop plans to Cranelift IR, JIT-compiled with cranelift-jit through cranelift-module (so
//! an AOT path can reuse it with cranelift-object).
//!
//! A kernel is `fn(inputs: *const *const f32, outputs: *const *mut f32, row_begin: i64,
//! row_end: i64, scratch: *mut f32)` over the plan's `[rows, cols]` view: for each row, one
//! pass per reduction and then one for the results, each a loop of 4-lane vectors (f32x4,
//! the width Cranelift's x86-64 backend gives) and a scalar tail; `scratch` has a row for
//! each of the plan's cached steps. Strides are constants of the plan, so every address is a
//! multiply-add of known numbers. `exp`, `tanh` and `sigmoid` are computed inline on all
//! lanes (Cephes-style range reduction and polynomials, within SPEC §12's ulp bounds of the
//! reference, through the denormals), and `erf` by polynomials in three ranges; `log` and
//! `pow` call the Rust (libm) functions the reference kernels use, lane by lane.
//!
//! The emitter keeps what [`Listings`] asks of each kernel: its Cranelift IR as generated here
//! (before Cranelift's optimizations; `graphc opt --emit clif`), its machine code as Cranelift
//! prints it (`--emit asm`), and its code bytes (`graphc bench --dump-code DIR` writes them to
//! `DIR/graphc_loop_N.bin`, which `benches/jit_profile.py` matches with `perf record` samples,
//! instruction by instruction).

use crate::lower::plan::{LoopPlan, Step};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, AbiParam, Endianness, InstBuilder, MemFlags, Type, UserFuncName, Value};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use graphc_cpu_runtime::Extents;
use graphc_ir::Op;
use std::collections::HashMap;

/// Which instructions kernels may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isa {
    /// Everything the host has (detected by cranelift-native).
    #[default]
    Native,
    /// On x86-64, the host's SSE levels (up to SSE4.2) without AVX, FMA, AVX-512 or BMI:
    /// the legacy encodings, whose memory operands must be aligned, as on hosts without AVX.
    Sse,
}

impl Isa {
    /// Every instruction set, as `--isa` spells it.
    pub const ALL: [Isa; 2] = [Isa::Native, Isa::Sse];

    /// The name `--isa` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Native => "native",
            Isa::Sse => "sse",
        }
    }
}

impl std::str::FromStr for Isa {
    type Err = String;

    fn from_str(s: &str) -> Result<Isa, String> {
        Isa::ALL.into_iter().find(|i| i.name() == s).ok_or_else(|| format!("expected 'native' or 'sse', got '{s}'"))
    }
}

/// The x86-64 Cranelift settings `Isa::Sse` turns off.
const AVX_FLAGS: [&str; 12] = [
    "has_avx",
    "has_avx2",
    "has_fma",
    "has_avx512bitalg",
    "has_avx512dq",
    "has_avx512vl",
    "has_avx512vbmi",
    "has_avx512f",
    "has_bmi1",
    "has_bmi2",
    "has_lzcnt",
    "has_popcnt",
];

/// The host's Cranelift target, with the features it has (detected by cranelift-native), less
/// the AVX family when `isa` says so; `pic` for code an object file relocates.
pub fn host_isa(isa: Isa, pic: bool) -> Result<OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    let pic = if pic { "true" } else { "false" };
    for (k, v) in [("opt_level", "speed"), ("use_colocated_libcalls", "false"), ("is_pic", pic)] {
        flags.set(k, v).map_err(|e| format!("cranelift setting {k}: {e}"))?;
    }
    let mut builder =
        cranelift_native::builder().map_err(|e| format!("this host is not supported by Cranelift: {e}"))?;
    if isa == Isa::Sse {
        if !cfg!(target_arch = "x86_64") {
            return Err("the SSE-only instruction set is for x86-64 hosts".into());
        }
        for f in AVX_FLAGS {
            builder.set(f, "false").map_err(|e| format!("cranelift setting {f}: {e}"))?;
        }
    }
    builder.finish(settings::Flags::new(flags)).map_err(|e| format!("cannot configure Cranelift for this host: {e}"))
}

/// What to keep of each kernel besides its code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listings {
    /// Its Cranelift IR as generated, before Cranelift's optimizations: target-independent but
    /// for the pointer type, the calling convention and the FMA the target has or lacks.
    pub clif: bool,
    /// Its machine code as Cranelift prints it (the VCode after register allocation).
    pub asm: bool,
    /// Its machine code's bytes.
    pub code: bool,
}

/// What an emitter kept of one kernel ([`Listings`]); `None` where not asked for.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The function's name, `graphc_loop_N`.
    pub name: String,
    pub clif: Option<String>,
    pub asm: Option<String>,
    pub code: Option<Vec<u8>>,
}

/// A Cranelift module (a JIT module, or an object file) being filled with kernels: the
/// lowering is the same for both.
pub struct Emitter<M: Module> {
    module: M,
    listings: Listings,
    /// The target fuses multiply-adds (else Cranelift would make `fma` a library call per lane).
    fma: bool,
    /// The math functions, in the order of `math::symbols` (each kernel declares them in this
    /// order, so its IR numbers them alike every time).
    math: Vec<(&'static str, FuncId)>,
    ctx: cranelift_codegen::Context,
    fctx: FunctionBuilderContext,
    count: u32,
    /// Every kernel defined, with the extents of the plan it was generated from: kept
    /// together here so that no entry point is ever paired with another plan's extents.
    defined: Vec<(FuncId, Extents)>,
}

impl<M: Module> std::fmt::Debug for Emitter<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Emitter({} kernels)", self.count)
    }
}

impl<M: Module> Emitter<M> {
    /// An emitter into `module`, which must resolve the math symbols
    /// (`graphc_cpu_runtime::math::symbols`), keeping `listings` of each kernel.
    pub fn new(mut module: M, listings: Listings) -> Result<Emitter<M>, String> {
        let fma = module.isa().isa_flags().iter().any(|f| f.name == "has_fma" && f.as_bool() == Some(true));
        let mut math = Vec::new();
        for (name, arity, _) in graphc_cpu_runtime::math::symbols() {
            let mut sig = module.make_signature();
            for _ in 0..arity {
                sig.params.push(AbiParam::new(types::F32));
            }
            sig.returns.push(AbiParam::new(types::F32));
            let id = module.declare_function(name, Linkage::Import, &sig).map_err(|e| e.to_string())?;
            math.push((name, id));
        }
        let ctx = module.make_context();
        let fctx = FunctionBuilderContext::new();
        Ok(Emitter { module, listings, fma, math, ctx, fctx, count: 0, defined: Vec::new() })
    }

    /// Generates and defines the kernel for a plan, as `graphc_loop_N`; with what the emitter
    /// keeps of it.
    pub fn define(&mut self, plan: &LoopPlan) -> Result<(FuncId, Listing), String> {
        let ptr = self.module.target_config().pointer_type();
        let mut sig = self.module.make_signature();
        for t in [ptr, ptr, types::I64, types::I64, ptr] {
            sig.params.push(AbiParam::new(t));
        }
        self.count += 1;
        let name = format!("graphc_loop_{}", self.count);
        let id = self.module.declare_function(&name, Linkage::Local, &sig).map_err(|e| e.to_string())?;
        self.module.clear_context(&mut self.ctx);
        self.ctx.func.signature = sig;
        self.ctx.func.name = UserFuncName::user(0, id.as_u32());
        let mut math = HashMap::new();
        for &(k, f) in &self.math {
            math.insert(k, self.module.declare_func_in_func(f, &mut self.ctx.func));
        }
        {
            let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
            emit(&mut b, plan, ptr, &math, self.fma);
            b.seal_all_blocks();
            b.finalize();
        }
        let clif = self.listings.clif.then(|| self.ctx.func.display().to_string());
        self.ctx.set_disasm(self.listings.asm);
        self.module.define_function(id, &mut self.ctx).map_err(|e| format!("cranelift: {e:?}"))?;
        let compiled = self.ctx.compiled_code();
        let asm = if self.listings.asm { compiled.and_then(|c| c.vcode.clone()) } else { None };
        let code = if self.listings.code { compiled.map(|c| c.code_buffer().to_vec()) } else { None };
        self.defined.push((id, graphc_cpu_runtime::describe::extents(plan)));
        Ok((id, Listing { name, clif, asm, code }))
    }

    /// The module with every kernel defined, and each kernel with the extents of its plan.
    pub fn finish(self) -> (M, Vec<(FuncId, Extents)>) {
        (self.module, self.defined)
    }
}

/// How generated code computes an op of a loop body. Every op of the IR is listed in
/// [`lowering`], so that a new op does not compile until this backend says how it lowers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lowering {
    Unary(Unary),
    Binary(Binary),
    Fold(Fold),
    /// A step of its own kind (`Step::Const`, `Step::Select`), no unary, binary or reduction.
    Step,
    /// Never in a loop body: matrix products run in the run half, fusions are kernels, the
    /// interpreter runs the rest.
    Elsewhere,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unary {
    /// Broadcast and identity: the operand itself (the plan's strides broadcast).
    Pass,
    Not,
    Neg,
    Abs,
    Sqrt,
    Relu,
    Exp,
    Log,
    Tanh,
    Erf,
    Sigmoid,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    /// A comparison, to a mask.
    Compare(FloatCC),
    And,
    Or,
}

/// A row reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fold {
    Sum,
    Mean,
    Max,
    Min,
}

fn lowering(op: Op) -> Lowering {
    match op {
        Op::Broadcast | Op::Identity => Lowering::Unary(Unary::Pass),
        Op::Not => Lowering::Unary(Unary::Not),
        Op::Neg => Lowering::Unary(Unary::Neg),
        Op::Abs => Lowering::Unary(Unary::Abs),
        Op::Sqrt => Lowering::Unary(Unary::Sqrt),
        Op::Relu => Lowering::Unary(Unary::Relu),
        Op::Exp => Lowering::Unary(Unary::Exp),
        Op::Log => Lowering::Unary(Unary::Log),
        Op::Tanh => Lowering::Unary(Unary::Tanh),
        Op::Erf => Lowering::Unary(Unary::Erf),
        Op::Sigmoid => Lowering::Unary(Unary::Sigmoid),
        Op::Add => Lowering::Binary(Binary::Add),
        Op::Sub => Lowering::Binary(Binary::Sub),
        Op::Mul => Lowering::Binary(Binary::Mul),
        Op::Div => Lowering::Binary(Binary::Div),
        Op::Max => Lowering::Binary(Binary::Max),
        Op::Min => Lowering::Binary(Binary::Min),
        Op::Pow => Lowering::Binary(Binary::Pow),
        Op::Less => Lowering::Binary(Binary::Compare(FloatCC::LessThan)),
        Op::LessEqual => Lowering::Binary(Binary::Compare(FloatCC::LessThanOrEqual)),
        Op::Greater => Lowering::Binary(Binary::Compare(FloatCC::GreaterThan)),
        Op::GreaterEqual => Lowering::Binary(Binary::Compare(FloatCC::GreaterThanOrEqual)),
        Op::Equal => Lowering::Binary(Binary::Compare(FloatCC::Equal)),
        Op::NotEqual => Lowering::Binary(Binary::Compare(FloatCC::NotEqual)),
        Op::And => Lowering::Binary(Binary::And),
        Op::Or => Lowering::Binary(Binary::Or),
        Op::ReduceSum => Lowering::Fold(Fold::Sum),
        Op::ReduceMean => Lowering::Fold(Fold::Mean),
        Op::ReduceMax => Lowering::Fold(Fold::Max),
        Op::ReduceMin => Lowering::Fold(Fold::Min),
        Op::Constant | Op::Select => Lowering::Step,
        Op::MatMul
        | Op::Fusion
        | Op::Cast
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
        | Op::ReduceProd => Lowering::Elsewhere,
    }
}

/// How wide the code is, and whether the host fuses multiply-adds.
#[derive(Clone, Copy)]
struct Lanes {
    n: u8,
    fma: bool,
}

/// Loads and stores of rows, inputs, outputs and scratch: within the extents the caller checked
/// (so they cannot trap), but only as aligned as an f32, which a vector access is not.
const DATA: MemFlags = MemFlags::new().with_notrap();

const F32: Type = types::F32;
const F32X4: Type = types::F32X4;

/// A body value: f32 data, or a comparison's mask.
#[derive(Clone, Copy)]
enum V {
    F(Value),
    M(Value),
}

impl V {
    fn f(self) -> Value {
        match self {
            V::F(v) | V::M(v) => v,
        }
    }
}

/// What a pass over a row can read besides the inputs: the steps that have one value per
/// row (scalars computed before the pass: the reductions of earlier passes, inputs read as
/// one element per row, and what follows from those) and the steps earlier passes left in
/// the scratch row.
struct Row<'a> {
    in_base: &'a [Value],
    uniform: HashMap<usize, Value>,
    /// For uniform divisors: (r1, r2) with x / d = (x r1) r2, r2 a power of two.
    recip: HashMap<usize, (Value, Option<Value>)>,
    stored: Vec<usize>,
    scratch: Value,
}

impl Row<'_> {
    /// The address of cached step `step` at column byte offset `byte`.
    fn slot(&self, b: &mut FunctionBuilder<'_>, plan: &LoopPlan, step: usize, byte: Value) -> Option<Value> {
        let slot = plan.cached.iter().position(|&c| c == step)?;
        let base = b.ins().iadd_imm(self.scratch, (slot * plan.cols * 4) as i64);
        Some(b.ins().iadd(base, byte))
    }
}

/// Every loop here branches `brif finished, exit, body`, exit first. Cranelift 0.126 hoists
/// loop-invariant code while walking the dominator tree, but once it has visited the loop's
/// exit (a sibling of the body there) it forgets the loop, and it visits the children in
/// reverse postorder, which puts a `brif go, body, exit`'s exit first: then nothing is
/// hoisted out of the body (every splat, constant and row value recomputed per iteration).
fn emit(
    b: &mut FunctionBuilder<'_>,
    plan: &LoopPlan,
    ptr: Type,
    math: &HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    fma: bool,
) {
    // The pointer arrays are aligned Rust vectors of pointers, and every access is within the
    // extents checked before the call; data rows start anywhere (a row of 5 f32s does), so
    // vector accesses to them claim no alignment (`DATA`).
    let mem = MemFlags::trusted();
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let [ins, outs, row_begin, row_end, scratch] = b.block_params(entry).try_into().expect("five parameters");
    let in_ptrs: Vec<Value> =
        (0..plan.inputs.len()).map(|i| b.ins().load(ptr, mem, ins, (i * ptr.bytes() as usize) as i32)).collect();
    let out_ptrs: Vec<Value> =
        (0..plan.results.len()).map(|k| b.ins().load(ptr, mem, outs, (k * ptr.bytes() as usize) as i32)).collect();

    let row_head = b.create_block();
    let row_body = b.create_block();
    let exit = b.create_block();
    let r = b.append_block_param(row_head, types::I64);
    b.ins().jump(row_head, &[row_begin.into()]);

    b.switch_to_block(row_head);
    let finished = b.ins().icmp(IntCC::SignedGreaterThanOrEqual, r, row_end);
    b.ins().brif(finished, exit, &[], row_body, &[]);

    b.switch_to_block(row_body);
    let cols = plan.cols as i64;
    let in_base: Vec<Value> = plan
        .inputs
        .iter()
        .zip(&in_ptrs)
        .map(|(m, &p)| {
            if m.row_stride == 0 {
                p
            } else {
                let off = b.ins().imul_imm(r, m.row_stride * 4);
                b.ins().iadd(p, off)
            }
        })
        .collect();
    let out_off = b.ins().imul_imm(r, cols * 4);
    let row_off = b.ins().imul_imm(r, 4);
    let out_base: Vec<Value> = out_ptrs
        .iter()
        .zip(&plan.per_row)
        .map(|(&p, &per_row)| b.ins().iadd(p, if per_row { row_off } else { out_off }))
        .collect();
    let mut row =
        Row { in_base: &in_base, uniform: HashMap::new(), recip: HashMap::new(), stored: Vec::new(), scratch };
    hoist_uniform(b, plan, &mut row, math, fma);
    // One pass per reduction, each seeing the ones before; the row stays in cache.
    for &ri in &plan.reduces {
        let v = reduce_row(b, plan, ri, &row, math, fma);
        row.uniform.insert(ri, v);
        if let Step::Reduce(_, arg) = plan.steps[ri] {
            if plan.cached.contains(&arg) {
                row.stored.push(arg);
            }
        }
        hoist_uniform(b, plan, &mut row, math, fma);
    }
    // Results with one value per row, then a last pass for the full ones.
    for (k, &i) in plan.results.iter().enumerate() {
        if plan.per_row[k] {
            let v = *row.uniform.get(&i).expect("planned per-row results are row values");
            b.ins().store(DATA, v, out_base[k], 0);
        }
    }
    let full: Vec<(usize, usize)> =
        plan.results.iter().enumerate().filter(|&(k, _)| !plan.per_row[k]).map(|(k, &i)| (k, i)).collect();
    let row_next = b.create_block();
    if full.is_empty() {
        b.ins().jump(row_next, &[]);
    } else {
        let wanted: Vec<usize> = full.iter().map(|&(_, i)| i).collect();
        col_loop(b, cols, row_next, |b, j, l| {
            let l = Lanes { n: l, fma };
            let byte = b.ins().ishl_imm(j, 2);
            let vals = body(b, plan, &row, byte, l, math, &wanted);
            for &(k, i) in &full {
                let at = b.ins().iadd(out_base[k], byte);
                b.ins().store(DATA, vals[i].expect("results are computed"), at, 0);
            }
        });
    }

    b.switch_to_block(row_next);
    let next = b.ins().iadd_imm(r, 1);
    b.ins().jump(row_head, &[next.into()]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
}

/// Loops over the columns of a row: `each(b, j, 4)` for j = 0, 4, ... while j + 4 <= cols
/// (two vectors per iteration, so that the out-of-order core overlaps their dependency
/// chains), then `each(b, j, 1)` for each remaining column, straight-line; ends by jumping to
/// `done`.
fn col_loop(
    b: &mut FunctionBuilder<'_>,
    cols: i64,
    done: cranelift_codegen::ir::Block,
    mut each: impl FnMut(&mut FunctionBuilder<'_>, Value, u8),
) {
    if cols >= 8 {
        let (vh, vb, tail) = (b.create_block(), b.create_block(), b.create_block());
        let jv = b.append_block_param(vh, types::I64);
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(vh, &[zero.into()]);
        b.switch_to_block(vh);
        let finished = b.ins().icmp_imm(IntCC::SignedGreaterThan, jv, cols - 8);
        b.ins().brif(finished, tail, &[], vb, &[]);
        b.switch_to_block(vb);
        each(b, jv, 4);
        let j4 = b.ins().iadd_imm(jv, 4);
        each(b, j4, 4);
        let next = b.ins().iadd_imm(jv, 8);
        b.ins().jump(vh, &[next.into()]);
        b.switch_to_block(tail);
    }
    let mut j = cols / 8 * 8;
    if cols - j >= 4 {
        let at = b.ins().iconst(types::I64, j);
        each(b, at, 4);
        j += 4;
    }
    for j in j..cols {
        let at = b.ins().iconst(types::I64, j);
        each(b, at, 1);
    }
    b.ins().jump(done, &[]);
}

/// Computes, once per row, every f32 step that has one value per row and that the row
/// values known so far determine, so that the column loops only read it.
fn hoist_uniform(
    b: &mut FunctionBuilder<'_>,
    plan: &LoopPlan,
    row: &mut Row<'_>,
    math: &HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    fma: bool,
) {
    let zero = b.ins().iconst(types::I64, 0);
    for i in 0..plan.steps.len() {
        if plan.hoistable(i, |a| row.uniform.contains_key(&a)) {
            let v = body(b, plan, row, zero, Lanes { n: 1, fma }, math, &[i])[i].expect("the wanted step is computed");
            row.uniform.insert(i, v);
        }
    }
    // Dividing every column by one value per row that the kernel computes (a row's sum or
    // norm): multiply by its reciprocal instead (within an ulp and a half of the quotient). A
    // divisor the kernel reads or is given (a scale operand, a constant) keeps the exact
    // division: a quantizer rounds the quotient to an integer, where an ulp turns -127.49999
    // into -127.5 (ONNX's DynamicQuantizeLinear, QuantizeLinear). A nonzero divisor below
    // 2^-126, whose reciprocal would overflow, is scaled by 2^64 first and the product by
    // 2^64 after.
    for step in &plan.steps {
        let Step::Binary(Op::Div, a, d) = *step else { continue };
        if row.recip.contains_key(&d) || row.uniform.contains_key(&a) || !plan.computes(d) {
            continue;
        }
        let Some(&den) = row.uniform.get(&d) else { continue };
        let one = b.ins().f32const(1.0);
        if plan.at_least_one(d) {
            // Softmax's sum: 1 or more (or NaN), so its reciprocal is a normal number.
            let r1 = b.ins().fdiv(one, den);
            row.recip.insert(d, (r1, None));
            continue;
        }
        let scale = b.ins().f32const(18_446_744_073_709_551_616.0);
        let zero = b.ins().f32const(0.0);
        let tiny = b.ins().f32const(f32::MIN_POSITIVE);
        let mag = b.ins().fabs(den);
        let small = b.ins().fcmp(FloatCC::LessThan, mag, tiny);
        let nonzero = b.ins().fcmp(FloatCC::NotEqual, den, zero);
        let subnormal = b.ins().band(small, nonzero);
        let scaled = b.ins().fmul(den, scale);
        let den = b.ins().select(subnormal, scaled, den);
        let r1 = b.ins().fdiv(one, den);
        let r2 = Some(b.ins().select(subnormal, scale, one));
        row.recip.insert(d, (r1, r2));
    }
}

/// A pass over a row folding reduction `ri`'s operand into one f32 (storing the operand in
/// the scratch row when later passes read it). Sums (and means) accumulate in f64, as the
/// reference kernels do: f64x2 accumulators (a low and a high half) for the vector part and
/// one f64 for the tail. Max and min fold f32x4 lanes and then the lanes, NaN-propagating.
/// The vector part alternates between two chains of accumulators. Leaves the builder in the
/// block after the pass.
fn reduce_row(
    b: &mut FunctionBuilder<'_>,
    plan: &LoopPlan,
    ri: usize,
    row: &Row<'_>,
    math: &HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    fma: bool,
) -> Value {
    let Step::Reduce(op, arg) = plan.steps[ri] else { unreachable!("reduces point at Reduce steps") };
    let Lowering::Fold(fold) = lowering(op) else { unreachable!("{op:?} is not a reduction") };
    let cols = plan.cols as i64;
    let sum = matches!(fold, Fold::Sum | Fold::Mean);
    let max = fold == Fold::Max;
    // Two of each vector accumulator, one per vector of a loop iteration, so that the two
    // dependency chains overlap. Sums accumulate in f64 (a low and a high half per vector),
    // like the reference kernels. A max or min keeps its NaN lanes apart: the compare-select
    // below is one maxps/minps on x86-64 but drops NaN, which the reference propagates.
    const CHAINS: usize = 2;
    let vars = |b: &mut FunctionBuilder<'_>, ty: Type| (0..CHAINS).map(|_| b.declare_var(ty)).collect::<Vec<_>>();
    let (acc_lo, acc_hi) = (vars(b, types::F64X2), vars(b, types::F64X2));
    let (acc_v, nan_v) = (vars(b, F32X4), vars(b, types::I32X4));
    let acc_s = b.declare_var(if sum { types::F64 } else { F32 });
    if sum {
        // From -0, as the reference: a row of -0 sums to -0 (`-0 + x` is `x` for every x).
        let z = b.ins().f64const(-0.0);
        let zv = b.ins().splat(types::F64X2, z);
        for c in 0..CHAINS {
            b.def_var(acc_lo[c], zv);
            b.def_var(acc_hi[c], zv);
        }
        b.def_var(acc_s, z);
    } else {
        let init = if max { f32::NEG_INFINITY } else { f32::INFINITY };
        let s = b.ins().f32const(init);
        let v = b.ins().splat(F32X4, s);
        let zero = b.ins().iconst(types::I32, 0);
        let none = b.ins().splat(types::I32X4, zero);
        for c in 0..CHAINS {
            b.def_var(acc_v[c], v);
            b.def_var(nan_v[c], none);
        }
        b.def_var(acc_s, s);
    }
    let le = MemFlags::new().with_endianness(Endianness::Little);
    let done = b.create_block();
    let mut vectors = 0;
    col_loop(b, cols, done, |b, j, lanes| {
        let byte = b.ins().ishl_imm(j, 2);
        let vals = body(b, plan, row, byte, Lanes { n: lanes, fma }, math, &[arg]);
        let x = vals[arg].expect("the reduced operand is computed");
        if let Some(at) = row.slot(b, plan, arg, byte) {
            b.ins().store(DATA, x, at, 0);
        }
        if lanes == 4 {
            let c = vectors % CHAINS;
            vectors += 1;
            if sum {
                let lo = b.ins().fvpromote_low(x);
                let bytes = b.ins().bitcast(types::I8X16, le, x);
                let mask = b.func.dfg.immediates.push(cranelift_codegen::ir::ConstantData::from(
                    [8u8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15].as_slice(),
                ));
                let high = b.ins().shuffle(bytes, bytes, mask);
                let high = b.ins().bitcast(F32X4, le, high);
                let hi = b.ins().fvpromote_low(high);
                let a = b.use_var(acc_lo[c]);
                let a = b.ins().fadd(a, lo);
                b.def_var(acc_lo[c], a);
                let a = b.use_var(acc_hi[c]);
                let a = b.ins().fadd(a, hi);
                b.def_var(acc_hi[c], a);
            } else {
                let a = b.use_var(acc_v[c]);
                // `a < x ? x : a` and `x < a ? x : a`: the forms Cranelift matches to one
                // maxps / minps.
                let better =
                    if max { b.ins().fcmp(FloatCC::LessThan, a, x) } else { b.ins().fcmp(FloatCC::LessThan, x, a) };
                let a = choose(b, better, x, a, 4);
                b.def_var(acc_v[c], a);
                let unordered = b.ins().fcmp(FloatCC::Unordered, x, x);
                let unordered = b.ins().bitcast(types::I32X4, le, unordered);
                let n = b.use_var(nan_v[c]);
                let n = b.ins().bor(n, unordered);
                b.def_var(nan_v[c], n);
            }
        } else {
            let a = b.use_var(acc_s);
            let a = match fold {
                Fold::Max => b.ins().fmax(a, x),
                Fold::Min => b.ins().fmin(a, x),
                Fold::Sum | Fold::Mean => {
                    let x = b.ins().fpromote(types::F64, x);
                    b.ins().fadd(a, x)
                }
            };
            b.def_var(acc_s, a);
        }
    });
    // Fold the chains and the lanes.
    b.switch_to_block(done);
    let s = b.use_var(acc_s);
    if sum {
        let mut v = b.use_var(acc_lo[0]);
        for c in 0..CHAINS {
            let hi = b.use_var(acc_hi[c]);
            v = b.ins().fadd(v, hi);
            if c > 0 {
                let lo = b.use_var(acc_lo[c]);
                v = b.ins().fadd(v, lo);
            }
        }
        let x0 = b.ins().extractlane(v, 0);
        let x1 = b.ins().extractlane(v, 1);
        let t = b.ins().fadd(x0, x1);
        let mut total = b.ins().fadd(t, s);
        if fold == Fold::Mean {
            let n = b.ins().f64const(cols as f64);
            total = b.ins().fdiv(total, n);
        }
        b.ins().fdemote(F32, total)
    } else {
        let mut acc = s;
        let mut nan = None;
        for c in 0..CHAINS {
            let v = b.use_var(acc_v[c]);
            for lane in 0..4 {
                let x = b.ins().extractlane(v, lane);
                acc = if max { b.ins().fmax(acc, x) } else { b.ins().fmin(acc, x) };
            }
            let n = b.use_var(nan_v[c]);
            nan = Some(match nan {
                Some(m) => b.ins().bor(m, n),
                None => n,
            });
        }
        let any_nan = b.ins().vany_true(nan.expect("at least one chain"));
        let qnan = b.ins().f32const(f32::NAN);
        let folded = b.ins().select(any_nan, qnan, acc);
        first_zero(b, plan, arg, row, math, fma, folded)
    }
}

/// A max or min of zero is the row's first zero, as the reference's fold keeps the first of
/// equal values: the lanes above fold in another order and may have met the other zero first.
/// Rare enough (a zero extreme) that a second, scalar pass over the row costs nothing overall.
fn first_zero(
    b: &mut FunctionBuilder<'_>,
    plan: &LoopPlan,
    arg: usize,
    row: &Row<'_>,
    math: &HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    fma: bool,
    folded: Value,
) -> Value {
    let cols = plan.cols as i64;
    let (head, scan, next, exit) = (b.create_block(), b.create_block(), b.create_block(), b.create_block());
    let result = b.append_block_param(exit, F32);
    let j = b.append_block_param(head, types::I64);
    let zero = b.ins().f32const(0.0);
    let is_zero = b.ins().fcmp(FloatCC::Equal, folded, zero);
    let start = b.ins().iconst(types::I64, 0);
    b.ins().brif(is_zero, head, &[start.into()], exit, &[folded.into()]);
    b.switch_to_block(head);
    let more = b.ins().icmp_imm(IntCC::SignedLessThan, j, cols);
    b.ins().brif(more, scan, &[], exit, &[folded.into()]);
    b.switch_to_block(scan);
    let byte = b.ins().ishl_imm(j, 2);
    let vals = body(b, plan, row, byte, Lanes { n: 1, fma }, math, &[arg]);
    let x = vals[arg].expect("the reduced operand is computed");
    let found = b.ins().fcmp(FloatCC::Equal, x, zero);
    b.ins().brif(found, exit, &[x.into()], next, &[]);
    b.switch_to_block(next);
    let j1 = b.ins().iadd_imm(j, 1);
    b.ins().jump(head, &[j1.into()]);
    b.switch_to_block(exit);
    result
}

/// The loop body at column byte offset `byte`, `lanes` wide (1 or 4): the steps `wanted`
/// needs and nothing else, with earlier passes' row values splat and their stored steps
/// loaded. Returns every step's value, `None` where it was not needed.
#[allow(clippy::too_many_arguments)]
fn body(
    b: &mut FunctionBuilder<'_>,
    plan: &LoopPlan,
    row: &Row<'_>,
    byte: Value,
    l: Lanes,
    math: &HashMap<&'static str, cranelift_codegen::ir::FuncRef>,
    wanted: &[usize],
) -> Vec<Option<Value>> {
    let lanes = l.n;
    let mem = DATA;
    let ty = if lanes == 4 { F32X4 } else { F32 };
    let splat = |b: &mut FunctionBuilder<'_>, x: Value| if lanes == 4 { b.ins().splat(F32X4, x) } else { x };
    let need = plan.needed(wanted, |i| row.uniform.contains_key(&i) || row.stored.contains(&i));
    let mut vals: Vec<Option<V>> = vec![None; plan.steps.len()];
    // exp(-|x|) by operand step: sigmoid and tanh of one value share it.
    let mut decays: HashMap<usize, Decay> = HashMap::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if !need[i] {
            continue;
        }
        if let Some(&x) = row.uniform.get(&i) {
            vals[i] = Some(V::F(splat(b, x)));
            continue;
        }
        if row.stored.contains(&i) {
            let at = row.slot(b, plan, i, byte).expect("stored steps have slots");
            vals[i] = Some(V::F(b.ins().load(ty, mem, at, 0)));
            continue;
        }
        let arg = |k: usize| vals[k].expect("operands come first");
        let v = match *step {
            Step::Input(k) => {
                let m = &plan.inputs[k];
                if m.col_stride == 0 {
                    let x = b.ins().load(F32, mem, row.in_base[k], 0);
                    V::F(splat(b, x))
                } else {
                    let at = b.ins().iadd(row.in_base[k], byte);
                    V::F(b.ins().load(ty, mem, at, 0))
                }
            }
            Step::Const(c) => {
                let x = b.ins().f32const(c);
                V::F(splat(b, x))
            }
            Step::Unary(op, a) => {
                let x = arg(a);
                let Lowering::Unary(u) = lowering(op) else { unreachable!("{op:?} is not a unary op of loop bodies") };
                match u {
                    Unary::Pass => x,
                    Unary::Not => match lanes {
                        4 => V::M(b.ins().bnot(x.f())),
                        _ => V::M(b.ins().bxor_imm(x.f(), 1)),
                    },
                    Unary::Neg => V::F(b.ins().fneg(x.f())),
                    Unary::Abs => V::F(b.ins().fabs(x.f())),
                    Unary::Sqrt => V::F(b.ins().sqrt(x.f())),
                    Unary::Relu => {
                        // The reference's `x > 0 or NaN ? x : +0` (so -0 gives +0): a compare
                        // and a blend instead of x86-64's long NaN-propagating fmax. Ordered
                        // `x <= 0` picks zero: aarch64 has no unordered-or-greater compare.
                        let z = b.ins().f32const(0.0);
                        let z = splat(b, z);
                        let zero = b.ins().fcmp(FloatCC::LessThanOrEqual, x.f(), z);
                        V::F(choose(b, zero, z, x.f(), lanes))
                    }
                    // Softmax's exponential of x - max(x) skips the overflow side.
                    Unary::Exp if plan.at_most_zero(a) => V::F(exp_nonpositive(b, x.f(), l).e),
                    Unary::Exp => V::F(exp(b, x.f(), l)),
                    Unary::Log => V::F(call(b, math["graphc_logf"], &[x.f()], lanes)),
                    Unary::Tanh => {
                        let e = decay(b, &mut decays, a, x.f(), l);
                        V::F(tanh(b, x.f(), e, l))
                    }
                    Unary::Erf => V::F(erf(b, x.f(), l)),
                    Unary::Sigmoid => {
                        let e = decay(b, &mut decays, a, x.f(), l);
                        V::F(sigmoid(b, x.f(), e, l))
                    }
                }
            }
            Step::Binary(op, a, c) => {
                let (x, y) = (arg(a).f(), arg(c).f());
                let Lowering::Binary(bin) = lowering(op) else {
                    unreachable!("{op:?} is not a binary op of loop bodies")
                };
                match bin {
                    Binary::Add => V::F(b.ins().fadd(x, y)),
                    Binary::Sub => V::F(b.ins().fsub(x, y)),
                    Binary::Mul => V::F(b.ins().fmul(x, y)),
                    Binary::Div => match row.recip.get(&c) {
                        Some(&(r1, r2)) => {
                            let r1 = splat(b, r1);
                            let p = b.ins().fmul(x, r1);
                            V::F(match r2 {
                                Some(r2) => {
                                    let r2 = splat(b, r2);
                                    b.ins().fmul(p, r2)
                                }
                                None => p,
                            })
                        }
                        None => V::F(b.ins().fdiv(x, y)),
                    },
                    Binary::Max => V::F(max_min(b, x, y, FloatCC::GreaterThan, lanes)),
                    Binary::Min => V::F(max_min(b, x, y, FloatCC::LessThan, lanes)),
                    // A square or a cube inline, as the runtime's `powf` computes it: the
                    // product in f64, converted to f32 (so the same bits, lane by lane).
                    Binary::Pow => match plan.steps[c] {
                        Step::Const(e @ (2.0 | 3.0)) => V::F(per_lane(b, x, lanes, |b, v| {
                            let w = b.ins().fpromote(types::F64, v);
                            let mut p = b.ins().fmul(w, w);
                            if e == 3.0 {
                                p = b.ins().fmul(p, w);
                            }
                            b.ins().fdemote(F32, p)
                        })),
                        _ => V::F(call(b, math["graphc_powf"], &[x, y], lanes)),
                    },
                    Binary::Compare(cc) => V::M(b.ins().fcmp(cc, x, y)),
                    Binary::And => V::M(b.ins().band(x, y)),
                    Binary::Or => V::M(b.ins().bor(x, y)),
                }
            }
            Step::Select(c, t, e) => V::F(choose(b, arg(c).f(), arg(t).f(), arg(e).f(), lanes)),
            Step::Reduce(..) => unreachable!("a reduction is read only after its own pass"),
        };
        vals[i] = Some(v);
    }
    vals.into_iter().map(|v| v.map(V::f)).collect()
}

/// A constant on every lane.
fn konst(b: &mut FunctionBuilder<'_>, c: f32, l: Lanes) -> Value {
    let x = b.ins().f32const(c);
    if l.n == 4 {
        b.ins().splat(F32X4, x)
    } else {
        x
    }
}

/// `a * x + c` (fused where the host can).
fn fused(b: &mut FunctionBuilder<'_>, a: Value, x: Value, c: Value, l: Lanes) -> Value {
    if l.fma {
        b.ins().fma(a, x, c)
    } else {
        let m = b.ins().fmul(a, x);
        b.ins().fadd(m, c)
    }
}

/// `2^n` for integer-valued lanes `n` in [-126, 127], built in the exponent bits: adding
/// 2^23 + 127 leaves n + 127 in the low mantissa bits, which a shift moves into the exponent.
fn pow2(b: &mut FunctionBuilder<'_>, n: Value, l: Lanes) -> Value {
    let (ity, fty) = if l.n == 4 { (types::I32X4, F32X4) } else { (types::I32, F32) };
    let magic = konst(b, 8_388_608.0 + 127.0, l);
    let t = b.ins().fadd(n, magic);
    let le = MemFlags::new().with_endianness(Endianness::Little);
    let bits = b.ins().bitcast(ity, le, t);
    let bits = b.ins().ishl_imm(bits, 23);
    b.ins().bitcast(fty, le, bits)
}

/// e^x: x = n ln2 + r with |r| <= ln2/2, e^r = 1 + q by a degree-6 polynomial (Cephes expf),
/// and 2^n applied as two halves so that results from the largest finite value down into the
/// denormals come out right. NaN stays NaN; the clamps give inf above 88.8 and 0 below -104.
fn exp(b: &mut FunctionBuilder<'_>, x: Value, l: Lanes) -> Value {
    // Clamp by compare and select: NaN compares false and passes through, and this is a
    // quarter of the instructions of a NaN-propagating fmin/fmax on x86-64.
    let hi = konst(b, 88.8, l);
    let above = b.ins().fcmp(FloatCC::GreaterThan, x, hi);
    let x = choose(b, above, hi, x, l.n);
    let x = clamp_below(b, x, l);
    let (q, n) = exp_reduced(b, x, l);
    scale(b, q, n, l)
}

/// x, or -104 where x is below it: e^-104 rounds to 0 in f32, as e^x does for every x below,
/// and n = -150 keeps both halves of `scale`'s 2^n within `pow2`'s range.
fn clamp_below(b: &mut FunctionBuilder<'_>, x: Value, l: Lanes) -> Value {
    let lo = konst(b, -104.0, l);
    let below = b.ins().fcmp(FloatCC::LessThan, x, lo);
    choose(b, below, lo, x, l.n)
}

/// (1 + q) 2^n for n in [-150, 128]: n = n1 + n2 with both halves in [-75, 64]; s1 (1 + q) as
/// one fused multiply-add (normal, so one rounding), then the exact scaling by s2 but where
/// the result is a denormal, which it rounds once, as libm does.
fn scale(b: &mut FunctionBuilder<'_>, q: Value, n: Value, l: Lanes) -> Value {
    let half = konst(b, 0.5, l);
    let n1 = b.ins().fmul(n, half);
    let n1 = b.ins().floor(n1);
    let n2 = b.ins().fsub(n, n1);
    let s1 = pow2(b, n1, l);
    let s2 = pow2(b, n2, l);
    let y = fused(b, s1, q, s1, l);
    b.ins().fmul(y, s2)
}

/// For e^x: (e^r - 1, n) with x = n ln2 + r, |r| <= ln2/2, n integer-valued.
fn exp_reduced(b: &mut FunctionBuilder<'_>, x: Value, l: Lanes) -> (Value, Value) {
    let log2e = konst(b, std::f32::consts::LOG2_E, l);
    let fx = b.ins().fmul(x, log2e);
    let n = b.ins().nearest(fx);
    // r = x - n ln2, ln2 split in two so that the first product is exact.
    let ln2_hi = konst(b, -0.693_359_4, l);
    let r = fused(b, n, ln2_hi, x, l);
    let ln2_lo = konst(b, 2.121_944_4e-4, l);
    let r = fused(b, n, ln2_lo, r, l);
    // The Cephes polynomial by Estrin's scheme: three independent pairs, then two steps in
    // r^2, a shorter dependency chain than Horner's six steps.
    let r2 = b.ins().fmul(r, r);
    let [c5, c4, c3, c2, c1, c0] =
        [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5].map(|c| konst(b, c, l));
    let hi = fused(b, c5, r, c4, l);
    let mid = fused(b, c3, r, c2, l);
    let lo = fused(b, c1, r, c0, l);
    let p = fused(b, hi, r2, mid, l);
    let p = fused(b, p, r2, lo, l);
    (fused(b, p, r2, r, l), n)
}

/// What sigmoid and tanh need of an exponential: `e = exp(-|x|)` and `e - 1`.
#[derive(Clone, Copy)]
struct Decay {
    e: Value,
    em1: Value,
}

/// The decay of the value of step `a`, computed once per loop body: sigmoid and tanh of one
/// value share it, and it never overflows.
fn decay(b: &mut FunctionBuilder<'_>, memo: &mut HashMap<usize, Decay>, a: usize, x: Value, l: Lanes) -> Decay {
    if let Some(&d) = memo.get(&a) {
        return d;
    }
    // -|x| by setting the sign bit: one or with the mask copysign also uses, where fabs and
    // fneg each build a mask of their own.
    let (ity, fty) = if l.n == 4 { (types::I32X4, F32X4) } else { (types::I32, F32) };
    let le = MemFlags::new().with_endianness(Endianness::Little);
    let xi = b.ins().bitcast(ity, le, x);
    let sign = sign_mask(b, l);
    let n = b.ins().bor(xi, sign);
    let n = b.ins().bitcast(fty, le, n);
    let d = exp_nonpositive(b, n, l);
    memo.insert(a, d);
    d
}

/// e^x and e^x - 1 for x <= 0 (or NaN): the range reduction, polynomial and scaling of
/// `exp` without its overflow side, so results go through the denormals to 0 as libm's do.
/// e - 1 is q itself where n = 0 (e = 1 + q); elsewhere e <= e^(-ln2/2) and e - 1 loses
/// nothing to cancellation.
fn exp_nonpositive(b: &mut FunctionBuilder<'_>, x: Value, l: Lanes) -> Decay {
    let x = clamp_below(b, x, l);
    let (q, n) = exp_reduced(b, x, l);
    let e = scale(b, q, n, l);
    let one = konst(b, 1.0, l);
    let zero = konst(b, 0.0, l);
    let em1 = b.ins().fsub(e, one);
    let whole = b.ins().fcmp(FloatCC::Equal, n, zero);
    Decay { e, em1: choose(b, whole, q, em1, l.n) }
}

/// sigmoid x from e = exp(-|x|): 1 / (1 + e) for x >= 0 and e / (1 + e) below, so that
/// neither side overflows.
fn sigmoid(b: &mut FunctionBuilder<'_>, x: Value, d: Decay, l: Lanes) -> Value {
    let one = konst(b, 1.0, l);
    let den = b.ins().fadd(one, d.e);
    let p = b.ins().fdiv(one, den);
    let q = b.ins().fmul(d.e, p);
    let zero = konst(b, 0.0, l);
    let negative = b.ins().fcmp(FloatCC::LessThan, x, zero);
    let y = choose(b, negative, q, p, l.n);
    // The reference computes 1 / (1 + e^-x), which is 0 once e^-x overflows (x below
    // -88.72283, the largest f32 whose exp is finite, negated), where e^x is still a denormal.
    let cut = konst(b, -88.722_83, l);
    let gone = b.ins().fcmp(FloatCC::LessThan, x, cut);
    choose(b, gone, zero, y, l.n)
}

/// tanh |x| = (1 - e^2) / (1 + e^2) with e = exp(-|x|); then x's sign. Within a few ulp of
/// libm's tanhf, and exactly 1 where it is (|x| above about 9.01), which `log(tanh x)` and
/// `1 - tanh x` see: below |x| = 0.55 the numerator is -(e - 1)(e + 1), which keeps small
/// |x|'s precision, above it e^2 - 1, which keeps e^2's last bits (e - 1 has rounded them
/// away: 1 - 2^-25 is a tie that goes to 1 - 2^-24).
fn tanh(b: &mut FunctionBuilder<'_>, x: Value, d: Decay, l: Lanes) -> Value {
    let one = konst(b, 1.0, l);
    let e2 = b.ins().fmul(d.e, d.e);
    let den = b.ins().fadd(one, e2);
    let two = konst(b, 2.0, l);
    let ep1 = b.ins().fadd(d.em1, two);
    let near_zero = b.ins().fmul(d.em1, ep1);
    let away = b.ins().fsub(e2, one);
    // e > exp(-0.55) exactly when |x| < 0.55; a NaN takes the second form, which keeps it.
    let small = konst(b, (-0.55f32).exp(), l);
    let is_small = b.ins().fcmp(FloatCC::GreaterThan, d.e, small);
    let num = choose(b, is_small, near_zero, away, l.n);
    // num / den = -tanh |x| <= 0; the result takes the magnitude and x's sign.
    let t = b.ins().fdiv(num, den);
    copysign(b, t, x, l)
}

/// erf x on all lanes ([`crate::lower::erf`]'s steps).
fn erf(b: &mut FunctionBuilder<'_>, x: Value, l: Lanes) -> Value {
    use crate::lower::erf::*;
    let horner = |b: &mut FunctionBuilder<'_>, c: &[f32], t: Value| {
        let mut p = konst(b, c[c.len() - 1], l);
        for &k in c[..c.len() - 1].iter().rev() {
            let k = konst(b, k, l);
            p = fused(b, p, t, k, l);
        }
        p
    };
    let a = b.ins().fabs(x);
    // |x| (2/sqrt(pi) + t P'(t)), t = x^2: the small product first, then the leading term.
    let t = b.ins().fmul(a, a);
    let tail = horner(b, &SMALL[1..], t);
    let q = b.ins().fmul(t, tail);
    let aq = b.ins().fmul(a, q);
    let lo = konst(b, SMALL_LO, l);
    let s = fused(b, a, lo, aq, l);
    let hi = konst(b, SMALL[0], l);
    let small = fused(b, a, hi, s, l);
    let mid_at = konst(b, MID_AT, l);
    let u = b.ins().fsub(a, mid_at);
    let mid = horner(b, &MID, u);
    let far_at = konst(b, FAR_AT, l);
    let v = b.ins().fsub(a, far_at);
    let far = horner(b, &FAR, v);
    let [small_end, mid_end, far_end] = [SMALL_END, MID_END, FAR_END].map(|c| konst(b, c, l));
    let is_mid = b.ins().fcmp(FloatCC::LessThan, a, mid_end);
    let r = choose(b, is_mid, mid, far, l.n);
    let is_small = b.ins().fcmp(FloatCC::LessThan, a, small_end);
    let r = choose(b, is_small, small, r, l.n);
    let one = konst(b, 1.0, l);
    let is_one = b.ins().fcmp(FloatCC::GreaterThanOrEqual, a, far_end);
    let r = choose(b, is_one, one, r, l.n);
    copysign(b, r, x, l)
}

/// |t| with the sign of x, by bit masks (fcopysign has no x86-64 vector lowering).
fn copysign(b: &mut FunctionBuilder<'_>, t: Value, x: Value, l: Lanes) -> Value {
    let (ity, fty) = if l.n == 4 { (types::I32X4, F32X4) } else { (types::I32, F32) };
    let le = MemFlags::new().with_endianness(Endianness::Little);
    let sign = sign_mask(b, l);
    let ti = b.ins().bitcast(ity, le, t);
    let xi = b.ins().bitcast(ity, le, x);
    let magnitude = b.ins().band_not(ti, sign);
    let xs = b.ins().band(xi, sign);
    let r = b.ins().bor(magnitude, xs);
    b.ins().bitcast(fty, le, r)
}

/// The f32 sign bit in each lane, as integers.
fn sign_mask(b: &mut FunctionBuilder<'_>, l: Lanes) -> Value {
    let sign = b.ins().iconst(types::I32, i64::from(i32::MIN));
    if l.n == 4 {
        b.ins().splat(types::I32X4, sign)
    } else {
        sign
    }
}

/// The reference kernels' max (`cc` GreaterThan) or min (LessThan) of x and y: y where it is
/// NaN or beats x, else x. So NaN from either side, and between equal values (+0 and -0)
/// the first, where IEEE maximum and minimum order the zeros.
fn max_min(b: &mut FunctionBuilder<'_>, x: Value, y: Value, cc: FloatCC, lanes: u8) -> Value {
    let beats = b.ins().fcmp(cc, y, x);
    let nan = b.ins().fcmp(FloatCC::Unordered, y, y);
    let take = b.ins().bor(beats, nan);
    choose(b, take, y, x, lanes)
}

/// `mask ? x : y` per lane, for a comparison's result.
fn choose(b: &mut FunctionBuilder<'_>, mask: Value, x: Value, y: Value, lanes: u8) -> Value {
    if lanes == 4 {
        let le = MemFlags::new().with_endianness(Endianness::Little);
        let m = b.ins().bitcast(F32X4, le, mask);
        b.ins().bitselect(m, x, y)
    } else {
        b.ins().select(mask, x, y)
    }
}

/// Calls a scalar math function on each lane.
fn call(b: &mut FunctionBuilder<'_>, f: cranelift_codegen::ir::FuncRef, args: &[Value], lanes: u8) -> Value {
    if lanes == 1 {
        let c = b.ins().call(f, args);
        return b.inst_results(c)[0];
    }
    let mut out = b.ins().f32const(0.0);
    out = b.ins().splat(F32X4, out);
    for lane in 0..lanes {
        let xs: Vec<Value> = args.iter().map(|&a| b.ins().extractlane(a, lane)).collect();
        let c = b.ins().call(f, &xs);
        let r = b.inst_results(c)[0];
        out = b.ins().insertlane(out, r, lane);
    }
    out
}

/// `f` of each lane of `x` (a scalar f32 to a scalar f32), or of `x` itself with one lane.
fn per_lane(
    b: &mut FunctionBuilder<'_>,
    x: Value,
    lanes: u8,
    f: impl Fn(&mut FunctionBuilder<'_>, Value) -> Value,
) -> Value {
    if lanes == 1 {
        return f(b, x);
    }
    let mut out = x;
    for lane in 0..lanes {
        let v = b.ins().extractlane(x, lane);
        let r = f(b, v);
        out = b.ins().insertlane(out, r, lane);
    }
    out
}
