//! `graphc compile` for CPUs, end to end: executables against `graphc run` on every example
//! (the interpreter within the examples' bound, the JIT on the same instruction set bit for
//! bit), a C program linking the object and the static library, the command line's errors,
//! weights in a file of their own, and an aarch64 object.

mod common;

use common::close::{check_close, Bound};
use common::{example, examples, graphc, text};
use graphc_runtime::npy::read_npy;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the run-time library beside the graphc binary under test (same profile), once.
fn runtime_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_graphc"));
        let dir = bin.parent().unwrap().to_path_buf();
        let profile = match dir.file_name().unwrap().to_str().unwrap() {
            "debug" => "dev".to_string(),
            other => other.to_string(),
        };
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "graphc-aot", "--profile", &profile])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo build -p graphc-aot failed");
        let lib = dir.join("libgraphc_aot.a");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
}

/// A scratch directory, removed when dropped (debug executables are 100 MB each).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("graphc-aot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// `graphc compile ARGS`, asserting success.
fn compile(args: &[&str]) {
    runtime_library();
    let o = graphc(&[&["compile"], args].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "graphc compile {args:?} failed:\n{out}{err}");
}

fn run_exe(exe: &Path, args: &[&str]) -> std::process::Output {
    Command::new(exe).args(args).output().expect("the executable runs")
}

/// The .npy files of a directory, by file name.
fn outputs(dir: &Path) -> Vec<(String, graphc_runtime::Tensor)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|r| r.map(|e| e.unwrap().path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), read_npy(&p).unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn every_example_compiles_to_an_executable_that_runs_as_graphc_run() {
    let dir = scratch("examples");
    let mut checked = 0;
    for (name, _) in examples() {
        let stem = name.trim_end_matches(".gir");
        let exe = dir.join(stem);
        compile(&[&example(&name), "-o", exe.to_str().unwrap()]);
        let (aot, interp, jit) =
            (dir.join(format!("{stem}.aot")), dir.join(format!("{stem}.interp")), dir.join(format!("{stem}.jit")));
        let o = run_exe(&exe, &["--out-dir", aot.to_str().unwrap()]);
        assert!(o.status.success(), "{name}: the executable failed: {}", text(&o).1);
        for (backend, out, isa) in [("interp", &interp, "native"), ("jit", &jit, "sse")] {
            let o = graphc(&[
                "run",
                &example(&name),
                "--backend",
                backend,
                "--isa",
                isa,
                "--out-dir",
                out.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{name}: graphc run --backend {backend} failed: {}", text(&o).1);
        }
        let (a, i, j) = (outputs(&aot), outputs(&interp), outputs(&jit));
        assert_eq!(a.iter().map(|x| &x.0).collect::<Vec<_>>(), i.iter().map(|x| &x.0).collect::<Vec<_>>(), "{name}");
        for (((file, got), (_, want)), (_, same)) in a.iter().zip(&i).zip(&j) {
            // The examples' end-to-end bound, as jit.rs checks the JIT against the interpreter.
            check_close(got, want, Bound::Rel(1e-4, 1e-4)).unwrap_or_else(|e| panic!("{name}: {file}: {e}"));
            // The same code as the JIT's on the baseline's instruction set: bit for bit.
            check_close(got, same, Bound::Rel(0.0, 0.0))
                .unwrap_or_else(|e| panic!("{name}: {file} against the JIT: {e}"));
            checked += 1;
        }
        // The same lines as graphc run's (less the timing): random inputs and summaries.
        let summary = |o: &std::process::Output| -> Vec<String> {
            text(o).0.lines().filter(|l| !l.contains(" ms (")).map(str::to_string).collect()
        };
        let o = run_exe(&exe, &["--seed", "3"]);
        let r = graphc(&["run", &example(&name), "--seed", "3", "--isa", "sse"]);
        assert_eq!(summary(&o), summary(&r), "{name}: summaries");
        if stem != "mlp" {
            std::fs::remove_file(&exe).unwrap();
        }
    }
    assert!(checked >= 30, "{checked} outputs checked");
    // Nothing but glibc: libgcc is linked statically.
    let o = Command::new("ldd").arg(dir.join("mlp")).output().expect("ldd runs");
    for line in text(&o).0.lines() {
        let lib = line.split_whitespace().next().unwrap_or("");
        assert!(
            [
                "linux-vdso.so.1",
                "libc.so.6",
                "libm.so.6",
                "libpthread.so.0",
                "libdl.so.2",
                "librt.so.1",
                "libutil.so.1"
            ]
            .contains(&lib)
                || lib.contains("ld-linux"),
            "the executable needs {lib}"
        );
    }
}

#[test]
fn the_executable_gives_graphc_runs_errors_for_bad_inputs() {
    let dir = scratch("errors");
    let exe = dir.join("mlp");
    compile(&[&example("mlp.gir"), "-o", exe.to_str().unwrap()]);
    let wrong_shape = dir.join("x.npy");
    graphc_runtime::npy::write_npy(&wrong_shape, &graphc_runtime::Tensor::scalar_f32(1.0)).unwrap();
    let not_npy = dir.join("bad.npy");
    std::fs::write(&not_npy, b"not an npy file").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--input".into(), format!("x={}", dir.join("missing.npy").display())],
        vec!["--input".into(), format!("x={}", wrong_shape.display())],
        vec!["--input".into(), format!("x={}", not_npy.display())],
        vec!["--input".into(), format!("nosuch={}", wrong_shape.display())],
        vec!["--input".into(), "x".into()],
        vec!["--graph".into(), "nosuch".into()],
    ];
    for args in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_exe(&exe, &args);
        let r = graphc(&[&["run", &example("mlp.gir")], args.as_slice()].concat());
        let (err, want) = (text(&o).1, text(&r).1);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        // graphc names the file it loaded where the program names its source.
        assert_eq!(err, want, "{args:?}");
    }
    let o = run_exe(&exe, &["--no-such-flag"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn inputs_fixed_at_compile_time_become_constants() {
    let dir = scratch("fixed");
    let b2 = dir.join("b2.npy");
    let t = graphc_runtime::Tensor::from_data(&[10], graphc_ir::TensorData::F32((0..10).map(|i| i as f32).collect()));
    graphc_runtime::npy::write_npy(&b2, &t.unwrap()).unwrap();
    let exe = dir.join("mlp");
    let flag = format!("b2={}", b2.display());
    compile(&[&example("mlp.gir"), "-o", exe.to_str().unwrap(), "--input", &flag]);
    let (aot, run) = (dir.join("aot"), dir.join("run"));
    let o = run_exe(&exe, &["--out-dir", aot.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let r = graphc(&["run", &example("mlp.gir"), "--input", &flag, "--out-dir", run.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r).1);
    for ((f, got), (_, want)) in outputs(&aot).iter().zip(&outputs(&run)) {
        check_close(got, want, Bound::Rel(1e-4, 1e-4)).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    // The input is gone from the program, and a value of the wrong type is refused.
    let o = run_exe(&exe, &["--input", &flag]);
    assert!(text(&o).1.contains("no input of that name"), "{}", text(&o).1);
    let bad = format!("w2={}", b2.display());
    let o = graphc(&["compile", &example("mlp.gir"), "-o", exe.to_str().unwrap(), "--input", &bad]);
    assert!(text(&o).1.contains("input 'w2' of @mlp: expected f32[256,10], got f32[10]"), "{}", text(&o).1);
}

/// A C program that trains @step of train_step.gir (a training step: matmuls, reductions and
/// variable updates) towards w = [1, 2, 3, 4], b = 0.5, reads the weights, sets them in
/// @predict's context and checks its outputs.
const C_PROGRAM: &str = r#"
#include <math.h>
#include <stdio.h>
#include "model.h"

int main(void) {
    float x[8][4], t[8][1], loss, w[4][1], b[1], y[8][1];
    for (int i = 0; i < 8; i++) {
        t[i][0] = 0.5f;
        for (int j = 0; j < 4; j++) {
            x[i][j] = (float)((i * 7 + j * 3) % 5) - 2.0f;
            t[i][0] += (float)(j + 1) * x[i][j];
        }
    }
    _Static_assert(STEP_INPUT_0_BYTES == sizeof x, "input 0's size");
    _Static_assert(STEP_NUM_OUTPUTS == 1 && STEP_OUTPUT_0_BYTES == sizeof loss, "output's size");
    step_ctx *s = step_create();
    predict_ctx *p = predict_create();
    if (!s || !p) return 10;
    const void *in[] = {x, t};
    void *out[] = {&loss};
    float first = -1;
    for (int k = 0; k < 400; k++) {
        if (step_run(s, in, out) != 0) { fprintf(stderr, "%s\n", step_error_message(s)); return 11; }
        if (k == 0) first = loss;
    }
    if (step_read_variable(s, "w", w) || step_read_variable(s, "b", b)) return 12;
    for (int j = 0; j < 4; j++)
        if (fabsf(w[j][0] - (float)(j + 1)) > 1e-3f) { fprintf(stderr, "w[%d] = %g\n", j, w[j][0]); return 13; }
    if (fabsf(b[0] - 0.5f) > 1e-3f) return 14;
    if (predict_write_variable(p, "w", w) || predict_write_variable(p, "b", b)) return 15;
    const void *pin[] = {x};
    void *pout[] = {y};
    if (predict_run(p, pin, pout) != 0) return 16;
    for (int i = 0; i < 8; i++)
        if (fabsf(y[i][0] - t[i][0]) > 1e-2f) return 17;
    /* Errors are statuses with a message, never a crash. */
    if (predict_read_variable(p, "nosuch", w) != 1) return 18;
    if (predict_error_message(p)[0] == 0) return 19;
    if (predict_run(p, NULL, pout) != 1) return 20;
    /* A context sharing the step's session sees the trained variables without a copy, and
       outlives the context it shares with. */
    predict_ctx *q = predict_create_sharing(s);
    if (!q) return 21;
    step_destroy(s);
    for (int i = 0; i < 8; i++) y[i][0] = 0;
    if (predict_run(q, pin, pout) != 0) { fprintf(stderr, "%s\n", predict_error_message(q)); return 22; }
    for (int i = 0; i < 8; i++)
        if (fabsf(y[i][0] - t[i][0]) > 1e-2f) return 23;
    if (predict_create_sharing(NULL) != NULL) return 24;
    printf("loss %g -> %g\n", first, loss);
    predict_destroy(q);
    predict_destroy(p);
    return 0;
}
"#;

fn build_and_run_c(dir: &Path, link: &[&Path]) -> String {
    std::fs::write(dir.join("main.c"), C_PROGRAM).unwrap();
    let exe = dir.join("main");
    let o = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(dir.join("main.c"))
        .arg("-I")
        .arg(dir)
        .args(link)
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("cc runs");
    assert!(o.status.success(), "cc failed: {}", text(&o).1);
    let o = run_exe(&exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "the C program failed ({:?}): {out}{err}", o.status.code());
    out
}

#[test]
fn a_c_program_links_the_object_and_the_static_library() {
    let dir = scratch("c-obj");
    compile(&[&example("train_step.gir"), "--emit", "obj", "-o", dir.join("model").to_str().unwrap()]);
    let header = std::fs::read_to_string(dir.join("model.h")).unwrap();
    for want in [
        "step_ctx *step_create(void);",
        "predict_ctx *predict_create_sharing(const void *other);",
        "#define STEP_INPUT_0_SHAPE {8, 4}",
        "#define PREDICT_VARIABLE_0_NAME \"b\"",
    ] {
        assert!(header.contains(want), "the header lacks {want}:\n{header}");
    }
    let out = build_and_run_c(&dir, &[&dir.join("model.o"), runtime_library()]);
    assert!(out.starts_with("loss "), "{out}");

    let dir = scratch("c-lib");
    compile(&[&example("train_step.gir"), "--emit", "staticlib", "-o", dir.join("libmodel.a").to_str().unwrap()]);
    std::fs::rename(dir.join("libmodel.h"), dir.join("model.h")).unwrap();
    build_and_run_c(&dir, &[&dir.join("libmodel.a")]);
}

#[test]
fn weights_go_to_a_file_of_their_own() {
    // mlp_train.gir's variables start from literal weights: three steps of @step on them.
    let dir = scratch("weights");
    let exe = dir.join("mlp");
    let weights = dir.join("mlp.safetensors");
    compile(&[&example("mlp_train.gir"), "-o", exe.to_str().unwrap(), "--weights-file", weights.to_str().unwrap()]);
    let size = std::fs::metadata(&weights).unwrap().len();
    assert!(size > 4000, "the weights file holds the initial weights: {size} bytes");
    let inline = dir.join("mlp-inline");
    compile(&[&example("mlp_train.gir"), "-o", inline.to_str().unwrap()]);
    let args = ["--graph", "step", "--steps", "3", "--seed", "5"];
    let a = run_exe(&exe, &args);
    let b = run_exe(&inline, &args);
    assert!(a.status.success(), "{}", text(&a).1);
    let strip =
        |o: &std::process::Output| text(o).0.lines().filter(|l| !l.contains(" ms (")).collect::<Vec<_>>().join("\n");
    assert!(strip(&b).contains("step 3: loss="), "{}", strip(&b));
    assert_eq!(strip(&a), strip(&b));
    // The file is looked for beside the executable, so the two move together.
    let moved = scratch("weights-moved");
    std::fs::copy(&exe, moved.join("mlp")).unwrap();
    std::fs::copy(&weights, moved.join("mlp.safetensors")).unwrap();
    std::fs::remove_file(&weights).unwrap();
    let c = run_exe(&moved.join("mlp"), &args);
    assert_eq!(strip(&c), strip(&b));
    std::fs::remove_file(moved.join("mlp.safetensors")).unwrap();
    let d = run_exe(&moved.join("mlp"), &args);
    assert_eq!(d.status.code(), Some(1));
    assert!(text(&d).1.contains("weights"), "{}", text(&d).1);
    // Weights inside the program take no file.
    let e = run_exe(&inline, &["--weights", moved.join("x").to_str().unwrap()]);
    assert!(text(&e).1.contains("weights are in the program"), "{}", text(&e).1);
}

#[test]
fn an_aarch64_object_cross_compiles() {
    let dir = scratch("aarch64");
    let out = dir.join("mlp");
    compile(&[
        &example("mlp.gir"),
        "--emit",
        "obj",
        "--target",
        "aarch64-unknown-linux-gnu",
        "-o",
        out.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(dir.join("mlp.o")).unwrap();
    // ELF64, little-endian, relocatable, machine 183 (EM_AARCH64).
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!((bytes[4], bytes[5]), (2, 1));
    assert_eq!(u16::from_le_bytes([bytes[16], bytes[17]]), 1);
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), 183);
    assert!(std::fs::read_to_string(dir.join("mlp.h")).unwrap().contains("mlp_create"));
    // And as binutils reads it, where installed (gcc brings it): the entry points are there.
    if let Ok(o) = Command::new("readelf").args(["-h", "-s"]).arg(dir.join("mlp.o")).output() {
        let (out, _) = text(&o);
        assert!(out.contains("AArch64"), "{out}");
        for sym in ["mlp_create", "mlp_run", "mlp_destroy", "graphc_aot_create"] {
            assert!(out.contains(sym), "readelf shows no {sym}:\n{out}");
        }
    }
    // Only 64-bit little-endian Linux targets, and --cpu native only for the host.
    for (args, want) in [
        (vec!["--target", "x86_64-pc-windows-msvc"], "graphc compiles for x86_64-unknown-linux-gnu"),
        (vec!["--target", "aarch64-unknown-linux-gnu", "--cpu", "native"], "--cpu native is for the host"),
    ] {
        let o = graphc(
            &[&["compile", &example("mlp.gir"), "--emit", "obj", "-o", out.to_str().unwrap()], args.as_slice()]
                .concat(),
        );
        assert_eq!(o.status.code(), Some(1));
        assert!(text(&o).1.contains(want), "{args:?}: {}", text(&o).1);
    }
    // An executable for another target needs a run-time library built for it.
    let o =
        graphc(&["compile", &example("mlp.gir"), "--target", "aarch64-unknown-linux-gnu", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("--emit obj"), "{}", text(&o).1);
}

/// `graphc compile ARGS`, asserting it fails with one line (exit 1) containing `what`.
fn compile_fails(args: &[&str], what: &str) {
    let o = graphc(&[&["compile"], args].concat());
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "graphc compile {args:?}:\n{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains(what), "graphc compile {args:?}: expected '{what}' in: {err}");
}

#[test]
fn compile_never_replaces_a_device_a_fifo_its_source_or_its_weights() {
    runtime_library();
    let dir = scratch("clobber");
    let source = dir.join("mlp.gir");
    std::fs::copy(example("mlp.gir"), &source).unwrap();
    let src = source.to_str().unwrap();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let null = dir.join("null");
    std::os::unix::fs::symlink("/dev/null", &null).unwrap();
    for emit in ["exe", "staticlib"] {
        for (out, is) in
            [(&fifo, "is a FIFO"), (&null, "is a character device"), (&"/dev/null".into(), "is a character device")]
        {
            compile_fails(&[src, "--emit", emit, "-o", out.to_str().unwrap()], is);
        }
    }
    // An object's header too: x.o's is x.h.
    let header = dir.join("x.h");
    assert!(Command::new("mkfifo").arg(&header).status().unwrap().success());
    compile_fails(&[src, "--emit", "obj", "-o", dir.join("x.o").to_str().unwrap()], "the C header");
    std::fs::remove_file(&header).unwrap();
    assert!(std::fs::symlink_metadata(&null).unwrap().file_type().is_symlink());
    // The source, the weights file, and the object's header are not written over.
    compile_fails(&[src, "-o", src], "is the model");
    let weights = dir.join("w.safetensors");
    let w = weights.to_str().unwrap();
    compile_fails(&[src, "-o", w, "--weights-file", w], "are the same file");
    compile_fails(
        &[
            src,
            "--emit",
            "obj",
            "-o",
            dir.join("mlp.o").to_str().unwrap(),
            "--weights-file",
            dir.join("mlp.h").to_str().unwrap(),
        ],
        "are the same file",
    );
    assert_eq!(std::fs::read_to_string(&source).unwrap(), std::fs::read_to_string(example("mlp.gir")).unwrap());
    // A directory, and a directory that is not there, are named as such.
    let d = format!("{}/", dir.display());
    compile_fails(&[src, "--emit", "obj", "-o", &d], "a directory; give the path of the file to write");
    let missing = dir.join("missing/x");
    compile_fails(
        &[src, "-o", missing.to_str().unwrap()],
        &format!("there is no directory {}", dir.join("missing").display()),
    );
    // Nothing was left beside the outputs.
    let mut left: Vec<String> =
        std::fs::read_dir(&*dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["fifo", "mlp.gir", "null"]);
    // A program written over a plain file is executable.
    let exe = dir.join("prog");
    std::fs::write(&exe, "old").unwrap();
    compile(&[src, "-o", exe.to_str().unwrap()]);
    assert!(run_exe(&exe, &[]).status.success());
}

#[test]
fn the_executable_bounds_a_step_by_timeout_and_its_inputs_by_memory_limit() {
    let dir = scratch("limits");
    let spin = dir.join("spin.gir");
    std::fs::write(&spin, common::SPIN).unwrap();
    let exe = dir.join("spin");
    compile(&[spin.to_str().unwrap(), "-o", exe.to_str().unwrap()]);
    let start = std::time::Instant::now();
    let o = run_exe(&exe, &["--timeout", "0.5"]);
    assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", start.elapsed());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    assert!(text(&o).1.contains("the step ran longer than its time limit of 0.5s"), "{}", text(&o).1);
    // mlp.gir's random inputs take about 1 MiB.
    let mlp = dir.join("mlp");
    compile(&[&example("mlp.gir"), "-o", mlp.to_str().unwrap()]);
    let o = run_exe(&mlp, &["--memory-limit", "300KiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    assert!(text(&o).1.contains("the memory limit leaves for the inputs"), "{}", text(&o).1);
    assert!(run_exe(&mlp, &["--memory-limit", "64MiB", "--timeout", "60"]).status.success());
    let o = run_exe(&mlp, &["--timeout", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    // Its outputs never replace its inputs: output probs, from input x read from probs.npy.
    let x = dir.join("probs.npy");
    let t = graphc_runtime::Tensor::from_data(&[64, 784], graphc_ir::TensorData::F32(vec![0.5; 64 * 784])).unwrap();
    graphc_runtime::npy::write_npy(&x, &t).unwrap();
    let o = run_exe(&mlp, &["--input", &format!("x={}", x.display()), "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    assert!(text(&o).1.contains("is the --input file of 'x'"), "{}", text(&o).1);
    assert!(read_npy(&x).unwrap().bit_identical(&t));
}

#[test]
fn a_training_checkpoint_ships_in_the_executable() {
    let dir = scratch("restore");
    let model = example("mlp_train.gir");
    let data = example("data/spirals");
    let ckpt = dir.join("spirals.ckpt");
    let (ckpt_s, dir_s) = (ckpt.to_str().unwrap(), dir.to_str().unwrap());
    let o = graphc(&["train", &model, "--graph", "step", "--steps", "150", "--data", &data, "--checkpoint", ckpt_s]);
    assert!(o.status.success(), "graphc train: {}", text(&o).1);
    let (x, label) = (format!("x={data}/x.npy"), format!("label={data}/label.npy"));
    let feeds = ["--input", x.as_str(), "--input", label.as_str()];
    let out = |name: &str| format!("{dir_s}/{name}");
    let accuracy = |sub: &str| outputs(&dir.join(sub)).remove(0).1;

    // Compiled with the checkpoint: the trained model, as graphc run --restore computes it (the
    // same code on the same instruction set, bit for bit).
    let trained = dir.join("trained");
    compile(&[&model, "--graph", "accuracy", "--restore", ckpt_s, "-o", trained.to_str().unwrap()]);
    let o = run_exe(&trained, &[&feeds[..], &["--out-dir", &out("aot")]].concat());
    assert!(o.status.success(), "{}", text(&o).1);
    let o = graphc(
        &[
            &["run", &model, "--graph", "accuracy", "--restore", ckpt_s, "--isa", "sse"],
            &feeds[..],
            &["--out-dir", &out("run")],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o).1);
    check_close(&accuracy("aot"), &accuracy("run"), Bound::Rel(0.0, 0.0)).unwrap();
    // Compiled without it, the program starts from the module's initial weights.
    let initial = dir.join("initial");
    compile(&[&model, "--graph", "accuracy", "-o", initial.to_str().unwrap()]);
    let o = run_exe(&initial, &[&feeds[..], &["--out-dir", &out("initial.out")]].concat());
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(
        check_close(&accuracy("initial.out"), &accuracy("run"), Bound::Rel(0.0, 0.0)).is_err(),
        "training changed nothing"
    );

    // The executable restores a checkpoint itself, and fetches by name.
    let o = run_exe(
        &initial,
        &[&feeds[..], &["--restore", ckpt_s, "--fetch", "accuracy", "--out-dir", &out("restored")]].concat(),
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("restored 24 variables from") && stdout.contains("(saved at step 150)"), "{stdout}");
    check_close(&accuracy("restored"), &accuracy("run"), Bound::Rel(0.0, 0.0)).unwrap();
    let o = run_exe(&initial, &[&feeds[..], &["--fetch", "accuracyy"]].concat());
    let stderr = text(&o).1;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr.contains("cannot fetch 'accuracyy'") && stderr.contains("did you mean 'accuracy'"), "{stderr}");
    let two = dir.join("two");
    compile(&[&example("train_step.gir"), "-o", two.to_str().unwrap()]);
    let o = run_exe(&two, &["--graph", "step", "--graph", "predict", "--fetch", "loss"]);
    assert!(text(&o).1.contains("--fetch works on one graph"), "{}", text(&o).1);

    // A checkpoint given where the weights file goes says what to do instead.
    let split = dir.join("split");
    let weights = dir.join("split.safetensors");
    compile(&[
        &model,
        "--graph",
        "accuracy",
        "-o",
        split.to_str().unwrap(),
        "--weights-file",
        weights.to_str().unwrap(),
    ]);
    let o = run_exe(&split, &["--weights", ckpt_s]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("a checkpoint of variables is given with --restore"), "{}", text(&o).1);

    // Another model's checkpoint is refused, naming the differences; so is a missing one.
    let other = dir.join("other.ckpt");
    let o = graphc(&["run", &example("train_step.gir"), "--graph", "step", "--checkpoint", other.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let exe = out("never");
    compile_fails(&[&model, "--restore", other.to_str().unwrap(), "-o", &exe], "does not match the module's variables");
    compile_fails(&[&model, "--restore", &out("missing.ckpt"), "-o", &exe], "missing.ckpt");
    // Nor may the program replace the checkpoint.
    compile_fails(&[&model, "--restore", ckpt_s, "-o", ckpt_s], "spirals.ckpt");
    assert!(!Path::new(&exe).exists());
}

#[test]
fn the_run_time_library_is_found_where_cargo_built_it_and_a_foreign_one_is_refused() {
    runtime_library();
    let dir = scratch("lookup");
    // A copy of graphc with nothing beside it finds the library in the target directory it
    // was built in.
    let copy = dir.join("graphc");
    std::fs::copy(env!("CARGO_BIN_EXE_graphc"), &copy).unwrap();
    let exe = dir.join("mlp");
    let o = Command::new(&copy).args(["compile", &example("mlp.gir"), "-o", exe.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(run_exe(&exe, &[]).status.success());
    // A library of another build (no fingerprint of this one) is refused at compile time.
    let foreign = dir.join("libgraphc_aot.a");
    std::fs::write(&foreign, b"!<arch>\nnot this graphc's library\n").unwrap();
    let o = Command::new(&copy)
        .args(["compile", &example("mlp.gir"), "-o", exe.to_str().unwrap()])
        .env("GRAPHC_AOT_LIB", &foreign)
        .output()
        .unwrap();
    let stderr = text(&o).1;
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("from another build of graphc"), "{stderr}");
    // Beside the binary, it is passed over for this build's.
    let o = Command::new(&copy).args(["compile", &example("mlp.gir"), "-o", exe.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
}
