//! Importing small models built in memory: results match hand computation, bad models give
//! one clear error, external data is read.

use graphc_onnx::proto::*;
use graphc_onnx::{import_file, ImportOptions};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use prost::Message;
use std::path::PathBuf;

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| Dimension { dim_value: Some(d), dim_param: None }).collect(),
                }),
            }),
            ..Default::default()
        }),
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_0")),
        op_type: Some(op.into()),
        domain: None,
        attribute: attrs,
    }
}

fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type::FLOAT),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn model(opset: i64, graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        producer_name: Some("test".into()),
        graph: Some(graph),
    }
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-onnx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn gemm_relu() -> GraphProto {
    GraphProto {
        node: vec![
            node(
                "Gemm",
                &["x", "w", "b"],
                &["h"],
                vec![AttributeProto {
                    name: Some("transB".into()),
                    i: Some(1),
                    r#type: Some(attribute_type::INT),
                    ..Default::default()
                }],
            ),
            node("Relu", &["h"], &["y:0"], vec![]),
        ],
        name: Some("mlp".into()),
        initializer: vec![floats("w", &[2, 3], &[1.0, 0.0, -1.0, 0.5, 0.5, 0.5]), floats("b", &[2], &[0.0, -10.0])],
        input: vec![vi("x", data_type::FLOAT, &[1, 3])],
        output: vec![vi("y:0", data_type::FLOAT, &[1, 2])],
        ..Default::default()
    }
}

#[test]
fn a_gemm_relu_model_imports_and_runs() {
    let p = write("gemm.onnx", &model(17, gemm_relu()).encode_to_vec());
    let m = import_file(&p, &ImportOptions::default()).unwrap();
    let text = graphc_ir::print_module(&m);
    assert!(text.contains("graph @mlp(%x: f32[1,3]) -> (\"y:0\": f32[1,2])"), "{text}");
    let reparsed = graphc_ir::parse_module(&text).unwrap();
    assert_eq!(graphc_ir::print_module(&reparsed), text, "the import round-trips");
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let x = Tensor::from_data(&[1, 3], graphc_ir::TensorData::F32(vec![3.0, 2.0, 1.0])).unwrap();
    let out = s.run(RunRequest::new("mlp").feed("x", x)).unwrap();
    // x w^T + b = [3 - 1, (3 + 2 + 1) / 2 - 10] = [2, -7]; relu -> [2, 0].
    assert_eq!(out.tensor(0).unwrap().to_f64_vec(), vec![2.0, 0.0]);
}

#[test]
fn symbolic_dims_take_the_sizes_given() {
    let mut g = gemm_relu();
    let batch = |d: &mut ValueInfoProto| {
        let shape = d.r#type.as_mut().unwrap().tensor_type.as_mut().unwrap().shape.as_mut().unwrap();
        shape.dim[0] = Dimension { dim_value: None, dim_param: Some("N".into()) };
    };
    batch(&mut g.input[0]);
    let p = write("symbolic.onnx", &model(17, g).encode_to_vec());
    let e = import_file(&p, &ImportOptions::default()).unwrap_err();
    assert!(e.contains("symbolic ('N'); give it a size with --shape N=SIZE, or feed the input"), "{e}");
    let options = ImportOptions { dims: [("N".to_string(), 4)].into(), ..Default::default() };
    let m = import_file(&p, &options).unwrap();
    let text = graphc_ir::print_module(&m);
    assert!(text.contains("graph @mlp(%x: f32[4,3])") && text.contains(": f32[4,2]"), "{text}");
    // The shape of what will be fed gives the size, and must agree with a size given.
    let fed = ImportOptions { input_shapes: [("x".to_string(), vec![7, 3])].into(), ..Default::default() };
    let text = graphc_ir::print_module(&import_file(&p, &fed).unwrap());
    assert!(text.contains("graph @mlp(%x: f32[7,3])"), "{text}");
    let both = ImportOptions { input_shapes: fed.input_shapes.clone(), ..options };
    let e = import_file(&p, &both).unwrap_err();
    assert!(e.contains("dim 0 is 'N' = 4, but the array fed has 7 there"), "{e}");
}

#[test]
fn weights_can_become_variables() {
    let p = write("vars.onnx", &model(17, gemm_relu()).encode_to_vec());
    let m = import_file(&p, &ImportOptions { weights_as_variables: true, ..Default::default() }).unwrap();
    let text = graphc_ir::print_module(&m);
    assert!(text.contains("variable {name = \"w\"") && text.contains("read %"), "{text}");
}

#[test]
fn bad_models_give_one_clear_error() {
    let junk = write("junk.onnx", b"\xff\xff\xff not protobuf");
    let e = import_file(&junk, &ImportOptions::default()).unwrap_err();
    assert!(e.contains("is not an ONNX model"), "{e}");
    let old = write("old.onnx", &model(5, gemm_relu()).encode_to_vec());
    let e = import_file(&old, &ImportOptions::default()).unwrap_err();
    assert!(e.contains("operator 'Gemm' is supported from opset 6 on; the version in opset 5 is not"), "{e}");
    let e = import_file(&write("zero.onnx", &model(0, gemm_relu()).encode_to_vec()), &ImportOptions::default())
        .unwrap_err();
    assert!(e.contains("opset 0; graphc imports opset 1 and later"), "{e}");
    let mut g = gemm_relu();
    g.node[1].op_type = Some("CastLike".into());
    let e = import_file(&write("later.onnx", &model(9, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("operator 'CastLike' is supported from opset 13 on; the version in opset 9 is not"), "{e}");
    let mut g = gemm_relu();
    g.node[1].op_type = Some("Frobnicate".into());
    let e = import_file(&write("unk.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("node 'Relu_0' (Frobnicate): operator 'Frobnicate' is not supported"), "{e}");
    let mut g = gemm_relu();
    g.input[0] = vi("x", 17, &[1, 3]);
    let e = import_file(&write("f8.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("graph input 'x': data type FLOAT8E4M3FN is not supported"), "{e}");
    let mut g = gemm_relu();
    g.initializer[0].float_data.pop();
    let e = import_file(&write("short.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("initializer 'w'") && e.contains("holds 5 elements, not 6"), "{e}");
    let mut g = gemm_relu();
    g.initializer[0].dims = vec![1 << 40, 1 << 40];
    let e = import_file(&write("huge.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("initializer 'w'"), "{e}");
}

#[test]
fn external_data_is_read_relative_to_the_model() {
    let weights: Vec<u8> = [1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut padded = vec![0u8; 8];
    padded.extend(&weights);
    write("weights.bin", &padded);
    let mut g = gemm_relu();
    g.initializer[0] = TensorProto {
        name: Some("w".into()),
        dims: vec![2, 3],
        data_type: Some(data_type::FLOAT),
        data_location: Some(1),
        external_data: [("location", "weights.bin"), ("offset", "8"), ("length", "24")]
            .iter()
            .map(|(k, v)| StringStringEntryProto { key: Some(k.to_string()), value: Some(v.to_string()) })
            .collect(),
        ..Default::default()
    };
    let p = write("ext.onnx", &model(17, g.clone()).encode_to_vec());
    assert_eq!(graphc_onnx::external_data_files(&p).unwrap(), [p.with_file_name("weights.bin")]);
    let m = import_file(&p, &ImportOptions::default()).unwrap();
    assert!(graphc_ir::print_module(&m).contains("dense<[[1.0, 0.0, -1.0], [0.5, 0.5, 0.5]]>"));
    g.initializer[0].external_data[0].value = Some("../../etc/passwd".into());
    let e = import_file(&write("escape.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("must stay inside the model's directory"), "{e}");
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: Some(name.into()), i: Some(v), r#type: Some(attribute_type::INT), ..Default::default() }
}

fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: Some(name.into()), f: Some(v), r#type: Some(attribute_type::FLOAT), ..Default::default() }
}

/// Imports a one-node graph of `x` (with the given initializers) at `opset`, runs it on `x`
/// and returns every output's values, or the import error.
fn run_one(
    opset: i64,
    n: NodeProto,
    x: (&[i64], Vec<f32>),
    inits: Vec<TensorProto>,
    outs: &[(&str, &[i64])],
) -> Result<Vec<Vec<f64>>, String> {
    let g = GraphProto {
        node: vec![n],
        name: Some("g".into()),
        initializer: inits,
        input: vec![vi("x", data_type::FLOAT, x.0)],
        output: outs.iter().map(|(name, dims)| vi(name, data_type::FLOAT, dims)).collect(),
        ..Default::default()
    };
    let p = write(&format!("one{}.onnx", std::process::id() ^ opset as u32), &model(opset, g).encode_to_vec());
    let m = import_file(&p, &ImportOptions::default())?;
    let s = Session::new(m, SessionOptions::default()).unwrap();
    let dims: Vec<usize> = x.0.iter().map(|&d| d as usize).collect();
    let t = Tensor::from_data(&dims, graphc_ir::TensorData::F32(x.1)).unwrap();
    let out = s.run(RunRequest::new("g").feed("x", t)).unwrap();
    Ok((0..outs.len()).map(|i| out.tensor(i).unwrap().to_f64_vec()).collect())
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
}

#[test]
fn old_opsets_have_their_versions_semantics() {
    // Add-6 broadcasts B only with broadcast = 1, lined up with A at `axis`.
    let add = node("Add", &["x", "b"], &["y"], vec![int_attr("broadcast", 1), int_attr("axis", 1)]);
    let y = run_one(
        6,
        add,
        (&[1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]),
        vec![floats("b", &[2], &[10.0, 20.0])],
        &[("y", &[1, 2, 2])],
    )
    .unwrap();
    assert_eq!(y[0], vec![11.0, 12.0, 23.0, 24.0]);
    let add = node("Add", &["x", "b"], &["y"], vec![]);
    let e = run_one(6, add, (&[1, 2], vec![1.0, 2.0]), vec![floats("b", &[2], &[10.0, 20.0])], &[("y", &[1, 2])])
        .unwrap_err();
    assert!(e.contains("without broadcast = 1 this version needs operands of one shape"), "{e}");

    // LRN: x / (bias + alpha / size * sum of squares over the size channels around c)^beta.
    let lrn = node(
        "LRN",
        &["x"],
        &["y"],
        vec![int_attr("size", 3), float_attr("alpha", 3.0), float_attr("beta", 1.0), float_attr("bias", 1.0)],
    );
    let y = run_one(9, lrn, (&[1, 3, 1, 1], vec![1.0, 2.0, 3.0]), vec![], &[("y", &[1, 3, 1, 1])]).unwrap();
    assert!(close(&y[0], &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]), "{y:?}");

    // Softmax-11 coerces to a matrix at axis 1: one softmax over all four elements.
    let sm = node("Softmax", &["x"], &["y"], vec![]);
    let y = run_one(11, sm, (&[1, 2, 2], vec![0.0, 0.0, 0.0, 0.0]), vec![], &[("y", &[1, 2, 2])]).unwrap();
    assert!(close(&y[0], &[0.25; 4]), "{y:?}");

    // Dropout-9 at inference is a copy; its mask (of the input's type) keeps everything.
    let d = node("Dropout", &["x"], &["y", "mask"], vec![float_attr("ratio", 0.5)]);
    let y = run_one(9, d, (&[2], vec![1.0, 2.0]), vec![], &[("y", &[2]), ("mask", &[2])]).unwrap();
    assert_eq!(y, vec![vec![1.0, 2.0], vec![1.0, 1.0]]);

    // Clip-6 has its bounds as attributes.
    let c = node("Clip", &["x"], &["y"], vec![float_attr("min", 0.0), float_attr("max", 1.5)]);
    let y = run_one(6, c, (&[3], vec![-1.0, 1.0, 2.0]), vec![], &[("y", &[3])]).unwrap();
    assert_eq!(y[0], vec![0.0, 1.0, 1.5]);

    // BatchNormalization-9 in training mode (more outputs than Y) is refused, by name.
    let p: Vec<TensorProto> = ["s", "b", "m", "v"].iter().map(|n| floats(n, &[1], &[1.0])).collect();
    let bn = node("BatchNormalization", &["x", "s", "b", "m", "v"], &["y", "rm"], vec![]);
    let e = run_one(9, bn, (&[1, 1, 2], vec![1.0, 2.0]), p, &[("y", &[1, 1, 2]), ("rm", &[1])]).unwrap_err();
    assert!(e.contains("BatchNormalization-9 in training mode"), "{e}");
}

fn str_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(attribute_type::STRING),
        ..Default::default()
    }
}

fn int64s(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(data_type::INT64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

#[test]
fn losses_with_weights_and_ignore_index_match_hand_computation() {
    let (ln2, ln3, ln4, ln5) = (2f64.ln(), 3f64.ln(), 4f64.ln(), 5f64.ln());
    // Scores [N = 2, C = 3, d1 = 2]; per example (n, d) over the classes:
    // (0, 0): [0, 0, 0]        softmax [1/3, 1/3, 1/3]
    // (0, 1): [0, ln 2, 0]     softmax [1/4, 1/2, 1/4]
    // (1, 0): [ln 3, 0, 0]     softmax [3/5, 1/5, 1/5]
    // (1, 1): [100, -100, 5]   (its label is ignored; large, so log-softmax must be stable)
    let x = |inf: f32| vec![0.0, inf, 0.0, ln2 as f32, 0.0, 0.0, ln3 as f32, 100.0, 0.0, -100.0, 0.0, 5.0];
    let weights = || floats("w", &[3], &[1.0, 2.0, 3.0]);

    // SoftmaxCrossEntropyLoss, labels [[0, 2], [1, -1]], ignore_index -1, mean: the weighted
    // losses over the sum of the weights applied (the ignored example's weight is 0):
    // (1 ln 3 + 3 ln 4 + 2 ln 5) / (1 + 3 + 2).
    let labels = int64s("y", &[2, 2], &[0, 2, 1, -1]);
    let sce = node(
        "SoftmaxCrossEntropyLoss",
        &["x", "y", "w"],
        &["z", "log_prob"],
        vec![int_attr("ignore_index", -1), str_attr("reduction", "mean")],
    );
    let out = run_one(
        13,
        sce,
        (&[2, 3, 2], x(0.0)),
        vec![labels.clone(), weights()],
        &[("z", &[]), ("log_prob", &[2, 3, 2])],
    )
    .unwrap();
    assert!(close(&out[0], &[(ln3 + 3.0 * ln4 + 2.0 * ln5) / 6.0]), "{out:?}");
    // log_prob keeps the scores' layout [N, C, d1].
    let log_prob = [-ln3, -ln4, -ln3, -ln2, -ln3, -ln4, -ln5 + ln3, 0.0, -ln5, -200.0, -ln5, -95.0];
    assert!(close(&out[1], &log_prob), "{out:?}");

    // The same with reduction "sum" and opset 12.
    let sce = node(
        "SoftmaxCrossEntropyLoss",
        &["x", "y", "w"],
        &["z"],
        vec![int_attr("ignore_index", -1), str_attr("reduction", "sum")],
    );
    let out = run_one(12, sce, (&[2, 3, 2], x(0.0)), vec![labels, weights()], &[("z", &[])]).unwrap();
    assert!(close(&out[0], &[ln3 + 3.0 * ln4 + 2.0 * ln5]), "{out:?}");

    // NegativeLogLikelihoodLoss reads the scores as log-probabilities: loss = -x[label] *
    // weights[label], 0 where ignored. Labels [[1, 1], [0, 7]] with ignore_index 7 (out of
    // range: it must not index anything); a -inf log-probability of a class that is not the
    // label (class 0 of example (0, 1)) leaves the loss finite.
    let labels = int64s("y", &[2, 2], &[1, 1, 0, 7]);
    let per_example = [0.0, -2.0 * ln2, -ln3, 0.0];
    for (reduction, expected) in [
        ("none", per_example.to_vec()),
        ("sum", vec![-2.0 * ln2 - ln3]),
        // Divided by the applied weights 2 + 2 + 1 (the ignored example's is 0).
        ("mean", vec![(-2.0 * ln2 - ln3) / 5.0]),
    ] {
        let nll = node(
            "NegativeLogLikelihoodLoss",
            &["x", "y", "w"],
            &["z"],
            vec![int_attr("ignore_index", 7), str_attr("reduction", reduction)],
        );
        let shape: &[i64] = if reduction == "none" { &[2, 2] } else { &[] };
        let out =
            run_one(13, nll, (&[2, 3, 2], x(f32::NEG_INFINITY)), vec![labels.clone(), weights()], &[("z", shape)])
                .unwrap();
        assert!(close(&out[0], &expected), "{reduction}: {out:?}");
    }
}
