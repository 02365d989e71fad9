//! Weights beside the text: `graphc import` and `graphc opt -o` write large literals to
//! `OUT.weights.safetensors`, which the `.gir` names; everything that reads a `.gir` reads
//! them (run on every backend bit for bit as the ONNX model and the all-inline text, fmt,
//! check, opt, an AOT executable); no output replaces a weights file a command reads.

mod common;

use common::{fails, ok, text};
use graphc_ir::TensorData;
use graphc_runtime::{npy, Tensor};
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-weights-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn seeded(n: usize, seed: u64) -> Vec<f32> {
    common::seeded_f32(n, seed)
}

/// An ONNX model `y = x @ W + b`: `x: f32[2,64]`, the initializer `W: f32[64,48]` (3072
/// elements, over the weights file's threshold) and `b: f32[48]` (under it).
fn onnx_matmul_model(path: &Path) {
    use graphc_onnx::proto::*;
    use prost::Message;
    let vi = |name: &str, dims: &[i64]| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: Some(data_type::FLOAT),
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { dim_value: Some(d), dim_param: None }).collect(),
                }),
            }),
            ..Default::default()
        }),
    };
    let init = |name: &str, dims: &[i64], v: Vec<f32>| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type::FLOAT),
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    };
    let node = |op: &str, inputs: &[&str], output: &str| NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: Some(output.into()),
        op_type: Some(op.into()),
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![node("MatMul", &["x", "W"], "xw"), node("Add", &["xw", "b"], "y")],
        name: Some("g".into()),
        initializer: vec![init("W", &[64, 48], seeded(64 * 48, 1)), init("b", &[48], seeded(48, 2))],
        input: vec![vi("x", &[2, 64])],
        output: vec![vi("y", &[2, 48])],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        producer_name: Some("test".into()),
        graph: Some(graph),
    };
    std::fs::write(path, model.encode_to_vec()).unwrap();
}

/// `graphc run MODEL --backend B` fed `x`, its output `y`'s bytes (the .npy file).
fn run_y(model: &Path, x: &Path, backend: &str, out: &Path) -> Vec<u8> {
    ok(&["run", s(model), "--backend", backend, "--input", &format!("x={}", s(x)), "--out-dir", s(out)]);
    std::fs::read(out.join("y.npy")).unwrap()
}

fn x_input(dir: &Path) -> PathBuf {
    let x = dir.join("x.npy");
    npy::write_npy(&x, &Tensor::from_data(&[2, 64], TensorData::F32(seeded(128, 3))).unwrap()).unwrap();
    x
}

#[test]
fn import_writes_large_initializers_beside_the_text_and_runs_as_the_onnx_model() {
    let dir = tmpdir("import");
    let onnx = dir.join("m.onnx");
    onnx_matmul_model(&onnx);
    let gir = dir.join("m.gir");
    assert_eq!(ok(&["import", s(&onnx), "-o", s(&gir)]), "");
    let weights = dir.join("m.weights.safetensors");
    let gir_text = std::fs::read_to_string(&gir).unwrap();
    assert!(
        gir_text.contains("constant {value = safetensors<\"m.weights.safetensors\", \"W\"> : f32[64,48]}"),
        "{gir_text}"
    );
    assert!(
        gir_text.contains("dense<[") && gir_text.contains("]> : f32[48]"),
        "the bias stays in the text:\n{gir_text}"
    );
    assert!(gir_text.len() < 2000, "{} bytes of text", gir_text.len());
    let size = std::fs::metadata(&weights).unwrap().len();
    assert!((64 * 48 * 4..64 * 48 * 4 + 200).contains(&size), "{size}");
    // All inline: --inline-weights, and standard output.
    let inline = dir.join("inline.gir");
    ok(&["import", s(&onnx), "-o", s(&inline), "--inline-weights"]);
    assert!(!dir.join("inline.weights.safetensors").exists());
    let inline_text = std::fs::read_to_string(&inline).unwrap();
    assert!(!inline_text.contains("safetensors<") && inline_text.len() > 20_000);
    assert_eq!(ok(&["import", s(&onnx)]).trim_end(), inline_text.trim_end());
    assert_eq!(ok(&["import", s(&onnx), "-o", "-"]).trim_end(), inline_text.trim_end());
    // The weights file's text is the inline text once its elements are put back.
    let inlined = ok(&["opt", s(&gir), "--passes", "dce"]);
    assert_eq!(inlined.trim_end(), ok(&["opt", s(&inline), "--passes", "dce"]).trim_end());

    // Runs as the ONNX model and the inline text do, bit for bit, on each backend; from
    // another working directory (the weights file is the .gir's directory's).
    let x = x_input(&dir);
    for backend in ["interp", "jit"] {
        let want = run_y(&onnx, &x, backend, &dir.join(format!("onnx-{backend}")));
        assert_eq!(run_y(&inline, &x, backend, &dir.join(format!("inline-{backend}"))), want, "{backend}");
        let o = Command::new(env!("CARGO_BIN_EXE_graphc"))
            .current_dir(std::env::temp_dir())
            .args(["run", s(&gir), "--backend", backend, "--input", &format!("x={}", s(&x)), "--out-dir"])
            .arg(dir.join(format!("gir-{backend}")))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        assert_eq!(std::fs::read(dir.join(format!("gir-{backend}/y.npy"))).unwrap(), want, "{backend}");
    }
    // And it is the model's product: x @ W + b computed here (in f64; the interpreter sums
    // in f32, in its own order).
    let y = npy::read_npy(&dir.join("gir-interp/y.npy")).unwrap().to_f64_vec();
    let (xs, ws, bs) = (seeded(128, 3), seeded(64 * 48, 1), seeded(48, 2));
    for i in 0..2 {
        for j in 0..48 {
            let dot: f64 = (0..64).map(|k| xs[i * 64 + k] as f64 * ws[k * 48 + j] as f64).sum::<f64>() + bs[j] as f64;
            assert!((y[i * 48 + j] - dot).abs() < 1e-4, "y[{i},{j}] = {} where x @ W + b = {dot}", y[i * 48 + j]);
        }
    }

    // fmt and check round-trip the module with its weights file.
    ok(&["fmt", "--check", s(&gir)]);
    ok(&["check", s(&gir)]);
    ok(&["fmt", "--in-place", s(&gir)]);
    assert_eq!(std::fs::read_to_string(&gir).unwrap(), gir_text);
}

#[test]
fn weights_as_variables_take_their_initial_values_from_the_file() {
    let dir = tmpdir("variables");
    let onnx = dir.join("m.onnx");
    onnx_matmul_model(&onnx);
    let gir = dir.join("v.gir");
    ok(&["import", s(&onnx), "--weights-as-variables", "-o", s(&gir)]);
    let text = std::fs::read_to_string(&gir).unwrap();
    assert!(
        text.contains("variable {name = \"W\", init = safetensors<\"v.weights.safetensors\", \"W\"> : f32[64,48]}"),
        "{text}"
    );
    let x = x_input(&dir);
    let want = run_y(&onnx, &x, "interp", &dir.join("onnx"));
    assert_eq!(run_y(&gir, &x, "interp", &dir.join("gir")), want);
    // A checkpoint of the variables holds the file's values.
    let ck = dir.join("ck.safetensors");
    ok(&["run", s(&gir), "--input", &format!("x={}", s(&x)), "--checkpoint", s(&ck)]);
    assert!(std::fs::metadata(&ck).unwrap().len() > 64 * 48 * 4);
}

#[test]
fn opt_writes_weights_beside_its_output_and_folded_constants_go_there_too() {
    let dir = tmpdir("opt");
    let onnx = dir.join("m.onnx");
    onnx_matmul_model(&onnx);
    let gir = dir.join("m.gir");
    ok(&["import", s(&onnx), "-o", s(&gir)]);
    // Folding W * 2 makes a new large constant: it goes to the new file, W with it.
    let text = std::fs::read_to_string(&gir).unwrap();
    let doubled = text
        .replace("%xw = matmul %x, %W", "%w2 = add %W, %W : f32[64,48]\n  %xw = matmul %x, %w2")
        .replace("graph @g", "graph @g2");
    assert_ne!(doubled, text);
    let src = dir.join("d.gir");
    std::fs::write(&src, &doubled).unwrap();
    ok(&["check", s(&src)]);
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("o.gir");
    ok(&["opt", s(&src), "--passes", "fold,dce", "-o", s(&out)]);
    let opt_text = std::fs::read_to_string(&out).unwrap();
    // Unnamed, it is named by its graph and node number.
    assert!(opt_text.contains("constant {value = safetensors<\"o.weights.safetensors\", \"g2/"), "{opt_text}");
    assert!(!opt_text.contains("m.weights") && !opt_text.contains("add %W"), "{opt_text}");
    let x = x_input(&dir);
    assert_eq!(run_y(&out, &x, "interp", &dir.join("a")), run_y(&src, &x, "interp", &dir.join("b")));
    // Standard output gets every literal in the text; so does --inline-weights.
    let printed = ok(&["opt", s(&src), "--passes", "fold,dce"]);
    assert!(!printed.contains("safetensors<") && printed.len() > 20_000);
    let inline = out_dir.join("i.gir");
    ok(&["opt", s(&src), "--passes", "fold,dce", "-o", s(&inline), "--inline-weights"]);
    assert_eq!(std::fs::read_to_string(&inline).unwrap().trim_end(), printed.trim_end());
    assert!(!out_dir.join("i.weights.safetensors").exists());
    // --emit other than ir writes no weights file.
    ok(&["opt", s(&src), "--emit", "plan", "-o", s(&out_dir.join("p.txt"))]);
    assert!(!out_dir.join("p.txt.weights.safetensors").exists());
}

#[test]
fn no_output_replaces_a_weights_file_the_model_names() {
    let dir = tmpdir("outputs");
    let onnx = dir.join("m.onnx");
    onnx_matmul_model(&onnx);
    let gir = dir.join("m.gir");
    ok(&["import", s(&onnx), "-o", s(&gir)]);
    let weights = dir.join("m.weights.safetensors");
    let before = std::fs::read(&weights).unwrap();
    // A .gir whose weights file is the one `opt -o o.gir` would write.
    let other = dir.join("p.gir");
    std::fs::write(&other, std::fs::read_to_string(&gir).unwrap().replace("m.weights.", "o.weights.")).unwrap();
    std::fs::copy(&weights, dir.join("o.weights.safetensors")).unwrap();
    let o_gir = dir.join("o.gir");
    for args in [
        vec!["run", s(&gir), "--checkpoint", s(&weights)],
        vec!["run", s(&gir), "--trace", s(&weights)],
        vec!["opt", s(&other), "-o", s(&o_gir)],
    ] {
        let err = fails(&args);
        assert!(err.contains("is the model's weights file") && err.lines().count() == 1, "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&weights).unwrap(), before);
    // The weights output is checked as -o is: not over the model itself.
    let named = dir.join("q.weights.safetensors");
    std::fs::copy(&gir, &named).unwrap();
    let err = fails(&["opt", s(&named), "-o", s(&dir.join("q.gir"))]);
    assert!(err.contains("the weights file of -o") && err.contains("which this run reads"), "{err}");
}

#[test]
fn bad_weights_files_are_located_errors_for_every_command() {
    let dir = tmpdir("bad");
    let gir = dir.join("m.gir");
    std::fs::write(
        &gir,
        "graph @g() -> (y: f32[2]) {\n  %y = constant {value = safetensors<\"../w.safetensors\", \"w\"> : f32[2]} : f32[2]\n  return %y\n}\n",
    )
    .unwrap();
    for cmd in ["check", "fmt", "run", "opt", "dot", "simulate"] {
        let err = fails(&[cmd, s(&gir)]);
        assert!(
            err.contains("m.gir:2:38: error: weights file \"../w.safetensors\" has a '..' component"),
            "{cmd}: {err}"
        );
    }
}

/// The run-time library beside the graphc binary, built once (as aot.rs builds it).
fn runtime_library() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_graphc"));
    let dir = bin.parent().unwrap().to_path_buf();
    let profile = match dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev".to_string(),
        other => other.to_string(),
    };
    let status =
        Command::new(env!("CARGO")).args(["build", "-p", "graphc-aot", "--profile", &profile]).status().unwrap();
    assert!(status.success(), "cargo build -p graphc-aot failed");
}

#[test]
fn an_executable_compiled_from_a_gir_with_weights_runs_as_graphc_run() {
    runtime_library();
    let dir = tmpdir("aot");
    let onnx = dir.join("m.onnx");
    onnx_matmul_model(&onnx);
    let gir = dir.join("m.gir");
    ok(&["import", s(&onnx), "-o", s(&gir)]);
    let exe = dir.join("m");
    // From another working directory, as the weights file is found beside the .gir.
    let o = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .current_dir(std::env::temp_dir())
        .args(["compile", s(&gir), "-o", s(&exe)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    // The executable needs no weights file: it embeds them.
    std::fs::remove_file(dir.join("m.weights.safetensors")).unwrap();
    let x = x_input(&dir);
    let o = Command::new(&exe)
        .args(["--input", &format!("x={}", s(&x)), "--out-dir", s(&dir.join("exe"))])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let want = run_y(&onnx, &x, "jit", &dir.join("jit"));
    assert_eq!(std::fs::read(dir.join("exe/y.npy")).unwrap(), want);
    let _ = std::fs::remove_dir_all(&dir);
}
