//! The GPU path without a GPU: every example's GPU kernels become PTX for sm_80 and sm_90
//! that `ptxas` accepts (the one named by `GRAPHC_PTXAS`, which `tests/all.sh` fetches from
//! the `nvidia-cuda-nvcc-cu12` wheel; without it the PTX is only checked to be produced), and
//! the cuda backend on a machine without a GPU is an error that says so. On a machine with an
//! NVIDIA GPU, `GRAPHC_TEST_TIER=cuda` runs `jit.rs` and the differential fuzzer on the GPU's
//! kernels against the interpreter.
#![cfg(feature = "llvm")]

mod common;

use common::examples;
use graphc::lower::mlir::{gpu_listing, ptx::ptx};
use graphc::passes::{PassManager, DEFAULT_PIPELINE};
use graphc_ir::parse_module;
use std::process::Command;

#[test]
fn every_example_gives_ptx_that_ptxas_accepts() {
    let ptxas = std::env::var("GRAPHC_PTXAS").ok();
    if ptxas.is_none() {
        eprintln!("GRAPHC_PTXAS is not set: PTX produced but not assembled (tests/all.sh sets it)");
    }
    let dir = std::env::temp_dir().join(format!("graphc-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kernels = 0;
    for (name, text) in examples() {
        let mut m = parse_module(&text).unwrap();
        PassManager::new(DEFAULT_PIPELINE).unwrap().run(&mut m, &mut |_| {}).unwrap();
        for g in &m.graphs {
            for chip in ["sm_80", "sm_90"] {
                let (text, ks, _) = gpu_listing(&m, &g.name, chip).unwrap();
                if ks.is_empty() {
                    continue;
                }
                kernels += ks.len();
                let code = ptx(&text).unwrap_or_else(|e| panic!("{name} @{}: {e}", g.name));
                assert!(code.contains(&format!(".target {chip}")), "{name} @{}: PTX for another target", g.name);
                assert!(!code.contains('\0'), "{name} @{}: a NUL byte in the PTX", g.name);
                for k in &ks {
                    assert!(code.contains(&format!(".entry {}", k.name)), "{name}: no entry {}", k.name);
                }
                let Some(ptxas) = &ptxas else { continue };
                let file = dir.join(format!("{}_{}_{chip}.ptx", name.trim_end_matches(".gir"), g.name));
                std::fs::write(&file, &code).unwrap();
                let out = Command::new(ptxas)
                    .arg(format!("-arch={chip}"))
                    .arg(&file)
                    .arg("-o")
                    .arg(file.with_extension("cubin"))
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{name} @{} {chip}: ptxas: {}",
                    g.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(kernels >= 6, "only {kernels} GPU kernels over every example");
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
