//! Compiled data movement (strided copies for transpose, slice, split, pad and reshape; row
//! picks for gather) against the reference kernels, bit for bit: random ranks, dims,
//! permutations, bounds (negative, past the end), steps, split sizes, paddings (interior
//! too) and indices (negative too), inputs with infinities and NaNs.

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

fn shape(dims: &[u64]) -> String {
    format!("f32[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(","))
}

fn list(v: &[i64]) -> String {
    format!("[{}]", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
}

/// How many of `m`'s kernels are copies or gathers.
fn copies(m: &Module) -> usize {
    plan::kernels(m).iter().filter(|k| matches!(k.plan, KernelPlan::Copy(_) | KernelPlan::Gather(_))).count()
}

/// Runs graph `g` of `m` with compiled kernels and without, on seeded inputs with infinities,
/// NaNs and -0, and checks both give the same bits (or both fail).
fn check(m: &Module) -> Result<(), TestCaseError> {
    let g = &m.graphs[0];
    let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let kernels = common::cpu_kernels(m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let mut req = RunRequest::new("g");
    for (i, &x) in g.inputs().iter().enumerate() {
        let t = g.values[x].ty.as_tensor().unwrap();
        let mut v = common::seeded_f32(t.num_elements().unwrap() as usize, 11 + i as u64);
        for (j, special) in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0].into_iter().enumerate() {
            if let Some(e) = v.get_mut(j * 2 + i) {
                *e = special;
            }
        }
        let dims: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
        let name = g.values[x].name.clone().unwrap();
        req = req.feed(&name, Arc::new(Tensor::from_data(&dims, TensorData::F32(v)).unwrap()));
    }
    let (want, got) = (interp.run(req.clone()), jit.run(req));
    let (want, got) = match (want, got) {
        (Ok(w), Ok(o)) => (w, o),
        (Err(w), Err(o)) => {
            prop_assert_eq!(w.to_string().contains("out of range"), o.to_string().contains("out of range"));
            return Ok(());
        }
        (w, o) => return Err(TestCaseError::fail(format!("interpreter {:?}, compiled {:?}", w.err(), o.err()))),
    };
    for k in 0..g.output_values().len() {
        let (w, o) = (want.tensor(k).unwrap(), got.tensor(k).unwrap());
        prop_assert_eq!(w.ty(), o.ty());
        let bits = |t: &Tensor| t.f32_elements(None).unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(w), bits(o), "output {}", k);
    }
    Ok(())
}

fn runner(cases: u32, seed: u8) -> TestRunner {
    TestRunner::new_with_rng(
        Config { cases, ..Config::default() },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
    )
}

/// Up to four dims of 1 to 5.
fn dims() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(1u64..6, 1..5)
}

/// `%y = OP` of `%x: dims` (or of `neg %x`, so that the operand is the kernel's to take),
/// typed `out`, as a module whose graph returns `%y`.
fn unary(dims: &[u64], of_temp: bool, op: &str, outs: &[Vec<u64>]) -> Module {
    let x = shape(dims);
    let results: Vec<String> = (0..outs.len()).map(|k| format!("%y{k}")).collect();
    let types: Vec<String> = outs.iter().map(|d| shape(d)).collect();
    let returns: Vec<String> = types.iter().enumerate().map(|(k, t)| format!("y{k}: {t}")).collect();
    let operand = if of_temp { format!("  %t = neg %x : {x}\n") } else { String::new() };
    let op = op.replace("OPERAND", if of_temp { "%t" } else { "%x" });
    module(&format!(
        "graph @g(%x: {x}) -> ({}) {{\n{operand}  {} = {op} : {}\n  return {}\n}}\n",
        returns.join(", "),
        results.join(", "),
        types.join(", "),
        results.join(", ")
    ))
}

#[test]
fn random_transposes_and_reshapes_run_alike_compiled() {
    let strategy = (dims(), any::<prop::sample::Index>(), any::<bool>(), any::<bool>());
    runner(300, 3)
        .run(&strategy, |(dims, perm, of_temp, reshape)| {
            let m = if reshape {
                // To the dims in reverse: the same elements in the same order.
                let out: Vec<u64> = dims.iter().rev().copied().collect();
                let shape_attr: Vec<i64> = out.iter().map(|&d| d as i64).collect();
                unary(&dims, of_temp, &format!("reshape OPERAND {{shape = {}}}", list(&shape_attr)), &[out])
            } else {
                // The `perm`-th permutation of the dims, by a Lehmer code.
                let mut left: Vec<usize> = (0..dims.len()).collect();
                let mut code = perm.index((1..=dims.len()).product());
                let mut p = Vec::new();
                for k in (1..=dims.len()).rev() {
                    let f: usize = (1..k).product();
                    p.push(left.remove(code / f) as i64);
                    code %= f;
                }
                let out: Vec<u64> = p.iter().map(|&a| dims[a as usize]).collect();
                unary(&dims, of_temp, &format!("transpose OPERAND {{perm = {}}}", list(&p)), &[out])
            };
            prop_assert_eq!(copies(&m), 1, "{}", graphc_ir::print_module(&m));
            check(&m)
        })
        .unwrap();
}

#[test]
fn random_slices_and_splits_run_alike_compiled() {
    let bound = || prop::collection::vec(-7i64..8, 4);
    let strategy =
        (dims(), bound(), bound(), prop::collection::vec(1i64..4, 4), any::<prop::sample::Index>(), any::<bool>());
    runner(300, 4)
        .run(&strategy, |(dims, starts, ends, steps, at, split)| {
            let rank = dims.len();
            let m = if split {
                // Sizes cut from the axis at two points (empty parts included).
                let axis = at.index(rank);
                let n = dims[axis] as i64;
                let (a, b) = ((starts[0].rem_euclid(n + 1)), (ends[0].rem_euclid(n + 1)));
                let (a, b) = (a.min(b), a.max(b));
                let sizes = [a, b - a, n - b];
                let outs: Vec<Vec<u64>> = sizes
                    .iter()
                    .map(|&s| {
                        let mut d = dims.clone();
                        d[axis] = s as u64;
                        d
                    })
                    .collect();
                let m =
                    unary(&dims, false, &format!("split OPERAND {{axis = {axis}, sizes = {}}}", list(&sizes)), &outs);
                prop_assert_eq!(copies(&m), usize::from(sizes.iter().all(|&s| s > 0)));
                m
            } else {
                let (starts, ends, steps) = (&starts[..rank], &ends[..rank], &steps[..rank]);
                let out: Vec<u64> = (0..rank)
                    .map(|d| {
                        let n = dims[d] as i64;
                        let r = |i: i64| (if i < 0 { i + n } else { i }).clamp(0, n);
                        let (s, e) = (r(starts[d]), r(ends[d]));
                        if e > s {
                            ((e - s - 1) / steps[d] + 1) as u64
                        } else {
                            0
                        }
                    })
                    .collect();
                let op = format!(
                    "slice OPERAND {{starts = {}, ends = {}, steps = {}}}",
                    list(starts),
                    list(ends),
                    list(steps)
                );
                let m = unary(&dims, false, &op, std::slice::from_ref(&out));
                prop_assert_eq!(copies(&m), usize::from(!out.contains(&0)));
                m
            };
            check(&m)
        })
        .unwrap();
}

#[test]
fn random_pads_run_alike_compiled() {
    let pads = || prop::collection::vec(0i64..3, 4);
    let strategy = (dims(), pads(), pads(), pads());
    runner(300, 5)
        .run(&strategy, |(dims, low, high, interior)| {
            let rank = dims.len();
            let (low, high, interior) = (&low[..rank], &high[..rank], &interior[..rank]);
            let out: Vec<u64> =
                (0..rank).map(|d| (low[d] + high[d]) as u64 + dims[d] + (dims[d] - 1) * interior[d] as u64).collect();
            let text = format!(
                "graph @g(%x: {}, %v: f32[]) -> (y: {o}) {{\n  %y = pad %x, %v {{low = {}, high = {}, interior = {}}} : {o}\n  return %y\n}}\n",
                shape(&dims),
                list(low),
                list(high),
                list(interior),
                o = shape(&out)
            );
            let m = module(&text);
            prop_assert_eq!(copies(&m), 1);
            check(&m)
        })
        .unwrap();
}

#[test]
fn random_gathers_run_alike_compiled() {
    let strategy = (dims(), any::<prop::sample::Index>(), prop::collection::vec(-6i64..6, 1..5), any::<bool>());
    runner(300, 6)
        .run(&strategy, |(dims, axis, picks, wide)| {
            let axis = axis.index(dims.len());
            let mut out = dims[..axis].to_vec();
            out.push(picks.len() as u64);
            out.extend_from_slice(&dims[axis + 1..]);
            let it = if wide { "i64" } else { "i32" };
            let text = format!(
                "graph @g(%x: {}) -> (y: {o}) {{\n  %i = constant {{value = dense<{}> : {it}[{k}]}} : {it}[{k}]\n  %y = gather %x, %i {{axis = {axis}}} : {o}\n  return %y\n}}\n",
                shape(&dims),
                list(&picks),
                o = shape(&out),
                k = picks.len()
            );
            let m = module(&text);
            prop_assert_eq!(copies(&m), 1);
            check(&m)
        })
        .unwrap();
}

/// A reshape of a value nothing else reads takes over its buffer; one whose operand is also an
/// output copies it, and both outputs stay intact.
#[test]
fn a_reshape_takes_its_operand_only_when_nothing_else_holds_it() {
    let text = "graph @g(%x: f32[2,3]) -> (a: f32[2,3], b: f32[3,2], c: f32[6]) {\n  %a = neg %x : f32[2,3]\n  %b = reshape %a {shape = [3, 2]} : f32[3,2]\n  %t = exp %x : f32[2,3]\n  %c = reshape %t {shape = [6]} : f32[6]\n  return %a, %b, %c\n}\n";
    let m = module(text);
    assert_eq!(copies(&m), 2);
    check(&m).unwrap();
    // neg, exp and the reshape of %a (an output too) each take a buffer; the reshape of %t,
    // its last reader, takes %t's.
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let x = Tensor::from_data(&[2, 3], TensorData::F32(common::seeded_f32(6, 3))).unwrap();
    let out = jit.run(RunRequest::new("g").feed("x", Arc::new(x))).unwrap();
    assert_eq!(jit.buffer_stats().allocated, 3, "{:?}", jit.buffer_stats());
    let a = out.tensor(0).unwrap().f32_elements(None).unwrap().into_owned();
    assert_eq!(out.tensor(1).unwrap().f32_elements(None).unwrap().into_owned(), a, "the reshape copied %a");
}

/// Data movement of tensors of other dtypes than f32 (a transformer's boolean masks, its i64
/// positions) is compiled too, bit for bit the reference's: random transposes, slices, pads,
/// splits and gathers of a cast of the input to bool, i32, i64, u8 or f16.
#[test]
fn data_movement_of_every_dtype_runs_alike_compiled() {
    let strategy = (
        dims(),
        0usize..5,
        0usize..5,
        any::<prop::sample::Index>(),
        prop::collection::vec(-7i64..8, 8),
        prop::collection::vec(0i64..3, 12),
    );
    runner(200, 7)
        .run(&strategy, |(dims, dtype, kind, at, bounds, pads)| {
            let dtype = ["bool", "i32", "i64", "u8", "f16"][dtype];
            let rank = dims.len();
            let typed = |d: &[u64]| shape(d).replacen("f32", dtype, 1);
            let axis = at.index(rank);
            let (op, outs): (String, Vec<Vec<u64>>) = match kind {
                0 => {
                    // The dims rotated by `axis`.
                    let p: Vec<i64> = (0..rank).map(|d| ((d + axis) % rank) as i64).collect();
                    let out = p.iter().map(|&a| dims[a as usize]).collect();
                    (format!("transpose %c {{perm = {}}}", list(&p)), vec![out])
                }
                1 => {
                    let (starts, ends) = (&bounds[..rank], &bounds[4..4 + rank]);
                    let steps: Vec<i64> = pads[..rank].iter().map(|s| s + 1).collect();
                    let out = (0..rank)
                        .map(|d| {
                            let n = dims[d] as i64;
                            let r = |i: i64| (if i < 0 { i + n } else { i }).clamp(0, n);
                            let (s, e) = (r(starts[d]), r(ends[d]));
                            if e > s { ((e - s - 1) / steps[d] + 1) as u64 } else { 0 }
                        })
                        .collect();
                    let op = format!(
                        "slice %c {{starts = {}, ends = {}, steps = {}}}",
                        list(starts),
                        list(ends),
                        list(&steps)
                    );
                    (op, vec![out])
                }
                2 => {
                    let (low, high, interior) = (&pads[..rank], &pads[4..4 + rank], &pads[8..8 + rank]);
                    let out = (0..rank)
                        .map(|d| (low[d] + high[d]) as u64 + dims[d] + (dims[d] - 1) * interior[d] as u64)
                        .collect();
                    let op = format!("pad %c, %v {{low = {}, high = {}, interior = {}}}", list(low), list(high), list(interior));
                    (op, vec![out])
                }
                3 => {
                    let n = dims[axis] as i64;
                    let cut = bounds[0].rem_euclid(n + 1);
                    let outs = [cut, n - cut]
                        .iter()
                        .map(|&s| {
                            let mut d = dims.clone();
                            d[axis] = s as u64;
                            d
                        })
                        .collect();
                    (format!("split %c {{axis = {axis}, sizes = [{cut}, {}]}}", n - cut), outs)
                }
                _ => {
                    let picks = &bounds[..3];
                    let mut out = dims[..axis].to_vec();
                    out.push(picks.len() as u64);
                    out.extend_from_slice(&dims[axis + 1..]);
                    (format!("gather %c, %i {{axis = {axis}}}"), vec![out])
                }
            };
            let results: Vec<String> = (0..outs.len()).map(|k| format!("%y{k}")).collect();
            let types: Vec<String> = outs.iter().map(|d| typed(d)).collect();
            let returns: Vec<String> = types.iter().enumerate().map(|(k, t)| format!("y{k}: {t}")).collect();
            let text = format!(
                "graph @g(%x: {x}, %f: f32[]) -> ({}) {{\n  %c = cast %x {{to = {dtype}}} : {}\n  %v = cast %f {{to = {dtype}}} : {dtype}[]\n  %i = constant {{value = dense<{}> : i64[3]}} : i64[3]\n  {} = {op} : {}\n  return {}\n}}\n",
                returns.join(", "),
                typed(&dims),
                list(&bounds[..3].iter().map(|&b| b.clamp(-(dims[axis] as i64), dims[axis] as i64 - 1)).collect::<Vec<_>>()),
                results.join(", "),
                types.join(", "),
                results.join(", "),
                x = shape(&dims),
            );
            let m = module(&text);
            let empty = outs.iter().any(|d| d.contains(&0));
            prop_assert_eq!(copies(&m), usize::from(!empty), "{}", text);
            let interp = Session::new(m.clone(), SessionOptions::default()).unwrap();
            let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
            let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
            let n = dims.iter().product::<u64>() as usize;
            let x: Vec<f32> = common::seeded_f32(n, 3).iter().map(|v| (v * 8.0).round()).collect();
            let dims_usize: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            let req = RunRequest::new("g")
                .feed("x", Arc::new(Tensor::from_data(&dims_usize, TensorData::F32(x)).unwrap()))
                .feed("f", Arc::new(Tensor::from_data(&[], TensorData::F32(vec![5.0])).unwrap()));
            let (want, got) = (interp.run(req.clone()).unwrap(), jit.run(req).unwrap());
            for k in 0..outs.len() {
                let (w, o) = (want.tensor(k).unwrap(), got.tensor(k).unwrap());
                prop_assert!(w.bit_identical(o), "output {k} of\n{text}: {w} against {o}");
            }
            Ok(())
        })
        .unwrap();
}
