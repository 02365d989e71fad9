//! Products of factors of rank above 2 on the compiled kernel (numpy's `matmul`: leading
//! dims broadcast, either factor read transposed), alone and with an elementwise epilogue,
//! against the reference kernel: random batch dims (missing, 1, or the result's), sizes and
//! flags, within SPEC §12's bound for a chain.

mod common;

use graphc::lower::cpu::CompileOptions;
use graphc::lower::plan::{self, KernelPlan};
use graphc_ir::{parse_module, Module};
use graphc_runtime::random::random_request;
use graphc_runtime::{Session, SessionOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

fn shape(dims: &[u64]) -> String {
    format!("f32[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

/// Whether `m`'s one kernel is a product with a batch.
fn batched(m: &Module) -> bool {
    plan::kernels(m).iter().any(|k| matches!(&k.plan, KernelPlan::MatMul(p) if p.batch.is_some()))
}

fn check(m: &Module, seed: u64) -> Result<(), TestCaseError> {
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let req = random_request(&m.graphs[0], seed).expect("small random inputs");
    let (want, got) = (interp.run(req.clone()).unwrap(), jit.run(req).unwrap());
    common::close::check_close(got.tensor(0).unwrap(), want.tensor(0).unwrap(), common::close::bound("graph"))
        .map_err(TestCaseError::fail)
}

#[test]
fn random_batched_products_run_alike_compiled() {
    // The result's batch dims; per factor, how many of them it has (from the right) and
    // which of those are 1; m, k, n; the flags; an epilogue.
    let strategy = (
        prop::collection::vec(1u64..4, 0..3),
        (0usize..3, 0usize..3, any::<u8>(), any::<u8>()),
        (1u64..7, 1u64..7, 1u64..7),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    );
    let config = Config { cases: 250, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[9; 32]));
    runner
        .run(&strategy, |(lead, (ra, rb, ones_a, ones_b), (m, k, n), (ta, tb, epilogue))| {
            let own = |r: usize, ones: u8| -> Vec<u64> {
                let r = r.min(lead.len());
                let tail = &lead[lead.len() - r..];
                tail.iter().enumerate().map(|(i, &d)| if ones >> i & 1 == 1 { 1 } else { d }).collect()
            };
            let (mut a, mut b) = (own(ra, ones_a), own(rb, ones_b));
            // The result's leading dims are the factors' broadcast, right-aligned.
            let rank = a.len().max(b.len());
            let at = |x: &[u64], i: usize| (i + x.len()).checked_sub(rank).map_or(1, |j| x[j]);
            let mut out: Vec<u64> = (0..rank).map(|i| at(&a, i).max(at(&b, i))).collect();
            a.extend(if ta { [k, m] } else { [m, k] });
            b.extend(if tb { [n, k] } else { [k, n] });
            out.extend([m, n]);
            if a.len() == 2 && b.len() == 2 {
                return Ok(());
            }
            let (o, bias) = (shape(&out), shape(&[n]));
            let body = if epilogue {
                format!("  %p = matmul %a, %b {{transpose_a = {ta}, transpose_b = {tb}}} : {o}\n  %q = add %p, %c : {o}\n  %y = relu %q : {o}\n")
            } else {
                format!("  %y = matmul %a, %b {{transpose_a = {ta}, transpose_b = {tb}}} : {o}\n")
            };
            let text = format!(
                "graph @g(%a: {}, %b: {}, %c: {bias}) -> (y: {o}) {{\n{body}  return %y\n}}\n",
                shape(&a),
                shape(&b)
            );
            let mut module = parse_module(&text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            if epilogue {
                graphc::passes::PassManager::new(graphc::passes::DEFAULT_PIPELINE).unwrap().run(&mut module, &mut |_| {}).unwrap();
            }
            prop_assert!(batched(&module), "{}", graphc_ir::print_module(&module));
            check(&module, m * 7 + k)
        })
        .unwrap();
}

/// An lhs of rank 3 by a 2-D rhs is one product of all its rows.
#[test]
fn an_lhs_with_leading_dims_by_a_matrix_folds_its_rows() {
    let text = "graph @g(%a: f32[2,3,4], %b: f32[4,5]) -> (y: f32[2,3,5]) {\n  %y = matmul %a, %b : f32[2,3,5]\n  return %y\n}\n";
    let m = parse_module(text).unwrap();
    let plans = plan::kernels(&m);
    let KernelPlan::MatMul(p) = &plans[0].plan else { panic!("{:?}", plans[0].plan) };
    assert_eq!((p.m, p.k, p.n), (6, 4, 5));
    assert!(p.batch.as_ref().is_some_and(|b| b.dims.is_empty()));
    check(&m, 1).unwrap();
}
