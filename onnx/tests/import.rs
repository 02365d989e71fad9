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
    let old = write("old.onnx", &model(11, gemm_relu()).encode_to_vec());
    let e = import_file(&old, &ImportOptions::default()).unwrap_err();
    assert!(e.contains("opset 11; graphc imports opset 13 and later"), "{e}");
    let mut g = gemm_relu();
    g.node[1].op_type = Some("Frobnicate".into());
    let e = import_file(&write("unk.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("node 'Relu_0' (Frobnicate): operator 'Frobnicate' is not supported"), "{e}");
    let mut g = gemm_relu();
    g.input[0] = vi("x", 10, &[1, 3]);
    let e = import_file(&write("f16.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("graph input 'x': data type FLOAT16 is not supported"), "{e}");
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
    let m = import_file(&p, &ImportOptions::default()).unwrap();
    assert!(graphc_ir::print_module(&m).contains("dense<[[1.0, 0.0, -1.0], [0.5, 0.5, 0.5]]>"));
    g.initializer[0].external_data[0].value = Some("../../etc/passwd".into());
    let e = import_file(&write("escape.onnx", &model(17, g).encode_to_vec()), &ImportOptions::default()).unwrap_err();
    assert!(e.contains("must stay inside the model's directory"), "{e}");
}
