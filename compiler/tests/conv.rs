//! Compiled convolution (im2col and gemm in the run half, the epilogue generated) against the
//! reference kernel: random shapes, strides, padding, dilations and groups, odd sizes
//! included, alone and fused with bias and relu, depthwise (the direct path) too; infinite and
//! NaN values where the padding must not multiply them.

mod common;

use common::close::{assert_close_within, Bound};
use graphc::lower::cpu::CompileOptions;
use graphc::lower::plan::{self, KernelPlan};
use graphc_ir::{parse_module, Module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::Arc;

#[derive(Clone, Debug)]
struct Case {
    n: u64,
    c: u64,
    m: u64,
    group: u64,
    hw: [u64; 2],
    k: [u64; 2],
    strides: [u64; 2],
    pads: [u64; 4],
    dilations: [u64; 2],
    fused: bool,
}

impl Case {
    /// The module, or None when the window does not fit the padded input.
    fn module(&self) -> Option<Module> {
        let (c, m) = (self.c * self.group, self.m * self.group);
        let mut out = Vec::new();
        for d in 0..2 {
            let span = self.dilations[d] * (self.k[d] - 1) + 1;
            let padded = self.hw[d] + self.pads[d] + self.pads[d + 2];
            if padded < span {
                return None;
            }
            out.push((padded - span) / self.strides[d] + 1);
        }
        let y = format!("f32[{},{m},{},{}]", self.n, out[0], out[1]);
        let attrs = format!(
            "{{dilations = [{}, {}], group = {}, pads = [{}, {}, {}, {}], strides = [{}, {}]}}",
            self.dilations[0],
            self.dilations[1],
            self.group,
            self.pads[0],
            self.pads[1],
            self.pads[2],
            self.pads[3],
            self.strides[0],
            self.strides[1]
        );
        let head = format!(
            "graph @g(%x: f32[{},{c},{},{}], %w: f32[{m},{},{},{}], %b: f32[{m},1,1]) -> (y: {y}) {{\n  %c = conv %x, %w {attrs} : {y}\n",
            self.n, self.hw[0], self.hw[1], self.c, self.k[0], self.k[1]
        );
        let text = if self.fused {
            format!("{head}  %s = add %c, %b : {y}\n  %y = relu %s : {y}\n  return %y\n}}\n")
        } else {
            format!("{head}  return %c\n}}\n")
        };
        Some(parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}")))
    }
}

fn tensor(t: &graphc_ir::TensorType, seed: u64) -> Tensor {
    let v = common::seeded_f32(t.num_elements().unwrap() as usize, seed);
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    Tensor::from_data(&shape, TensorData::F32(v)).unwrap()
}

/// Runs `m` with and without compiled kernels on the same inputs (`patch` may change them);
/// returns (compiled, reference, the number of conv kernels). (The buffers compiled
/// convolutions write over are NaNs when new in debug builds, so an element they leave
/// unwritten shows.)
fn both(m: &Module, patch: impl Fn(&str, &mut Vec<f32>)) -> (Tensor, Tensor, usize) {
    let convs = plan::kernels(m).iter().filter(|k| matches!(k.plan, KernelPlan::Conv(_))).count();
    let g = &m.graphs[0];
    let mut req = RunRequest::new("g");
    for (i, &v) in g.inputs().iter().enumerate() {
        let name = g.values[v].name.clone().unwrap();
        let t = tensor(g.values[v].ty.as_tensor().unwrap(), i as u64 + 7);
        let mut data = t.f32_elements(None).unwrap().into_owned();
        patch(&name, &mut data);
        req = req.feed(name, Arc::new(Tensor::from_f32(data, &t.ty()).unwrap()));
    }
    let options = || SessionOptions::default();
    let interp = Session::new(m.clone(), options()).unwrap();
    let jit = Session::with_compiled(m.clone(), options(), common::cpu_kernels(m, &CompileOptions::default()).unwrap())
        .unwrap();
    let want = interp.run(req.clone()).unwrap().tensor(0).unwrap().clone();
    let got = jit.run(req).unwrap().tensor(0).unwrap().clone();
    (got, want, convs)
}

/// Sums of `k` products of terms in [-1, 1]: f32 on gemm against the reference's f64.
fn bound(k: u64) -> Bound {
    Bound::Rel(1e-5, 2e-7 * k as f64)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let Some(m) = case.module() else { return Ok(()) };
    let m = graphc::driver::optimize(
        graphc::backend::backend("jit").unwrap(),
        m,
        false,
        &graphc_ir::SourceFile::new("conv.gir", ""),
    )
    .unwrap();
    let (got, want, convs) = both(&m, |_, _| {});
    prop_assert_eq!(convs, 1, "{:?}: the conv is compiled", case);
    let k = case.c * case.k[0] * case.k[1];
    assert_close_within(&format!("{case:?}"), &got, &want, bound(k));
    Ok(())
}

#[test]
fn random_convolutions_run_alike_compiled() {
    let strategy = (
        (1u64..3, 1u64..5, 1u64..5, 1u64..4),
        (prop::array::uniform2(1u64..12), prop::array::uniform2(1u64..5), prop::array::uniform2(1u64..4)),
        (prop::array::uniform4(0u64..3), prop::array::uniform2(1u64..3), any::<bool>()),
    )
        .prop_map(|((n, c, m, group), (hw, k, strides), (pads, dilations, fused))| Case {
            n,
            c,
            m,
            group,
            hw,
            k,
            strides,
            pads,
            dilations,
            fused,
        });
    let config = Config { cases: 200, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]));
    runner.run(&strategy, |case| check(&case)).unwrap();
}

#[test]
fn the_exhaustive_small_grid_runs_alike_compiled() {
    // Every window size, stride, padding and dilation up to 2 on a 5x4 input, alone and fused;
    // plain, and depthwise (one input channel per group: the direct path, bordered planes at
    // unit strides) with one and two output channels per group. Windows 3 wide at column
    // stride 2 read the input's phases (im2col's split rows).
    for (c, m, group) in [(2, 3, 1), (1, 1, 3), (1, 2, 2)] {
        for kh in 1..=3 {
            for kw in 1..=3 {
                for strides in [[1, 1], [1, 2], [2, 1], [2, 2]] {
                    for p in 0..=2 {
                        for dilations in [[1, 1], [2, 1], [1, 2]] {
                            for fused in [false, true] {
                                let case = Case {
                                    n: 1,
                                    c,
                                    m,
                                    group,
                                    hw: [5, 4],
                                    k: [kh, kw],
                                    strides,
                                    pads: [p, 0, 2 - p, p],
                                    dilations,
                                    fused,
                                };
                                check(&case).unwrap();
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn large_grouped_and_batched_convolutions_run_alike_compiled() {
    // Enough work to split across threads: per image and group too little for a product to
    // split (the products then spread whole), and enough for each to split by rows.
    for (n, c, m, group, hw, k) in [
        (2, 64, 64, 4, [32, 32], [1, 1]),
        (3, 24, 36, 3, [17, 19], [1, 1]),
        (2, 64, 64, 4, [32, 32], [3, 3]),
        (1, 128, 256, 2, [30, 30], [1, 1]),
    ] {
        let case = Case { n, c, m, group, hw, k, strides: [1, 1], pads: [0, 0, 0, 0], dilations: [1, 1], fused: true };
        check(&case).unwrap();
    }
}

#[test]
fn infinities_and_nans_match_where_the_padding_skips_them() {
    // Weights checked before the products (fewer than the results: 6x6) and after them (4x4,
    // and two 3x3 images of two groups of three channels each).
    for (n, c, group, hw) in [(1, 2, 1, [4, 4]), (1, 2, 1, [6, 6]), (1, 1, 2, [4, 4]), (2, 6, 2, [3, 3])] {
        let case = Case {
            n,
            c,
            m: 2,
            group,
            hw,
            k: [3, 3],
            strides: [1, 1],
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            fused: false,
        };
        let m = case.module().unwrap();
        for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            for (which, at) in [("w", 0), ("x", 5)] {
                let (got, want, convs) = both(&m, |name, data| {
                    if name == which {
                        data[at] = special;
                    }
                });
                assert_eq!(convs, 1);
                assert_close_within(&format!("{which}[{at}] = {special}"), &got, &want, bound(18));
            }
        }
    }
}
