//! The GPU path without a GPU: every example's GPU kernels become PTX for sm_80 and sm_90
//! that `ptxas` accepts (the one named by `GRAPHC_PTXAS`, which `tests/all.sh` fetches from
//! the `nvidia-cuda-nvcc-cu12` wheel; without it the PTX is only checked to be produced), and
//! the cuda backend on a machine without a GPU is an error that says so. On a machine with an
//! NVIDIA GPU, `GRAPHC_TEST_TIER=cuda` runs `jit.rs` and the differential fuzzer on the GPU's
//! kernels against the interpreter.
#![cfg(feature = "llvm")]

mod common;

use common::examples;
use graphc::lower::cpu::CompileOptions;
use graphc::lower::mlir::gpu_concat;
use graphc::lower::mlir::gpu_product::{self, Contraction};
use graphc::lower::mlir::gpu_reduce::{self, Reduction};
use graphc::lower::mlir::{gpu_listing, ptx::ptx};
use graphc::lower::plan::{self, KernelPlan};
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_cpu_runtime::In;
use graphc_ir::{parse_module, print_module, Module, TensorType};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::process::Command;
use std::sync::Arc;

fn optimize(m: &Module) -> Module {
    let mut out = m.clone();
    PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut out, &mut |_| {}).unwrap();
    out
}

#[test]
fn every_example_gives_ptx_that_ptxas_accepts() {
    let mut kernels = 0;
    for (name, text) in examples() {
        kernels += assemble(name.trim_end_matches(".gir"), &optimize(&parse_module(&text).unwrap()));
    }
    assert!(kernels >= 6, "only {kernels} GPU kernels over every example");
}

/// Lowers every graph's GPU kernels of `m` (optimized) to PTX for sm_80 and sm_90 and, when
/// `GRAPHC_PTXAS` names ptxas, assembles it; how many kernels (per chip).
fn assemble(what: &str, m: &Module) -> usize {
    let ptxas = std::env::var("GRAPHC_PTXAS").ok();
    if ptxas.is_none() {
        eprintln!("GRAPHC_PTXAS is not set: PTX produced but not assembled (tests/all.sh sets it)");
    }
    // Tests assemble concurrently, and an example may share a name with a test's module.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("graphc-ptx-{}-{call}-{what}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kernels = 0;
    for g in &m.graphs {
        for chip in ["sm_80", "sm_90"] {
            let (text, ks, _) = gpu_listing(m, &g.name, chip).unwrap();
            if ks.is_empty() {
                continue;
            }
            kernels += ks.len();
            let code = ptx(&text).unwrap_or_else(|e| panic!("{what} @{}: {e}", g.name));
            assert!(code.contains(&format!(".target {chip}")), "{what} @{}: PTX for another target", g.name);
            assert!(!code.contains('\0'), "{what} @{}: a NUL byte in the PTX", g.name);
            for k in &ks {
                assert!(code.contains(&format!(".entry {}", k.name)), "{what}: no entry {}", k.name);
            }
            let Some(ptxas) = &ptxas else { continue };
            let file = dir.join(format!("{}_{chip}.ptx", g.name));
            std::fs::write(&file, &code).unwrap();
            let out = Command::new(ptxas)
                .arg(format!("-arch={chip}"))
                .arg(&file)
                .arg("-o")
                .arg(file.with_extension("cubin"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{what} @{} {chip}: ptxas: {}", g.name, String::from_utf8_lossy(&out.stderr));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    kernels / 2
}

#[test]
fn the_cuda_backend_without_a_gpu_says_why() {
    if graphc_cuda_runtime::available().is_ok() {
        eprintln!("a GPU is present: nothing to check here");
        return;
    }
    let out = common::graphc(&["run", &common::example("fused.gir"), "--backend", "cuda"]);
    let (stdout, stderr) = common::text(&out);
    assert!(stderr.contains("CUDA") || stderr.contains("cuda"), "{stderr}");
    // It falls back to the interpreter, as for any backend that cannot compile here.
    assert!(out.status.success() && stdout.contains("probs"), "{stdout}\n{stderr}");
}

/// The tiled product kernel's CPU twin (`gpu_product.rs`: the same phases, a block's threads
/// one after another between the barriers) run by a session in place of a product's kernel.
#[derive(Debug)]
struct Twin {
    entry: graphc_cpu_runtime::Entry,
    /// Per operand: its type, and whether it is expanded to `out` first.
    types: Vec<(TensorType, bool)>,
    out: TensorType,
    results: Vec<TensorType>,
}

impl graphc_runtime::Kernel for Twin {
    fn run(&self, operands: &mut graphc_runtime::Operands<'_>) -> Result<Vec<Tensor>, String> {
        let all = operands.all();
        assert_eq!(all.len(), self.types.len());
        let host = all
            .iter()
            .zip(&self.types)
            .map(|(t, (ty, expand))| {
                assert_eq!(t.ty(), *ty, "an operand of another type than the kernel's");
                t.f32_elements(expand.then_some(&self.out))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ins: Vec<In> = host.iter().map(|h| In::Slice(h)).collect();
        // Results start as NaNs (the entry clears them, keeping the memory): an element the
        // kernel does not write shows.
        let mut outs: Vec<Vec<f32>> = self.entry.extents().outs.iter().map(|&n| vec![f32::NAN; n]).collect();
        let rows = self.entry.extents().rows;
        // Scratch (the product, when an epilogue reads it) starts as NaNs: a read before the
        // write shows.
        self.entry.run(&ins, &mut outs, &[(0, rows)], |len, f| f(&mut vec![f32::NAN; len]))?;
        outs.into_iter().zip(&self.results).map(|(v, ty)| Tensor::from_f32(v, ty)).collect()
    }
}

/// `m` (optimized) with the CPU twin of the GPU's kernel in place of every matrix product,
/// convolution, pool and column reduction the GPU runs; how many.
fn with_twins(m: &Module) -> (Arc<graphc::lower::cpu::CpuKernels>, usize) {
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap();
    let mut text = String::from("module {\n");
    let (mut names, mut twins) = (Vec::new(), Vec::new());
    for (i, k) in plan::kernels(m).into_iter().enumerate() {
        let name = format!("twin_{i}");
        let g = m.graph(&k.graph).unwrap();
        let contraction = match &k.plan {
            KernelPlan::MatMul(p) => Some(Contraction::MatMul(p.clone())),
            KernelPlan::Conv(p) => Some(Contraction::Conv(p.clone())),
            _ => None,
        };
        let reduction = match &k.plan {
            KernelPlan::Pool(p) => Some(Reduction::Pool(p.clone())),
            KernelPlan::Columns(p) => Some(Reduction::Columns(p.clone())),
            _ => None,
        };
        if let Some(p) = contraction {
            let operands: Vec<TensorType> =
                g.nodes[k.node].operands.iter().map(|&v| g.values[v].ty.as_tensor().unwrap().clone()).collect();
            let Ok(types) = gpu_product::operand_types(&p, &operands) else { continue };
            text.push_str(&gpu_product::cpu_twin(&p, types.len(), &name).unwrap());
            names.push((name, gpu_product::extents(&p, types.len())));
            let (out, results) = gpu_product::result_types(&p);
            twins.push((k.graph.clone(), k.node, types, out, results));
        } else if let KernelPlan::Concat(p) = &k.plan {
            text.push_str(&gpu_concat::cpu_twin(p, &name));
            names.push((name, gpu_concat::extents(p)));
            let types = p.inputs.iter().map(|t| (t.clone(), false)).collect();
            twins.push((k.graph.clone(), k.node, types, p.out.clone(), vec![p.out.clone()]));
        } else if let Some(r) = reduction {
            let Ok(twin) = gpu_reduce::cpu_twin(&r, &name) else { continue };
            text.push_str(&twin);
            names.push((name, gpu_reduce::extents(&r)));
            let out = r.out().clone();
            twins.push((k.graph.clone(), k.node, vec![(r.input().clone(), false)], out.clone(), vec![out]));
        }
    }
    text.push_str("}\n");
    let count = twins.len();
    if count == 0 {
        return (kernels, 0);
    }
    let entries = graphc::lower::mlir::jit::compile(&text, &names).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (entry, (graph, node, types, out, results)) in entries.into_iter().zip(twins) {
        kernels.table().replace(&graph, node, Arc::new(Twin { entry, types, out, results }));
    }
    (kernels, count)
}

/// Runs `m` (optimized) with the CPU twins of its GPU kernels, of which there must be `twins`,
/// exactly against the interpreter, and assembles its GPU module, which must hold `kernels`
/// kernels (per chip).
fn check_twins(m: &Module, what: &str, twins: usize, kernels: usize) {
    let (compiled, count) = with_twins(m);
    assert_eq!(count, twins, "{what}: GPU kernels with twins in {}", print_module(m));
    assert_exact_against_interpreter(m, compiled);
    assert_eq!(assemble(what, m), kernels, "{what}: GPU kernels");
}

/// Small integers as f32, seeded: products and sums of them are exact in any order, so the
/// twin's results must be the interpreter's bit for bit.
fn small_integers(ty: &TensorType, seed: u64) -> Tensor {
    let n: u64 = ty.shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 9) as f32 - 4.0
        })
        .collect();
    Tensor::from_f32(v, ty).unwrap()
}

/// Runs every graph of `m` on the interpreter and with `kernels`, on small-integer inputs;
/// the results must be equal exactly.
fn assert_exact_against_interpreter(m: &Module, kernels: Arc<graphc::lower::cpu::CpuKernels>) {
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let twin = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    for (gi, g) in m.graphs.iter().enumerate() {
        let mut req = RunRequest::new(g.name.as_str());
        for (i, &v) in g.inputs().iter().enumerate() {
            let ty = g.values[v].ty.as_tensor().unwrap();
            req = req.feed(g.values[v].name.clone().unwrap(), small_integers(ty, (gi * 31 + i) as u64 + 1));
        }
        let want = interp.run(req.clone()).unwrap();
        let got = twin.run(req).unwrap_or_else(|e| panic!("@{}: {e}", g.name));
        for (k, (w, t)) in want.values.iter().zip(&got.values).enumerate() {
            let (w, t) = (w.as_tensor().unwrap(), t.as_tensor().unwrap());
            assert_eq!(w.ty(), t.ty(), "@{} result {k}", g.name);
            let (w, t) = (w.to_f64_vec(), t.to_f64_vec());
            if let Some(i) = (0..w.len()).find(|&i| w[i].to_bits() != t[i].to_bits()) {
                panic!("@{} result {k} element {i}: interpreter {}, tiled kernel {}", g.name, w[i], t[i]);
            }
        }
    }
}

#[test]
fn the_tiled_product_kernel_computes_every_size_and_layout_exactly() {
    // Sizes below, at and past a tile's edges (64 rows and columns, 16 deep), each factor
    // stored as written or transposed: every combination.
    let mut text = String::new();
    let mut graphs = 0;
    for m in [1, 63, 64, 65, 130] {
        for n in [1, 64, 65, 129] {
            for k in [1, 16, 17, 40] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    let a = if ta { [k, m] } else { [m, k] };
                    let b = if tb { [n, k] } else { [k, n] };
                    text.push_str(&format!(
                        "graph @p{graphs}(%a: f32[{},{}], %b: f32[{},{}]) -> (c: f32[{m},{n}]) {{\n  %c = matmul %a, %b {{transpose_a = {ta}, transpose_b = {tb}}} : f32[{m},{n}]\n  return %c\n}}\n",
                        a[0], a[1], b[0], b[1]
                    ));
                    graphs += 1;
                }
            }
        }
    }
    let m = optimize(&parse_module(&text).unwrap());
    // Every product has a GPU kernel.
    check_twins(&m, "products", graphs, graphs);
}

#[test]
fn the_tiled_product_kernel_runs_its_elementwise_epilogue() {
    let text = "graph @bias_relu(%x: f32[70,33], %w: f32[33,65], %b: f32[65]) -> (y: f32[70,65]) {
  %h = matmul %x, %w : f32[70,65]
  %hb = add %h, %b : f32[70,65]
  %y = relu %hb : f32[70,65]
  return %y
}
graph @per_row(%x: f32[70,33], %w: f32[65,33], %r: f32[70,1]) -> (y: f32[70,65]) {
  %h = matmul %x, %w {transpose_b = true} : f32[70,65]
  %y = sub %h, %r : f32[70,65]
  return %y
}
graph @shared_operand(%x: f32[65,65], %w: f32[65,65]) -> (y: f32[65,65]) {
  %h = matmul %x, %w {transpose_a = true} : f32[65,65]
  %y = max %h, %x : f32[65,65]
  return %y
}
graph @root(%x: f32[9,40], %w: f32[40,70]) -> (y: f32[9,70]) {
  %h = matmul %x, %w : f32[9,70]
  %a = abs %h : f32[9,70]
  %y = sqrt %a : f32[9,70]
  return %y
}
graph @row_max(%x: f32[8,20], %w: f32[20,10]) -> (y: f32[8,10]) {
  %h = matmul %x, %w : f32[8,10]
  %mx = reduce_max %h {axes = [-1], keep_dims = true} : f32[8,1]
  %y = sub %h, %mx : f32[8,10]
  return %y
}
";
    let m = optimize(&parse_module(text).unwrap());
    let epilogues =
        plan::kernels(&m).iter().filter(|k| matches!(&k.plan, KernelPlan::MatMul(p) if p.epilogue.is_some())).count();
    assert_eq!(epilogues, 4, "the products head fusions: {}", print_module(&m));
    // The five products, and the row reduction after one of them.
    check_twins(&m, "epilogues", 5, 6);
}

/// A `conv` graph named `name`: `n` images of `c` channels `h` x `w` by `m` filters of
/// `kh` x `kw` in `group` groups, with strides, pads (tops and lefts, then bottoms and rights)
/// and dilations; `None` when no window fits.
#[allow(clippy::too_many_arguments)]
fn conv_graph(
    name: &str,
    [n, c, h, w]: [u64; 4],
    [m, kh, kw]: [u64; 3],
    group: u64,
    strides: [u64; 2],
    pads: [u64; 4],
    dilations: [u64; 2],
    epilogue: &str,
) -> Option<String> {
    let size = |x: u64, k: u64, a: usize| {
        let span = dilations[a] * (k - 1) + 1;
        let padded = x + pads[a] + pads[a + 2];
        (padded >= span).then(|| (padded - span) / strides[a] + 1)
    };
    let (oh, ow) = (size(h, kh, 0)?, size(w, kw, 1)?);
    let out = format!("f32[{n},{m},{oh},{ow}]");
    let (extra, body, ret) = match epilogue {
        "" => (String::new(), String::new(), "%y"),
        "bias_relu" => {
            (format!(", %b: f32[1,{m},1,1]"), format!("  %yb = add %y, %b : {out}\n  %z = relu %yb : {out}\n"), "%z")
        }
        "residual" => (format!(", %r: {out}"), format!("  %z = mul %y, %r : {out}\n"), "%z"),
        _ => unreachable!(),
    };
    Some(format!(
        "graph @{name}(%x: f32[{n},{c},{h},{w}], %k: f32[{m},{},{kh},{kw}]{extra}) -> (y: {out}) {{\n  %y = conv %x, %k {{strides = [{}, {}], pads = [{}, {}, {}, {}], dilations = [{}, {}], group = {group}}} : {out}\n{body}  return {ret}\n}}\n",
        c / group,
        strides[0],
        strides[1],
        pads[0],
        pads[1],
        pads[2],
        pads[3],
        dilations[0],
        dilations[1],
    ))
}

#[test]
fn the_tiled_convolution_kernel_computes_every_geometry_exactly() {
    // Images, channels and filters in groups (depthwise too), filters past a tile's 64 rows,
    // depths (channels by taps) past its 16, output planes past its 64 columns; windows of
    // 1x1 and wider, strided, padded unevenly and dilated: every combination that fits.
    let mut text = String::new();
    let mut graphs = 0;
    for (images, channels, filters, group) in [(1, 3, 5, 1), (2, 4, 70, 1), (1, 6, 9, 3), (2, 4, 4, 4), (1, 16, 66, 2)]
    {
        for (kh, kw) in [(1, 1), (3, 3), (2, 3)] {
            for (strides, pads, dilations) in [
                ([1, 1], [0; 4], [1, 1]),
                ([1, 1], [1; 4], [1, 1]),
                ([2, 1], [1, 0, 2, 1], [1, 1]),
                ([1, 2], [2; 4], [2, 2]),
            ] {
                let (h, w) = if graphs % 5 == 4 { (1, 2) } else { (11, 13) };
                let shape = [images, channels, h, w];
                let name = format!("c{graphs}");
                if let Some(g) = conv_graph(&name, shape, [filters, kh, kw], group, strides, pads, dilations, "") {
                    text.push_str(&g);
                    graphs += 1;
                }
            }
        }
    }
    assert!(graphs >= 50, "{graphs} convolutions");
    let m = optimize(&parse_module(&text).unwrap());
    // Every convolution has a GPU kernel.
    check_twins(&m, "convolutions", graphs, graphs);
}

#[test]
fn the_tiled_convolution_kernel_runs_its_elementwise_epilogue() {
    let cases = [
        // A per-filter bias and relu over 70 filters (two tiles of rows) in 2 groups.
        ("bias_relu", [2, 4, 9, 10], [70, 3, 3], 2, [1, 1], [1; 4], "bias_relu"),
        // A tensor of the result's shape, strided.
        ("residual", [1, 3, 12, 9], [8, 3, 2], 1, [2, 1], [0, 1, 0, 1], "residual"),
        // One output row per plane: the epilogue's rows are the products' rows.
        ("one_row", [2, 5, 3, 70], [6, 3, 3], 1, [1, 1], [0; 4], "bias_relu"),
    ];
    let mut text = String::new();
    for (name, shape, filters, group, strides, pads, epilogue) in cases {
        text.push_str(&conv_graph(name, shape, filters, group, strides, pads, [1, 1], epilogue).unwrap());
    }
    let m = optimize(&parse_module(&text).unwrap());
    let epilogues =
        plan::kernels(&m).iter().filter(|k| matches!(&k.plan, KernelPlan::Conv(p) if p.epilogue.is_some())).count();
    assert_eq!(epilogues, 3, "the convolutions head fusions: {}", print_module(&m));
    check_twins(&m, "conv_epilogues", 3, 3);
}

/// A 1-D `conv` graph named `name`: `n` images of `c` channels of length `l` by `m` filters
/// of `k` taps in `group` groups, with a stride, pads (before, after), a dilation and an
/// epilogue (`""` or `"bias_relu"`); `None` when no window fits.
#[allow(clippy::too_many_arguments)]
fn conv1d_graph(
    name: &str,
    [n, c, l]: [u64; 3],
    [m, k]: [u64; 2],
    group: u64,
    stride: u64,
    pads: [u64; 2],
    dilation: u64,
    epilogue: &str,
) -> Option<String> {
    let span = dilation * (k - 1) + 1;
    let padded = l + pads[0] + pads[1];
    let ol = (padded >= span).then(|| (padded - span) / stride + 1)?;
    let out = format!("f32[{n},{m},{ol}]");
    let (extra, body, ret) = match epilogue {
        "" => (String::new(), String::new(), "%y"),
        "bias_relu" => {
            (format!(", %b: f32[1,{m},1]"), format!("  %yb = add %y, %b : {out}\n  %z = relu %yb : {out}\n"), "%z")
        }
        _ => unreachable!(),
    };
    Some(format!(
        "graph @{name}(%x: f32[{n},{c},{l}], %k: f32[{m},{},{k}]{extra}) -> (y: {out}) {{\n  %y = conv %x, %k {{strides = [{stride}], pads = [{}, {}], dilations = [{dilation}], group = {group}}} : {out}\n{body}  return {ret}\n}}\n",
        c / group,
        pads[0],
        pads[1],
    ))
}

#[test]
fn the_tiled_convolution_kernel_computes_1d_geometries_exactly() {
    // 1-D convolutions (the 2-D kernel's height-1 case): channels and filters in groups
    // (depthwise too), filters past a tile's 64 rows, outputs past its 64 columns; windows of
    // 1 and 3 taps, strided, padded unevenly and dilated; alone and with bias and relu.
    let mut text = String::new();
    let mut graphs = 0;
    for (images, channels, filters, group) in [(1, 3, 5, 1), (2, 4, 70, 1), (1, 6, 9, 3), (2, 4, 4, 4)] {
        for k in [1, 3] {
            for (stride, pads, dilation) in [(1, [0, 0], 1), (1, [1, 1], 1), (2, [1, 2], 1), (3, [2, 0], 2)] {
                for epilogue in ["", "bias_relu"] {
                    let l = if graphs % 5 == 4 { 2 } else { 67 };
                    let name = format!("d{graphs}");
                    let shape = [images, channels, l];
                    if let Some(g) = conv1d_graph(&name, shape, [filters, k], group, stride, pads, dilation, epilogue) {
                        text.push_str(&g);
                        graphs += 1;
                    }
                }
            }
        }
    }
    assert!(graphs >= 50, "{graphs} convolutions");
    let m = optimize(&parse_module(&text).unwrap());
    let convs = plan::kernels(&m).iter().filter(|k| matches!(&k.plan, KernelPlan::Conv(_))).count();
    assert_eq!(convs, graphs, "every 1-D convolution is a kernel: {}", print_module(&m));
    // Every convolution has a GPU kernel, its epilogue in it.
    check_twins(&m, "1-D convolutions", graphs, graphs);
}

#[test]
fn the_pool_kernel_computes_every_1d_window_exactly() {
    // 1-D max and average pools (the 2-D kernel's height-1 case): windows of 1 and wider than
    // the input, strided, padded unevenly, dilated, rounded up, counting the padding or not.
    let mut text = String::new();
    let mut graphs = 0;
    // Kernel, stride, pads, dilation, ceil_mode.
    let windows =
        [(1, 1, [0, 0], 1, false), (3, 2, [1, 1], 1, false), (2, 3, [0, 2], 2, true), (11, 4, [1, 0], 1, true)];
    for op in ["max_pool", "avg_pool"] {
        for (kernel, stride, pads, dilation, ceil_mode) in windows {
            for include_pad in [false, true] {
                if op == "max_pool" && include_pad {
                    continue;
                }
                let [n, c, l] = [2u64, 3, 10];
                let span = dilation * (kernel - 1) + 1;
                let room = l + pads[0] + pads[1] - span;
                let mut o = if ceil_mode { room.div_ceil(stride) } else { room / stride } + 1;
                if ceil_mode && (o - 1) * stride >= l + pads[0] {
                    o -= 1;
                }
                let extra =
                    if op == "avg_pool" { format!(", count_include_pad = {include_pad}") } else { String::new() };
                text.push_str(&format!(
                    "graph @{op}_{graphs}(%x: f32[{n},{c},{l}]) -> (y: f32[{n},{c},{o}]) {{\n  %y = {op} %x {{kernel = [{kernel}], strides = [{stride}], pads = [{}, {}], dilations = [{dilation}], ceil_mode = {ceil_mode}{extra}}} : f32[{n},{c},{o}]\n  return %y\n}}\n",
                    pads[0], pads[1]
                ));
                graphs += 1;
            }
        }
    }
    let m = optimize(&parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}")));
    check_twins(&m, "1-D pools", graphs, graphs);
}

#[test]
fn the_pool_and_column_kernels_compute_every_window_exactly() {
    // Max and average pools: windows of 1x1 and wider (wider than the input too), strided,
    // padded unevenly and dilated, rounded up, counting the padding or not; and column sums
    // and means over one and several leading axes and over middle ones.
    let mut text = String::new();
    let mut graphs = 0;
    // Name, kernel, strides, pads, dilations, ceil_mode.
    type Window = (&'static str, [u64; 2], [u64; 2], [u64; 4], [u64; 2], bool);
    let windows: [Window; 7] = [
        ("unit", [1, 1], [1, 1], [0; 4], [1, 1], false),
        ("square", [2, 2], [2, 2], [0; 4], [1, 1], false),
        ("padded", [3, 3], [2, 2], [1; 4], [1, 1], false),
        ("uneven", [2, 3], [1, 2], [0, 1, 2, 0], [1, 1], true),
        ("dilated", [3, 2], [2, 1], [2, 1, 1, 2], [2, 3], true),
        ("wide", [9, 12], [3, 4], [1, 0, 0, 1], [1, 1], false),
        ("beyond", [2, 2], [5, 5], [3, 3, 3, 3], [1, 1], true),
    ];
    for op in ["max_pool", "avg_pool"] {
        for (name, kernel, strides, pads, dilations, ceil_mode) in windows {
            for include_pad in [false, true] {
                if op == "max_pool" && include_pad {
                    continue;
                }
                let extra =
                    if op == "avg_pool" { format!(", count_include_pad = {include_pad}") } else { String::new() };
                let attrs = format!(
                    "kernel = [{}, {}], strides = [{}, {}], pads = [{}, {}, {}, {}], dilations = [{}, {}], ceil_mode = {ceil_mode}{extra}",
                    kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1], pads[2], pads[3], dilations[0], dilations[1]
                );
                let [n, c, h, w] = [2u64, 3, 7, 10];
                let size = |x: u64, a: usize| {
                    let span = dilations[a] * (kernel[a] - 1) + 1;
                    let room = (x + pads[a] + pads[a + 2]).checked_sub(span)?;
                    let mut o = if ceil_mode { room.div_ceil(strides[a]) } else { room / strides[a] } + 1;
                    // A last window must start inside the input or its leading padding.
                    if ceil_mode && (o - 1) * strides[a] >= x + pads[a] {
                        o -= 1;
                    }
                    Some(o)
                };
                let (Some(oh), Some(ow)) = (size(h, 0), size(w, 1)) else { continue };
                text.push_str(&format!(
                    "graph @{op}_{name}_{include_pad}(%x: f32[{n},{c},{h},{w}]) -> (y: f32[{n},{c},{oh},{ow}]) {{\n  %y = {op} %x {{{attrs}}} : f32[{n},{c},{oh},{ow}]\n  return %y\n}}\n"
                ));
                graphs += 1;
            }
        }
    }
    for (op, shape, axes, out) in [
        ("reduce_sum", "70,257", "0", "257"),
        ("reduce_mean", "9,300", "0", "300"),
        ("reduce_sum", "3,5,280", "0, 1", "280"),
        ("reduce_mean", "2,16,16", "0", "16,16"),
        // Middle blocks: a batch of column reductions.
        ("reduce_sum", "3,7,100", "1", "3,100"),
        ("reduce_mean", "2,5,3,140", "1, 2", "2,140"),
    ] {
        text.push_str(&format!(
            "graph @{op}_{graphs}(%x: f32[{shape}]) -> (y: f32[{out}]) {{\n  %y = {op} %x {{axes = [{axes}]}} : f32[{out}]\n  return %y\n}}\n"
        ));
        graphs += 1;
    }
    // NaNs where the input is 0 (0 / 0): a maximum that meets one is NaN, as is a mean.
    for op in ["max_pool", "avg_pool"] {
        text.push_str(&format!(
            "graph @{op}_nan(%x: f32[1,2,6,6]) -> (y: f32[1,2,3,3]) {{\n  %q = div %x, %x : f32[1,2,6,6]\n  %y = {op} %q {{kernel = [2, 2], strides = [2, 2]}} : f32[1,2,3,3]\n  return %y\n}}\n"
        ));
        graphs += 1;
    }
    let m = optimize(&parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}")));
    // Every pool and column reduction has a GPU kernel, and so do the two divisions.
    check_twins(&m, "reductions", graphs, graphs + 2);
    // Too few columns for a thread each to keep a GPU busy: the CPU's.
    let few =
        "graph @few(%x: f32[4096,8]) -> (y: f32[8]) {\n  %y = reduce_sum %x {axes = [0]} : f32[8]\n  return %y\n}\n";
    let m = parse_module(few).unwrap();
    let (_, ks, kept) = gpu_listing(&m, "few", "sm_90").unwrap();
    assert!(ks.is_empty() && kept[0].contains("8 columns"), "{kept:?}");
}

#[test]
fn three_d_and_transposed_convolutions_and_three_d_pools_stay_off_the_gpu() {
    // The GPU's kernels index two spatial dims (ConvGeometry::planar, PoolPlan::planar): a
    // 3-D convolution or pool, and a transposed convolution of any rank (bias fused or not),
    // are refused with a reason, not given a kernel that would read them wrongly.
    let text = "graph @g(%x: f32[1,4,3,6,6], %w: f32[8,4,3,3,3], %dy: f32[1,8,5,5], %dz: f32[1,8,5,5], %wt: f32[8,4,3,3], %b: f32[1,4,1,1]) -> (a: f32[1,8,3,6,6], p: f32[1,4,2,3,3], t: f32[1,4,7,7], u: f32[1,4,7,7]) {
  %a = conv %x, %w {pads = [1, 1, 1, 1, 1, 1]} : f32[1,8,3,6,6]
  %p = max_pool %x {kernel = [2, 2, 2], strides = [2, 2, 2], ceil_mode = true} : f32[1,4,2,3,3]
  %t = conv_input_grad %dy, %wt {shape = [1, 4, 7, 7]} : f32[1,4,7,7]
  %c = conv_input_grad %dz, %wt {shape = [1, 4, 7, 7]} : f32[1,4,7,7]
  %u = add %c, %b : f32[1,4,7,7]
  return %a, %p, %t, %u
}
";
    let m = optimize(&parse_module(text).unwrap());
    let convs = plan::kernels(&m).iter().filter(|k| matches!(k.plan, KernelPlan::Conv(_))).count();
    assert_eq!(convs, 3, "the CPU compiles them");
    let (_, ks, kept) = gpu_listing(&m, "g", "sm_90").unwrap();
    assert!(ks.is_empty(), "{ks:?}");
    assert_eq!(kept.iter().filter(|k| k.contains("only 2-D and 1-D forward convolutions")).count(), 3, "{kept:?}");
    assert_eq!(kept.iter().filter(|k| k.contains("only 2-D and 1-D pools")).count(), 1, "{kept:?}");
    // Nor do the CPU twins of the GPU's kernels take them.
    let (_, twins) = with_twins(&m);
    assert_eq!(twins, 0);
}

#[test]
fn only_kernels_placed_on_a_gpu_or_nowhere_are_for_the_gpu() {
    let text = "graph @g(%x: f32[8,16], %w: f32[16,4], %p: bool[]) -> (a: f32[8,4], b: f32[8,4], c: f32[8,4], d: f32[8,4], e: f32[8,4]) {
  %a = matmul %x, %w device \"/job:localhost/replica:0/task:0/device:cpu:0\" : f32[8,4]
  %b = matmul %x, %w device \"/device:gpu:0\" : f32[8,4]
  %c = matmul %x, %w : f32[8,4]
  %d = cond %p, %x, %w device \"/device:cpu:0\" : f32[8,4]
    then(%x1: f32[8,16], %w1: f32[16,4]) {
      %m1 = matmul %x1, %w1 : f32[8,4]
      yield %m1
    }
    else(%x2: f32[8,16], %w2: f32[16,4]) {
      %m2 = matmul %x2, %w2 device \"/device:gpu:0\" : f32[8,4]
      yield %m2
    }
  %e = cond %p, %x, %w device \"/device:gpu:0\" : f32[8,4]
    then(%x3: f32[8,16], %w3: f32[16,4]) {
      %m3 = matmul %x3, %w3 : f32[8,4]
      yield %m3
    }
    else(%x4: f32[8,16], %w4: f32[16,4]) {
      %m4 = matmul %x4, %w4 device \"/device:cpu:0\" : f32[8,4]
      yield %m4
    }
  return %a, %b, %c, %d, %e
}
";
    let m = parse_module(text).unwrap();
    let g = &m.graphs[0];
    let on = |name: &str| {
        let n = g
            .walk()
            .into_iter()
            .find(|&n| g.nodes[n].results.first().is_some_and(|&v| g.values[v].name.as_deref() == Some(name)));
        graphc::lower::mlir::cuda::for_the_gpu(g, n.unwrap())
    };
    let placed: Vec<bool> = ["a", "b", "c", "m1", "m2", "m3", "m4"].iter().map(|n| on(n)).collect();
    assert_eq!(placed, [false, true, true, false, true, true, false]);
}

#[test]
fn a_cuda_run_measures_on_the_gpu_what_the_gpu_runs() {
    // What a profile of a `--backend cuda` run records as the GPU's times.
    let text = "graph @g(%x: f32[8,16], %w: f32[16,4]) -> (a: f32[8,4], b: f32[8,4], c: f32[8,4], j: i32[8,16]) {
  %a = matmul %x, %w device \"/device:cpu:0\" : f32[8,4]
  %b = matmul %x, %w device \"/device:gpu:0\" : f32[8,4]
  %c = matmul %x, %w : f32[8,4]
  %j = cast %x {to = i32} : i32[8,16]
  return %a, %b, %c, %j
}
";
    let m = parse_module(text).unwrap();
    let g = &m.graphs[0];
    let cuda = graphc::backend::backend("cuda").unwrap();
    let kinds: Vec<&str> = g.regions[g.body].nodes.iter().map(|&n| cuda.runs_on(g, n).name()).collect();
    assert_eq!(kinds, ["cpu", "gpu", "gpu", "cpu"]);
    let jit = graphc::backend::backend("jit").unwrap();
    assert!(g.regions[g.body].nodes.iter().all(|&n| jit.runs_on(g, n) == graphc_ir::DeviceKind::Cpu));
}

#[test]
fn the_cuda_backend_keeps_the_tensors_of_gpu_and_unplaced_graphs_on_the_gpu() {
    use graphc::backend::Compiled;
    use graphc_ir::DeviceSpec;
    let cuda = graphc::backend::backend("cuda").unwrap();
    let compiled = Compiled { kernels: Some(Arc::new(graphc_runtime::KernelTable::new())), ..Compiled::default() };
    let spec = |s: &str| DeviceSpec::parse(s).unwrap();
    // The executor's residency is what tells a device executor from the default interpreter.
    let resident =
        |d: Option<&DeviceSpec>| cuda.executor(d, &compiled).map(|e| format!("{e:?}").contains("residency: Some"));
    assert_eq!(resident(Some(&spec("/device:gpu:0"))), Some(true));
    assert_eq!(resident(None), Some(true));
    assert_eq!(resident(Some(&spec("/job:worker/task:0"))), Some(true));
    assert_eq!(resident(Some(&spec("/device:cpu:0"))), None);
    // Nothing compiled (no GPU here): no executor of its own.
    assert!(cuda.executor(Some(&spec("/device:gpu:0")), &Compiled::default()).is_none());
    let jit = graphc::backend::backend("jit").unwrap();
    assert!(jit.executor(Some(&spec("/device:gpu:0")), &compiled).is_none());
}

#[test]
fn the_concat_kernel_copies_every_layout_exactly() {
    // Along every axis, of two to four operands of different widths along it (one of them
    // empty), and the same operand twice; NaNs (0 / 0) and negative zeros copied bit for bit.
    let mut text = String::new();
    let mut graphs = 0;
    let cases: [(&str, &[&str], usize); 7] = [
        ("f32[3,5,7]", &["f32[2,5,7]", "f32[1,5,7]"], 0),
        ("f32[3,9,7]", &["f32[3,2,7]", "f32[3,0,7]", "f32[3,4,7]", "f32[3,3,7]"], 1),
        ("f32[3,5,12]", &["f32[3,5,5]", "f32[3,5,7]"], 2),
        ("f32[300,3]", &["f32[300,1]", "f32[300,2]"], 1),
        ("f32[1,70,9]", &["f32[1,64,9]", "f32[1,6,9]"], 1),
        ("f32[4,514]", &["f32[4,257]", "f32[4,257]"], 1),
        ("f32[6]", &["f32[1]", "f32[2]", "f32[3]"], 0),
    ];
    for (out, ins, axis) in cases {
        let params: Vec<String> = ins.iter().enumerate().map(|(i, t)| format!("%x{i}: {t}")).collect();
        let names: Vec<String> = (0..ins.len()).map(|i| format!("%x{i}")).collect();
        text.push_str(&format!(
            "graph @c{graphs}({}) -> (y: {out}) {{\n  %y = concat {} {{axis = {axis}}} : {out}\n  return %y\n}}\n",
            params.join(", "),
            names.join(", ")
        ));
        graphs += 1;
    }
    text.push_str(
        "graph @twice(%a: f32[5,3]) -> (y: f32[5,6]) {\n  %y = concat %a, %a {axis = 1} : f32[5,6]\n  return %y\n}\n",
    );
    text.push_str("graph @nan(%a: f32[8,300], %b: f32[8,300]) -> (y: f32[8,600]) {\n  %z = div %a, %b : f32[8,300]\n  %n = neg %b : f32[8,300]\n  %m = mul %n, %a : f32[8,300]\n  %y = concat %z, %m {axis = 1} : f32[8,600]\n  return %y\n}\n");
    graphs += 2;
    let m = parse_module(&text).unwrap();
    // The module as written, so the concats stay concats; @nan's div, neg and mul are a
    // kernel each.
    check_twins(&m, "concats", graphs, graphs + 3);
}

#[test]
fn the_cpu_backends_kernels_pass_a_device_kernel_on() {
    // The cuda backend's executor asks its compiled kernels (the CPU backend's table, with
    // the GPU's kernels in it) for each node's device kernel: the table's wrapper must
    // forward the question, or every GPU kernel would copy in and out.
    #[derive(Debug)]
    struct OnDevice;
    impl graphc_runtime::Kernel for OnDevice {
        fn run(&self, _: &mut graphc_runtime::Operands<'_>) -> Result<Vec<Tensor>, String> {
            Err("not run here".into())
        }
        fn on_device(self: Arc<Self>) -> Option<Arc<dyn graphc_runtime::DeviceKernel>> {
            Some(self)
        }
    }
    impl graphc_runtime::DeviceKernel for OnDevice {
        fn run(
            &self,
            _: &[Arc<dyn graphc_runtime::DeviceTensor>],
        ) -> Result<Vec<Arc<dyn graphc_runtime::DeviceTensor>>, String> {
            Err("not run here".into())
        }
    }
    let m = parse_module("graph @g(%x: f32[4]) -> (y: f32[4]) {\n  %y = relu %x : f32[4]\n  return %y\n}\n").unwrap();
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let g = &m.graphs[0];
    let n = g.regions[g.body].nodes[0];
    use graphc_runtime::CompiledKernels;
    assert!(kernels.device_kernel("g", n).is_none(), "a CPU kernel has no device kernel");
    kernels.table().replace("g", n, Arc::new(OnDevice));
    assert!(kernels.device_kernel("g", n).is_some());
}
