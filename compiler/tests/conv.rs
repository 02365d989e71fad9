//! Compiled convolution (im2col and gemm in the run half, the epilogue generated) against the
//! reference kernel: random shapes, strides, padding, dilations and groups, odd sizes
//! included, alone and fused with bias and relu, depthwise (the direct path) too; infinite and
//! NaN values where the padding must not multiply them. 1-D convolutions (`[N, C, L]`, which
//! the run half computes as 2-D of height 1) the same ways, their results of rank 3.

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
    /// A 1-D convolution of rank-3 tensors over the width alone (the height's entries unused).
    one_d: bool,
}

impl Case {
    /// A 1-D convolution: `[n, c*group, l]` by `[m*group, c, k]`, padded `pads` (before,
    /// after).
    #[allow(clippy::too_many_arguments)]
    fn one_d(n: u64, c: u64, m: u64, group: u64, l: u64, k: u64, stride: u64, pads: [u64; 2], dilation: u64) -> Case {
        Case {
            n,
            c,
            m,
            group,
            hw: [1, l],
            k: [1, k],
            strides: [1, stride],
            pads: [0, pads[0], 0, pads[1]],
            dilations: [1, dilation],
            fused: false,
            one_d: true,
        }
    }

    /// The spatial dims the case has: the width alone for a 1-D convolution.
    fn spatial(&self) -> std::ops::Range<usize> {
        if self.one_d {
            1..2
        } else {
            0..2
        }
    }

    /// The module, or None when the window does not fit the padded input.
    fn module(&self) -> Option<Module> {
        let (c, m) = (self.c * self.group, self.m * self.group);
        let mut out = Vec::new();
        for d in self.spatial() {
            let span = self.dilations[d] * (self.k[d] - 1) + 1;
            let padded = self.hw[d] + self.pads[d] + self.pads[d + 2];
            if padded < span {
                return None;
            }
            out.push((padded - span) / self.strides[d] + 1);
        }
        let list = |v: Vec<u64>| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let dims = |v: &[u64; 2]| self.spatial().map(|d| v[d]).collect::<Vec<_>>();
        let pads: Vec<u64> = self.spatial().chain(self.spatial().map(|d| d + 2)).map(|i| self.pads[i]).collect();
        let y = format!("f32[{},{m},{}]", self.n, list(out));
        let attrs = format!(
            "{{dilations = [{}], group = {}, pads = [{}], strides = [{}]}}",
            list(dims(&self.dilations)),
            self.group,
            list(pads),
            list(dims(&self.strides))
        );
        let bias = if self.one_d { "1" } else { "1,1" };
        let head = format!(
            "graph @g(%x: f32[{},{c},{}], %w: f32[{m},{},{}], %b: f32[{m},{bias}]) -> (y: {y}) {{\n  %c = conv %x, %w {attrs} : {y}\n",
            self.n,
            list(dims(&self.hw)),
            self.c,
            list(dims(&self.k))
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
    let k = case.c * case.spatial().map(|d| case.k[d]).product::<u64>();
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
            one_d: false,
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
                                    one_d: false,
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
        let case = Case {
            n,
            c,
            m,
            group,
            hw,
            k,
            strides: [1, 1],
            pads: [0, 0, 0, 0],
            dilations: [1, 1],
            fused: true,
            one_d: false,
        };
        check(&case).unwrap();
    }
}

#[test]
fn large_patches_made_a_slab_of_rows_at_a_time_run_alike_compiled() {
    // 576 taps by 97 rows of 90 columns, past the size made whole: slabs of 20 rows and a last
    // of 17, at unit strides and strided.
    for (hw, stride) in [([97, 90], 1), ([194, 180], 2)] {
        let case = Case {
            n: 1,
            c: 64,
            m: 3,
            group: 1,
            hw,
            k: [3, 3],
            strides: [stride, stride],
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            fused: true,
            one_d: false,
        };
        check(&case).unwrap();
    }
}

#[test]
fn network_sized_depthwise_convolutions_run_alike_compiled() {
    // MobileNet's 3x3 and EfficientNet's 5x5 windows at strides 1 and 2, ConvNeXt's 7x7, on
    // planes whose rows at the bordered width fill whole blocks of sums and leave tails.
    for (m, hw, k, stride) in [
        (1, [29, 30], [3, 3], 1),
        (1, [29, 30], [3, 3], 2),
        (2, [14, 15], [5, 5], 2),
        (1, [7, 7], [5, 5], 1),
        (1, [23, 17], [7, 7], 1),
    ] {
        let pad = k[0] / 2;
        let case = Case {
            n: 1,
            c: 1,
            m,
            group: 24,
            hw,
            k,
            strides: [stride, stride],
            pads: [pad; 4],
            dilations: [1, 1],
            fused: true,
            one_d: false,
        };
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
            one_d: false,
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

#[test]
fn random_1d_convolutions_run_alike_compiled() {
    // Odd channel counts and lengths, strides 1 to 3, dilations 1 and 2, padding, groups
    // (depthwise where a group has one input channel), alone and fused with bias and relu.
    let strategy = (
        (1u64..3, 1u64..6, 1u64..5, 1u64..5),
        (1u64..40, 1u64..6, 1u64..4),
        (prop::array::uniform2(0u64..4), 1u64..3, any::<bool>()),
    )
        .prop_map(|((n, c, m, group), (l, k, stride), (pads, dilation, fused))| Case {
            fused,
            ..Case::one_d(n, c, m, group, l, k, stride, pads, dilation)
        });
    let config = Config { cases: 200, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]));
    runner.run(&strategy, |case| check(&case)).unwrap();
}

#[test]
fn the_exhaustive_small_1d_grid_runs_alike_compiled() {
    // Every window up to 4, stride and dilation up to 3 and padding split up to 2 on a length
    // of 7; plain, depthwise with one and two output channels per group, alone and fused.
    for (c, m, group) in [(3, 2, 1), (1, 1, 3), (1, 2, 2), (2, 1, 2)] {
        for k in 1..=4 {
            for stride in 1..=3 {
                for dilation in 1..=3 {
                    for pads in [[0, 0], [1, 0], [0, 2], [2, 1]] {
                        for fused in [false, true] {
                            check(&Case { fused, ..Case::one_d(1, c, m, group, 7, k, stride, pads, dilation) })
                                .unwrap();
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn whisper_sized_1d_convolutions_run_alike_compiled() {
    // A Whisper encoder's two convolutions (enough work to split across threads), a wav2vec2
    // feature extractor's strided one, and a large depthwise one.
    for case in [
        Case::one_d(1, 80, 128, 1, 200, 3, 1, [1, 1], 1),
        Case::one_d(1, 128, 128, 1, 200, 3, 2, [1, 1], 1),
        Case::one_d(1, 64, 64, 1, 401, 10, 5, [0, 0], 1),
        Case::one_d(2, 1, 1, 96, 300, 31, 1, [15, 15], 1),
    ] {
        check(&Case { fused: true, ..case.clone() }).unwrap();
        check(&case).unwrap();
    }
}

#[test]
fn infinities_and_nans_match_in_1d_convolutions() {
    // Padded windows over an infinite or NaN weight (checked before the products and after
    // them) or input, plain and depthwise.
    for (c, group, l) in [(2, 1, 4), (2, 1, 9), (1, 2, 5), (3, 2, 3)] {
        let case = Case::one_d(1, c, 2, group, l, 3, 1, [1, 1], 1);
        let m = case.module().unwrap();
        for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            for (which, at) in [("w", 0), ("x", 2)] {
                let (got, want, convs) = both(&m, |name, data| {
                    if name == which {
                        data[at] = special;
                    }
                });
                assert_eq!(convs, 1);
                assert_close_within(&format!("{case:?}: {which}[{at}] = {special}"), &got, &want, bound(6));
            }
        }
    }
}
