//! Compiled convolutions in three spatial dims, transposed convolutions (`conv_input_grad`,
//! ONNX's ConvTranspose) in one to three, and pools in three, against the reference kernels:
//! random geometries (odd sizes, groups, depthwise, strides past the window, dilations,
//! padding, trailing positions no window reaches: ConvTranspose's output_padding), alone and
//! fused with a bias and relu; infinities and NaNs where they must come out exactly (NaN
//! positions, the infinities' signs); the plans are taken (the nodes run on the compiled
//! kernels).

mod common;

use common::close::{assert_close_within, Bound};
use graphc::lower::cpu::CompileOptions;
use graphc::lower::plan::{self, KernelPlan};
use graphc_ir::window::Window;
use graphc_ir::{parse_module, Module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::Arc;

fn list(v: &[u64]) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// A convolution (forward or transposed) in `size.len()` spatial dims: the forward one's input
/// `[n, c*group, size...]` by `[m*group, c, k...]`.
#[derive(Clone, Debug)]
struct Case {
    n: u64,
    c: u64,
    m: u64,
    group: u64,
    size: Vec<u64>,
    k: Vec<u64>,
    strides: Vec<u64>,
    /// Before, then after, per dim.
    pads: Vec<u64>,
    dilations: Vec<u64>,
    fused: bool,
    transposed: bool,
}

impl Case {
    /// The forward convolution's output sizes, or None when the window does not fit.
    fn out(&self) -> Option<Vec<u64>> {
        let d = self.size.len();
        (0..d)
            .map(|i| {
                let span = self.dilations[i] * (self.k[i] - 1) + 1;
                let padded = self.size[i] + self.pads[i] + self.pads[i + d];
                (padded >= span).then(|| (padded - span) / self.strides[i] + 1)
            })
            .collect()
    }

    fn module(&self) -> Option<Module> {
        let out = self.out()?;
        let (c, m) = (self.c * self.group, self.m * self.group);
        let x = format!("f32[{},{c},{}]", self.n, list(&self.size));
        let y = format!("f32[{},{m},{}]", self.n, list(&out));
        let w = format!("f32[{m},{},{}]", self.c, list(&self.k));
        let attrs = format!(
            "dilations = [{}], group = {}, pads = [{}], strides = [{}]",
            list(&self.dilations),
            self.group,
            list(&self.pads),
            list(&self.strides)
        );
        let ones = vec!["1"; self.size.len()].join(",");
        // The node's operand, result and the bias's channels.
        let (a, r, head, channels) = if self.transposed {
            let shape = format!("{},{c},{}", self.n, list(&self.size));
            (y.clone(), x.clone(), format!("conv_input_grad %a, %w {{{attrs}, shape = [{shape}]}}"), c)
        } else {
            (x.clone(), y.clone(), format!("conv %a, %w {{{attrs}}}"), m)
        };
        let mut text =
            format!("graph @g(%a: {a}, %w: {w}, %b: f32[{channels},{ones}]) -> (y: {r}) {{\n  %c = {head} : {r}\n");
        if self.fused {
            text += &format!("  %s = add %c, %b : {r}\n  %y = relu %s : {r}\n  return %y\n}}\n");
        } else {
            text += "  return %c\n}\n";
        }
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        Some(
            graphc::driver::optimize(
                graphc::backend::backend("jit").unwrap(),
                m,
                false,
                &graphc_ir::SourceFile::new("conv.gir", ""),
            )
            .unwrap(),
        )
    }

    /// Terms per result element, for the tolerance.
    fn terms(&self) -> u64 {
        let taps: u64 = self.k.iter().product();
        if self.transposed {
            self.m * taps
        } else {
            self.c * taps
        }
    }
}

fn tensor(t: &graphc_ir::TensorType, seed: u64) -> Tensor {
    let v = common::seeded_f32(t.num_elements().unwrap() as usize, seed);
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    Tensor::from_data(&shape, TensorData::F32(v)).unwrap()
}

/// The conv kernels planned for `m` (forward, transposed).
fn planned(m: &Module) -> (usize, usize) {
    let convs: Vec<bool> = plan::kernels(m)
        .iter()
        .filter_map(|k| match &k.plan {
            KernelPlan::Conv(p) => Some(p.geometry.transposed),
            _ => None,
        })
        .collect();
    (convs.iter().filter(|&&t| !t).count(), convs.iter().filter(|&&t| t).count())
}

/// Runs `m` with and without compiled kernels on the same inputs (`patch` may change them):
/// (compiled, reference). The buffers compiled kernels write over are NaNs when new in debug
/// builds, so an element left unwritten shows.
fn both(m: &Module, patch: impl Fn(&str, &mut Vec<f32>)) -> (Tensor, Tensor) {
    let g = &m.graphs[0];
    let mut req = RunRequest::new("g");
    for (i, &v) in g.inputs().iter().enumerate() {
        let name = g.values[v].name.clone().unwrap();
        let t = tensor(g.values[v].ty.as_tensor().unwrap(), i as u64 + 3);
        let mut data = t.f32_elements(None).unwrap().into_owned();
        patch(&name, &mut data);
        req = req.feed(name, Arc::new(Tensor::from_f32(data, &t.ty()).unwrap()));
    }
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let want = interp.run(req.clone()).unwrap().tensor(0).unwrap().clone();
    let got = jit.run(req).unwrap().tensor(0).unwrap().clone();
    (got, want)
}

fn bound(terms: u64) -> Bound {
    Bound::Rel(1e-5, 2e-7 * terms as f64)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    // A geometry without a result is no case: a fixed one fails, a random one is drawn again.
    let Some(m) = case.module() else { return Err(TestCaseError::reject("a geometry without a result")) };
    let want = if case.transposed { (0, 1) } else { (1, 0) };
    prop_assert_eq!(planned(&m), want, "{:?}: the convolution is compiled", case);
    let (got, want) = both(&m, |_, _| {});
    assert_close_within(&format!("{case:?}"), &got, &want, bound(case.terms()));
    Ok(())
}

/// Random cases in `dims` spatial dims: sizes 1 to `max_size`, windows 1 to 3, strides 1 to
/// 3 (past the window too), dilations 1 and 2, padding 0 to 2 each side, groups 1 to 3 with 1
/// to 3 channels each (depthwise among them).
fn cases(dims: usize, max_size: u64, transposed: bool) -> impl Strategy<Value = Case> {
    (
        (1u64..3, 1u64..4, 1u64..4, 1u64..4, any::<bool>()),
        (prop::collection::vec(1u64..=max_size, dims), prop::collection::vec(1u64..4, dims)),
        (
            prop::collection::vec(1u64..4, dims),
            prop::collection::vec(0u64..3, 2 * dims),
            prop::collection::vec(1u64..3, dims),
        ),
    )
        .prop_map(move |((n, c, m, group, fused), (size, k), (strides, pads, dilations))| Case {
            n,
            c,
            m,
            group,
            size,
            k,
            strides,
            pads,
            dilations,
            fused,
            transposed,
        })
}

fn run(strategy: impl Strategy<Value = Case>, count: u32, seed: u8) {
    let config = Config { cases: count, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]));
    runner.run(&strategy, |case| check(&case)).unwrap();
}

#[test]
fn random_3d_convolutions_run_alike_compiled() {
    run(cases(3, 6, false), 120, 21);
}

#[test]
fn random_transposed_convolutions_run_alike_compiled() {
    run(cases(1, 12, true), 100, 22);
    run(cases(2, 8, true), 100, 23);
    run(cases(3, 5, true), 80, 24);
}

#[test]
fn transposed_convolutions_of_decoders_run_alike_compiled() {
    // ConvTranspose2d's usual upsamplings (k2 s2; k4 s2 p1; k3 s2 p1 with output_padding 1,
    // the trailing row and column no window reaches), a 1x1 one (the product is the result),
    // a depthwise one, a 3-D one and a 1-D one (a vocoder's); alone and fused with a bias
    // and relu. (Not all are work enough for the kernel to split across threads.)
    let case = |size: Vec<u64>, c: u64, m: u64, group: u64, k: u64, s: u64, p: u64| {
        let d = size.len();
        Case {
            n: 1,
            c,
            m,
            group,
            size,
            k: vec![k; d],
            strides: vec![s; d],
            pads: vec![p; 2 * d],
            dilations: vec![1; d],
            fused: false,
            transposed: true,
        }
    };
    let cases = [
        case(vec![32, 32], 16, 32, 1, 2, 2, 0),
        case(vec![32, 32], 16, 32, 1, 4, 2, 1),
        case(vec![32, 32], 16, 32, 1, 3, 2, 1),
        case(vec![16, 16], 48, 32, 1, 1, 1, 0),
        case(vec![16, 16], 1, 1, 24, 3, 2, 1),
        case(vec![8, 12, 12], 8, 16, 1, 2, 2, 0),
        case(vec![400], 32, 64, 1, 16, 8, 4),
    ];
    for c in cases {
        check(&c).unwrap();
        check(&Case { fused: true, ..c }).unwrap();
    }
}

#[test]
fn a_3d_residual_block_sized_convolution_runs_alike_compiled() {
    // Residual-block sizes, strided, and depthwise ones (the planes' loop, on one thread at
    // these sizes); patches large enough to be made in slabs.
    let case = |c: u64, m: u64, group: u64, size: Vec<u64>, k: u64, s: u64, p: u64| Case {
        n: 1,
        c,
        m,
        group,
        size,
        k: vec![k; 3],
        strides: vec![s; 3],
        pads: vec![p; 6],
        dilations: vec![1; 3],
        fused: true,
        transposed: false,
    };
    for c in [
        case(16, 16, 1, vec![4, 14, 14], 3, 1, 1),
        case(8, 16, 1, vec![5, 15, 15], 3, 2, 1),
        case(1, 1, 32, vec![4, 12, 12], 3, 1, 1),
        case(1, 2, 16, vec![5, 11, 11], 3, 2, 1),
        case(32, 16, 1, vec![4, 8, 8], 1, 1, 0),
        // Patches made a slab of output rows at a time, across output depths (432 taps by 12
        // depths of 30 rows of 31: four slabs of 78 rows and one of 48), at unit strides and
        // strided.
        case(16, 2, 1, vec![12, 30, 31], 3, 1, 1),
        case(16, 2, 1, vec![23, 60, 61], 3, 2, 1),
    ] {
        check(&c).unwrap();
    }
}

#[test]
fn infinities_and_nans_match_in_3d_and_transposed_convolutions() {
    // A padded window over an infinite or NaN weight (checked before the products and after
    // them) or input: plain, grouped and depthwise; forward 3-D, and transposed in 1-3 dims.
    let mut cases = Vec::new();
    for (c, group, size) in [(2, 1, vec![3, 3, 3]), (2, 1, vec![2, 5, 5]), (1, 2, vec![3, 3, 3]), (2, 2, vec![2, 2, 2])]
    {
        for transposed in [false, true] {
            cases.push(Case {
                n: 1,
                c,
                m: 2,
                group,
                k: vec![3; 3],
                strides: vec![1; 3],
                pads: vec![1; 6],
                dilations: vec![1; 3],
                fused: false,
                transposed,
                size: size.clone(),
            });
        }
    }
    for size in [vec![6], vec![4, 5]] {
        let d = size.len();
        cases.push(Case {
            n: 1,
            c: 2,
            m: 3,
            group: 1,
            k: vec![3; d],
            strides: vec![2; d],
            pads: vec![1; 2 * d],
            dilations: vec![1; d],
            fused: false,
            transposed: true,
            size,
        });
    }
    for case in cases {
        let m = case.module().unwrap();
        let want = if case.transposed { (0, 1) } else { (1, 0) };
        assert_eq!(planned(&m), want, "{case:?}");
        for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            for (which, at) in [("w", 0), ("w", 4), ("a", 0), ("a", 5)] {
                let (got, want) = both(&m, |name, data| {
                    if name == which {
                        data[at] = special;
                    }
                });
                assert_close_within(&format!("{case:?}: {which}[{at}] = {special}"), &got, &want, bound(case.terms()));
            }
        }
    }
}

/// A pool in three spatial dims.
#[derive(Clone, Debug)]
struct Pool {
    max: bool,
    nc: [u64; 2],
    size: [u64; 3],
    window: Window,
    include_pad: bool,
}

impl Pool {
    fn module(&self) -> Option<Module> {
        let w = &self.window;
        let out = w.output_dims(&self.size).ok()?;
        let [n, c] = self.nc;
        let y = format!("f32[{n},{c},{}]", list(&out));
        let (op, extra) = if self.max {
            ("max_pool", String::new())
        } else {
            ("avg_pool", format!(", count_include_pad = {}", self.include_pad))
        };
        let pads: Vec<u64> = w.pads_begin.iter().chain(&w.pads_end).copied().collect();
        let text = format!(
            "graph @g(%x: f32[{n},{c},{}]) -> (y: {y}) {{\n  %y = {op} %x {{kernel = {:?}, strides = {:?}, pads = {:?}, dilations = {:?}, ceil_mode = {}{extra}}} : {y}\n  return %y\n}}\n",
            list(&self.size), w.kernel, w.strides, pads, w.dilations, w.ceil_mode
        );
        Some(parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}")))
    }
}

/// Runs the pool with and without compiled kernels: the same bits (any NaN matching any NaN).
fn check_pool(case: &Pool, patch: &dyn Fn(&mut Vec<f32>)) -> Result<(), TestCaseError> {
    // A geometry without a result is no case: a fixed one fails, a random one is drawn again.
    let Some(m) = case.module() else { return Err(TestCaseError::reject("a geometry without a result")) };
    let pools = plan::kernels(&m).iter().filter(|k| matches!(k.plan, KernelPlan::Pool(_))).count();
    prop_assert_eq!(pools, 1, "{:?}: the pool is compiled", case);
    let x = m.graphs[0].inputs()[0];
    let t = tensor(m.graphs[0].values[x].ty.as_tensor().unwrap(), 5);
    let mut data = t.f32_elements(None).unwrap().into_owned();
    patch(&mut data);
    let req = RunRequest::new("g").feed("x", Arc::new(Tensor::from_f32(data, &t.ty()).unwrap()));
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let (want, got) = (interp.run(req.clone()).unwrap(), jit.run(req).unwrap());
    let (want, got) = (want.tensor(0).unwrap(), got.tensor(0).unwrap());
    prop_assert_eq!(got.ty(), want.ty());
    let (want, got) = (want.f32_elements(None).unwrap(), got.f32_elements(None).unwrap());
    for (i, (a, b)) in got.iter().zip(want.iter()).enumerate() {
        prop_assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{:?}: element {}: {} vs {}",
            case,
            i,
            a,
            b
        );
    }
    Ok(())
}

fn pools() -> impl Strategy<Value = Pool> {
    (
        (any::<bool>(), prop::array::uniform2(1u64..3), prop::array::uniform3(1u64..8)),
        (prop::array::uniform3(1u64..4), prop::array::uniform3(1u64..4), prop::array::uniform3(0u64..3)),
        (prop::array::uniform3(0u64..3), prop::array::uniform3(1u64..3), any::<bool>(), any::<bool>()),
    )
        .prop_map(|((max, nc, size), (k, strides, pb), (pe, dilations, ceil_mode, include_pad))| Pool {
            max,
            nc,
            size,
            window: Window {
                kernel: k.to_vec(),
                strides: strides.to_vec(),
                pads_begin: pb.to_vec(),
                pads_end: pe.to_vec(),
                dilations: dilations.to_vec(),
                ceil_mode,
            },
            include_pad,
        })
}

#[test]
fn random_3d_pools_run_alike_compiled() {
    let config = Config { cases: 300, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[25; 32]));
    runner.run(&pools(), |case| check_pool(&case, &|_| {})).unwrap();
}

#[test]
fn infinities_and_nans_match_in_3d_pools() {
    let window = |k: u64, s: u64, p: u64| Window {
        kernel: vec![k; 3],
        strides: vec![s; 3],
        pads_begin: vec![p; 3],
        pads_end: vec![p; 3],
        dilations: vec![1; 3],
        ceil_mode: false,
    };
    for max in [true, false] {
        for w in [window(2, 2, 0), window(3, 1, 1), window(3, 2, 1)] {
            let case = Pool { max, nc: [1, 2], size: [4, 5, 5], window: w, include_pad: !max };
            for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                for at in [0, 7, 31, 99] {
                    check_pool(&case, &|v| v[at] = special).unwrap();
                }
                check_pool(&case, &|v| {
                    v[3] = special;
                    v[40] = -special;
                })
                .unwrap();
            }
        }
    }
}

#[test]
fn a_3d_network_sized_max_pool_runs_alike_compiled() {
    // Enough work to split across threads.
    let case = Pool {
        max: true,
        nc: [1, 16],
        size: [8, 28, 28],
        window: Window {
            kernel: vec![3; 3],
            strides: vec![2; 3],
            pads_begin: vec![1; 3],
            pads_end: vec![1; 3],
            dilations: vec![1; 3],
            ceil_mode: false,
        },
        include_pad: false,
    };
    check_pool(&case, &|_| {}).unwrap();
    check_pool(&Pool { max: false, ..case }, &|_| {}).unwrap();
}
