//! Compiled concats (copies into pooled buffers, chains appending in place) against the
//! reference kernel, bit for bit: random ranks, axes, operand counts and sizes (empty operands
//! included), and chains over several steps of one session, where a link's first operand is
//! read by others before it, after it, or is an output.

mod common;

use graphc::lower::cpu::CompileOptions;
use graphc::lower::plan::{self, KernelPlan};
use graphc_ir::{parse_module, Module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::Arc;

fn module(text: &str) -> Module {
    parse_module(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
}

/// Runs `m`'s graph `g` for `steps` steps on one session with compiled kernels and one without,
/// fed fresh seeded inputs (with infinities and NaNs) each step, and checks every output has
/// the same bits.
fn check(m: &Module, steps: u64) -> Result<(), TestCaseError> {
    let g = &m.graphs[0];
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    for step in 0..steps {
        let mut req = RunRequest::new("g");
        for (i, &x) in g.inputs().iter().enumerate() {
            let t = g.values[x].ty.as_tensor().unwrap();
            let mut v = common::seeded_f32(t.num_elements().unwrap() as usize, 7 + step * 31 + i as u64);
            for (j, special) in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0].into_iter().enumerate() {
                if let Some(e) = v.get_mut(j * 3 + i) {
                    *e = special;
                }
            }
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            let name = g.values[x].name.clone().unwrap();
            req = req.feed(&name, Arc::new(Tensor::from_data(&shape, TensorData::F32(v)).unwrap()));
        }
        let want = interp.run(req.clone()).unwrap();
        let got = jit.run(req).unwrap();
        for k in 0..g.output_values().len() {
            let (w, o) = (want.tensor(k).unwrap(), got.tensor(k).unwrap());
            prop_assert_eq!(w.ty(), o.ty());
            let (w, o) = (w.f32_elements(None).unwrap(), o.f32_elements(None).unwrap());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&w), bits(&o), "step {}, output {}", step, k);
        }
    }
    Ok(())
}

fn shape(dims: &[u64]) -> String {
    format!("f32[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

/// The plans of `m`'s concats, in order.
fn concat_plans(m: &Module) -> Vec<plan::ConcatPlan> {
    plan::kernels(m)
        .into_iter()
        .filter_map(|k| match k.plan {
            KernelPlan::Concat(p) => Some(p),
            _ => None,
        })
        .collect()
}

#[test]
fn random_concats_run_alike_compiled() {
    // A rank, the result's dims, an axis, and each operand's size along it (zero included).
    let strategy =
        (prop::collection::vec(1u64..4, 1..5), any::<prop::sample::Index>(), prop::collection::vec(0u64..4, 1..5));
    let config = Config { cases: 200, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[5; 32]));
    runner
        .run(&strategy, |(dims, axis, sizes)| {
            let axis = axis.index(dims.len());
            let total: u64 = sizes.iter().sum();
            if total == 0 {
                return Ok(());
            }
            let with = |s: u64| {
                let mut d = dims.clone();
                d[axis] = s;
                shape(&d)
            };
            let params: Vec<String> = sizes.iter().enumerate().map(|(i, &s)| format!("%x{i}: {}", with(s))).collect();
            let operands: Vec<String> = (0..sizes.len()).map(|i| format!("%x{i}")).collect();
            let text = format!(
                "graph @g({}) -> (y: {out}) {{\n  %y = concat {} {{axis = {axis}}} : {out}\n  return %y\n}}\n",
                params.join(", "),
                operands.join(", "),
                out = with(total)
            );
            let m = module(&text);
            prop_assert_eq!(concat_plans(&m).len(), 1, "{}: the concat is compiled", text);
            check(&m, 2)
        })
        .unwrap();
}

/// A DenseNet-like chain of `links` concats along the channels of `[n, c, 3, 2]` tensors,
/// each link's result read by a loop kernel before the next link; with `late`, the first
/// link's result is read again after the last link, and is an output.
fn chain(n: u64, links: usize, late: bool) -> Module {
    let mut text = format!("graph @g(%x: {}", shape(&[n, 2, 3, 2]));
    for k in 1..=links {
        text.push_str(&format!(", %y{k}: {}", shape(&[n, 1, 3, 2])));
    }
    let last = shape(&[n, 2 + links as u64, 3, 2]);
    let first = shape(&[n, 3, 3, 2]);
    let outputs = if late { format!("y: {last}, z: {first}, c1: {first}") } else { format!("y: {last}") };
    text.push_str(&format!(") -> ({outputs}) {{\n  %c0 = relu %x : {}\n", shape(&[n, 2, 3, 2])));
    for k in 1..=links {
        let ty = shape(&[n, 2 + k as u64, 3, 2]);
        let prev = shape(&[n, 1 + k as u64, 3, 2]);
        text.push_str(&format!("  %r{k} = neg %c{} : {prev}\n", k - 1));
        text.push_str(&format!("  %c{k} = concat %c{}, %y{k} {{axis = 1}} : {ty}\n", k - 1));
    }
    text.push_str(&format!("  %y = relu %c{links} : {last}\n"));
    if late {
        text.push_str(&format!("  %z = neg %c1 : {first}\n  return %y, %z, %c1\n}}\n"));
    } else {
        text.push_str("  return %y\n}\n");
    }
    module(&text)
}

#[test]
fn chains_append_in_place_and_run_alike_compiled() {
    // One block: every link but the last makes room for the last one's result.
    let m = chain(1, 4, false);
    let plans = concat_plans(&m);
    let reserves: Vec<usize> = plans.iter().map(|p| p.reserve).collect();
    assert_eq!(reserves, vec![36; 4], "{plans:?}");
    check(&m, 3).unwrap();

    // Several blocks: no link appends.
    let m = chain(2, 3, false);
    let plans = concat_plans(&m);
    assert!(plans.iter().all(|p| p.reserve == p.out.num_elements().unwrap() as usize), "{plans:?}");
    check(&m, 3).unwrap();

    // The first link's result is read after the second link: the chain starts there, and the
    // first link's result stays as it was.
    let m = chain(1, 4, true);
    let reserves: Vec<usize> = concat_plans(&m).iter().map(|p| p.reserve).collect();
    assert_eq!(reserves, vec![18, 36, 36, 36]);
    check(&m, 3).unwrap();
}
