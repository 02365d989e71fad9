//! Compiled 2-D pooling (the run half's tap ranges) against the reference kernel, bit for
//! bit: random shapes and windows, strides, padding, dilations, ceil mode and
//! count_include_pad, odd sizes included; an exhaustive small grid; infinities and NaNs. 1-D
//! pools (`[N, C, L]`, which the run half computes as 2-D of height 1) the same ways, their
//! results of rank 3.

mod common;

use graphc::lower::cpu::CompileOptions;
use graphc::lower::plan::{self, KernelPlan};
use graphc_ir::window::Window;
use graphc_ir::{parse_module, Module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::Arc;

#[derive(Clone, Debug)]
struct Case {
    max: bool,
    nc: [u64; 2],
    hw: [u64; 2],
    k: [u64; 2],
    strides: [u64; 2],
    pads: [u64; 4],
    dilations: [u64; 2],
    ceil_mode: bool,
    include_pad: bool,
    /// A 1-D pool of rank-3 tensors over the width alone (the height's entries unused).
    one_d: bool,
}

impl Case {
    /// The module, or None when the window does not fit the padded input.
    fn module(&self) -> Option<Module> {
        let dims: Vec<usize> = if self.one_d { vec![1] } else { vec![0, 1] };
        let pick = |v: &[u64]| dims.iter().map(|&d| v[d]).collect::<Vec<u64>>();
        let window = Window {
            kernel: pick(&self.k),
            strides: pick(&self.strides),
            pads_begin: pick(&self.pads[..2]),
            pads_end: pick(&self.pads[2..]),
            dilations: pick(&self.dilations),
            ceil_mode: self.ceil_mode,
        };
        let hw = pick(&self.hw);
        let out = window.output_dims(&hw).ok()?;
        let [n, c] = self.nc;
        let list = |v: &[u64]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let y = format!("f32[{n},{c},{}]", list(&out));
        let (op, extra) = if self.max {
            ("max_pool", String::new())
        } else {
            ("avg_pool", format!(", count_include_pad = {}", self.include_pad))
        };
        let pads: Vec<u64> = window.pads_begin.iter().chain(&window.pads_end).copied().collect();
        let text = format!(
            "graph @g(%x: f32[{n},{c},{}]) -> (y: {y}) {{\n  %y = {op} %x {{kernel = {:?}, strides = {:?}, pads = {:?}, dilations = {:?}, ceil_mode = {}{extra}}} : {y}\n  return %y\n}}\n",
            list(&hw), window.kernel, window.strides, pads, window.dilations, self.ceil_mode
        );
        Some(parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}")))
    }
}

fn input(t: &graphc_ir::TensorType, seed: u64, patch: &dyn Fn(&mut Vec<f32>)) -> Tensor {
    let mut v = common::seeded_f32(t.num_elements().unwrap() as usize, seed);
    patch(&mut v);
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    Tensor::from_data(&shape, TensorData::F32(v)).unwrap()
}

/// Runs the case with and without compiled kernels and checks the results are the same bits
/// (any NaN matching any NaN).
fn check(case: &Case, patch: &dyn Fn(&mut Vec<f32>)) -> Result<(), TestCaseError> {
    let Some(m) = case.module() else { return Ok(()) };
    let pools = plan::kernels(&m).iter().filter(|k| matches!(k.plan, KernelPlan::Pool(_))).count();
    let want_rank = if case.one_d { 3 } else { 4 };
    prop_assert_eq!(pools, 1, "{:?}: the pool is compiled", case);
    let g = &m.graphs[0];
    let x = g.inputs()[0];
    let req = RunRequest::new("g").feed("x", Arc::new(input(g.values[x].ty.as_tensor().unwrap(), 11, patch)));
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let (want, got) = (interp.run(req.clone()).unwrap(), jit.run(req).unwrap());
    let (want, got) = (want.tensor(0).unwrap(), got.tensor(0).unwrap());
    prop_assert_eq!(got.ty(), want.ty());
    prop_assert_eq!(got.ty().rank(), want_rank);
    let want = want.f32_elements(None).unwrap().into_owned();
    let got = got.f32_elements(None).unwrap().into_owned();
    prop_assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
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

#[test]
fn random_pools_run_alike_compiled() {
    let strategy = (
        (any::<bool>(), prop::array::uniform2(1u64..4), prop::array::uniform2(1u64..13)),
        (prop::array::uniform2(1u64..5), prop::array::uniform2(1u64..4), prop::array::uniform4(0u64..3)),
        (prop::array::uniform2(1u64..3), any::<bool>(), any::<bool>()),
    )
        .prop_map(|((max, nc, hw), (k, strides, pads), (dilations, ceil_mode, include_pad))| Case {
            max,
            nc,
            hw,
            k,
            strides,
            pads,
            // ONNX's AveragePool has dilations too; the IR allows them on both.
            dilations,
            ceil_mode,
            include_pad,
            one_d: false,
        });
    let config = Config { cases: 300, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[9; 32]));
    runner.run(&strategy, |case| check(&case, &|_| {})).unwrap();
}

#[test]
fn the_exhaustive_small_grid_runs_alike_compiled() {
    // Every window, stride, padding, dilation and mode up to small sizes on two 5x4 planes
    // (unit strides take the bordered plane path, the others the row path: from the input's
    // phases where the window is as wide as the column stride or wider, else strided).
    for max in [false, true] {
        for kh in 1..=3 {
            for kw in 1..=3 {
                for strides in [[1, 1], [1, 2], [2, 1], [2, 2]] {
                    for p in 0..=2 {
                        for dilations in [[1, 1], [2, 1], [1, 2]] {
                            for ceil_mode in [false, true] {
                                for include_pad in [false, true] {
                                    let case = Case {
                                        max,
                                        nc: [1, 2],
                                        hw: [5, 4],
                                        k: [kh, kw],
                                        strides,
                                        pads: [p, 0, 2 - p, p],
                                        dilations,
                                        ceil_mode,
                                        include_pad: include_pad && !max,
                                        one_d: false,
                                    };
                                    check(&case, &|_| {}).unwrap();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn infinities_and_nans_match() {
    // One plane on the row path; two planes at unit strides on the bordered plane path.
    for (max, (nc, strides)) in
        [false, true].into_iter().flat_map(|m| [([1, 1], [1, 2]), ([1, 2], [1, 1])].map(|c| (m, c)))
    {
        let case = Case {
            max,
            nc,
            hw: [4, 5],
            k: [3, 2],
            strides,
            pads: [1, 1, 1, 1],
            dilations: [1, 1],
            ceil_mode: true,
            include_pad: !max,
            one_d: false,
        };
        for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            for at in [0, 6, 19] {
                check(&case, &|v| v[at] = special).unwrap();
                // Two specials in one window, side by side or one above the other: inf and
                // -inf sum to NaN; the first NaN in tap order wins a max.
                for next in [1, 5] {
                    check(&case, &|v| {
                        v[at] = special;
                        v[(at + next) % 20] = -special;
                    })
                    .unwrap();
                }
            }
        }
    }
}

#[test]
fn huge_strides_and_windows_visit_only_the_taps_some_output_reaches() {
    // Window 0 reaches the one input column at tap 2^61, window 1 at tap 0; a walk over the
    // taps between would not finish. (The reference kernel walks them: the expected values
    // are written out instead.)
    const H: u64 = 1 << 61;
    for max in [false, true] {
        let case = Case {
            max,
            nc: [1, 2],
            hw: [1, 1],
            k: [1, H + 1],
            strides: [1, H],
            pads: [0, H, 0, H],
            dilations: [1, 1],
            ceil_mode: false,
            include_pad: false,
            one_d: false,
        };
        let m = case.module().unwrap();
        let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
        let jit = Session::with_compiled(m, SessionOptions::default(), kernels).unwrap();
        let x = Tensor::from_data(&[1, 2, 1, 1], TensorData::F32(vec![-0.5, 2.0])).unwrap();
        let out = jit.run(RunRequest::new("g").feed("x", Arc::new(x))).unwrap();
        let y = out.tensor(0).unwrap().f32_elements(None).unwrap().into_owned();
        assert_eq!(y, [-0.5, -0.5, 2.0, 2.0], "max {max}");
    }
}

/// A 1-D pool of `nc` planes of length `l`: window `k`, stride `s`, padding `pads` (before,
/// after), dilation `d`.
fn one_d(max: bool, nc: [u64; 2], l: u64, (k, s, pads, d): (u64, u64, [u64; 2], u64), ceil: bool, pad: bool) -> Case {
    Case {
        max,
        nc,
        hw: [1, l],
        k: [1, k],
        strides: [1, s],
        pads: [0, pads[0], 0, pads[1]],
        dilations: [1, d],
        ceil_mode: ceil,
        include_pad: pad && !max,
        one_d: true,
    }
}

#[test]
fn random_1d_pools_run_alike_compiled() {
    let strategy = (
        (any::<bool>(), prop::array::uniform2(1u64..5), 1u64..40),
        (1u64..6, 1u64..4, prop::array::uniform2(0u64..3), 1u64..3),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(|((max, nc, l), window, (ceil, pad))| one_d(max, nc, l, window, ceil, pad));
    let config = Config { cases: 300, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[17; 32]));
    runner.run(&strategy, |case| check(&case, &|_| {})).unwrap();
}

#[test]
fn the_exhaustive_small_1d_grid_runs_alike_compiled() {
    // One plane (the row path) and three (unit strides: the bordered path) of length 7.
    for max in [false, true] {
        for nc in [[1, 1], [1, 3]] {
            for k in 1..=4 {
                for s in 1..=3 {
                    for d in 1..=2 {
                        for pads in [[0, 0], [1, 0], [0, 2], [2, 1]] {
                            for ceil in [false, true] {
                                for pad in [false, true] {
                                    check(&one_d(max, nc, 7, (k, s, pads, d), ceil, pad), &|_| {}).unwrap();
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn infinities_and_nans_match_in_1d_pools() {
    for max in [false, true] {
        for (nc, s) in [([1, 1], 2), ([1, 2], 1)] {
            let case = one_d(max, nc, 10, (3, s, [1, 1], 1), true, true);
            for special in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                for at in [0, 4, 9] {
                    check(&case, &|v| v[at] = special).unwrap();
                    check(&case, &|v| {
                        v[at] = special;
                        v[(at + 1) % 10] = -special;
                    })
                    .unwrap();
                }
            }
        }
    }
}
