//! What the compiler's integration tests share: running the binary, and the bundled examples.
#![allow(dead_code)] // each test file uses its own part

use graphc::lower::cpu::{CompileOptions, CpuKernels};
use graphc_ir::Module;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

/// The CPU kernels of `m` that tests compare with the interpreter: Cranelift's, or with
/// `GRAPHC_TEST_TIER=llvm` the LLVM tier's in their place (every kernel with code: one the
/// tier cannot write fails the test), or with `GRAPHC_TEST_TIER=cuda` the GPU's where it can
/// run them (on a machine with an NVIDIA GPU). Both need the `llvm` feature.
pub fn cpu_kernels(m: &Module, opts: &CompileOptions) -> Result<Arc<CpuKernels>, String> {
    let kernels = CpuKernels::compile_with(m, opts)?;
    match std::env::var("GRAPHC_TEST_TIER").as_deref() {
        Ok(tier @ ("llvm" | "cuda")) => llvm_tier(tier, m, &kernels, opts)?,
        Ok("cranelift") | Err(_) => {}
        Ok(other) => panic!("GRAPHC_TEST_TIER={other}: the tiers are cranelift, llvm and cuda"),
    }
    Ok(kernels)
}

#[cfg(feature = "llvm")]
fn llvm_tier(tier: &str, m: &Module, kernels: &CpuKernels, opts: &CompileOptions) -> Result<(), String> {
    use graphc::lower::mlir;
    if tier == "cuda" {
        return mlir::cuda::compile_into(m, kernels.table()).map(|_| ());
    }
    // The LLVM tier compiles for the host's instruction set only: --isa sse is Cranelift's.
    let Ok(lanes) = mlir::lanes_for(opts.isa) else { return Ok(()) };
    let tier = mlir::compile_into(m, kernels.table(), lanes)?;
    assert!(tier.kept.is_empty(), "the LLVM tier left kernels to Cranelift: {:?}", tier.kept);
    Ok(())
}

#[cfg(not(feature = "llvm"))]
fn llvm_tier(tier: &str, _: &Module, _: &CpuKernels, _: &CompileOptions) -> Result<(), String> {
    panic!("GRAPHC_TEST_TIER={tier} needs the llvm feature (cargo test --features graphc/llvm)")
}

/// Runs the graphc binary.
pub fn graphc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_graphc")).args(args).output().expect("graphc runs")
}

/// The path of a bundled example (ir-spec/examples/NAME).
pub fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ir-spec/examples").join(name).display().to_string()
}

/// Standard output and standard error as text.
pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// `graphc ARGS`' standard output; fails the test if it fails.
pub fn ok(args: &[&str]) -> String {
    let o = graphc(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc {args:?} failed:\n{out}\n{err}");
    out
}

/// `graphc ARGS`' standard error; fails the test unless it exits 1.
pub fn fails(args: &[&str]) -> String {
    let o = graphc(args);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "graphc {args:?} should fail:\n{out}\n{err}");
    err
}

/// Every bundled example graph file, as (file name, text), sorted by name.
pub fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ir-spec/examples");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gir"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    v.sort();
    v
}

pub mod close;

/// `n` seeded values in [-1, 1], multiples of 1/1000 (xorshift): the same for the same seed.
pub fn seeded_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// A graph whose loop never ends, for time limits and interrupts.
pub const SPIN: &str = "graph @spin(%x: f32[3]) -> (y: f32[3]) {
  %r = while %x : f32[3]
    cond(%c: f32[3]) {
      %t = constant {value = dense<true> : bool[]} : bool[]
      yield %t
    }
    body(%b: f32[3]) {
      %n = neg %b : f32[3]
      yield %n
    }
  return %r
}
";
