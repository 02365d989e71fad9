//! The build's fingerprint: a hash of the sources a compiled program and this library must
//! agree on (the IR's parser and printer, the plans, the runtime, the CPU backend's code
//! generator and run half, the bundle), so a program linked against another graphc's library is refused at
//! start-up instead of running code generated for other plans.

use std::path::{Path, PathBuf};

include!("src/fnv.rs");

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    // Every crate of the library (the runtime too: `graphc compile` picks the library whose
    // fingerprint is its own, so one left from older runtime sources must not pass).
    let dirs = [
        "ir-spec/src",
        "plan/src",
        "runtime/src",
        "cpu-runtime/src",
        "aot/src",
        "compiler/src/lower/cpu",
        "compiler/src/aot",
    ];
    for dir in dirs {
        let d = root.join(dir);
        println!("cargo:rerun-if-changed={}", d.display());
        files(&d, &mut all);
    }
    all.sort();
    let mut h = FNV_OFFSET;
    for f in &all {
        h = fnv1a(h, f.strip_prefix(&root).unwrap_or(f).to_string_lossy().as_bytes());
        h = fnv1a(h, &std::fs::read(f).unwrap_or_default());
    }
    println!("cargo:rustc-env=GRAPHC_AOT_FINGERPRINT={}-{h:016x}", env!("CARGO_PKG_VERSION"));
}
