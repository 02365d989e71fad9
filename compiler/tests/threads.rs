//! Sessions run from several threads at once, and from inside rayon jobs: a one-graph step runs
//! on the step pool, where a worker waiting for the rest of its split work may run another
//! caller's whole step; per-thread buffers (the packed factors of a transposed product, scratch
//! rows) must not be held across that wait. Every result must equal the interpreter's.

mod common;

use graphc::lower::cpu::CompileOptions;
use graphc_ir::{parse_module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::sync::Arc;

/// A product with a transposed factor that is fed (so it is repacked every call) and large
/// enough to split across threads, then a relu over it.
const GRAPH: &str = "graph @g(%x: f32[64,256], %w: f32[192,256]) -> (y: f32[64,192]) {
  %p = matmul %x, %w {transpose_b = true} : f32[64,192]
  %y = relu %p : f32[64,192]
  return %y
}
";

fn input(shape: &[usize], seed: u32) -> Arc<Tensor> {
    let n: usize = shape.iter().product();
    let v =
        (0..n).map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 2001) as f32 / 1000.0 - 1.0).collect();
    Arc::new(Tensor::from_data(shape, TensorData::F32(v)).unwrap())
}

#[test]
fn steps_from_many_threads_and_rayon_jobs_run_alike() {
    let m = parse_module(GRAPH).unwrap();
    let kernels = common::cpu_kernels(&m, &CompileOptions::default()).unwrap();
    let jit = Session::with_compiled(m.clone(), SessionOptions::default(), kernels).unwrap();
    let interp = Session::new(m, SessionOptions::default()).unwrap();
    let request =
        |seed: u32| RunRequest::new("g").feed("x", input(&[64, 256], seed)).feed("w", input(&[192, 256], seed + 1));
    let want: Vec<Vec<f32>> = (0..8)
        .map(|s| interp.run(request(s)).unwrap().tensor(0).unwrap().f32_elements(None).unwrap().into_owned())
        .collect();
    let check = |seed: u32| {
        let got = jit.run(request(seed)).unwrap_or_else(|e| panic!("step {seed}: {e}"));
        let (got, want) = (got.tensor(0).unwrap().f32_elements(None).unwrap(), &want[seed as usize]);
        let worst = got.iter().zip(want.iter()).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-3, "step {seed}: off by {worst}");
    };
    std::thread::scope(|s| {
        for t in 0..4u32 {
            s.spawn(move || (0..12).for_each(|i| check((t + i) % 8)));
        }
        s.spawn(|| {
            use rayon::prelude::*;
            (0..24u32).into_par_iter().for_each(|i| check(i % 8));
        });
    });
}
