//! Workload generators for the benchmarks.

use graphc_ir::{Attr, DType, Graph, Module, NodeSpec, Op, TensorData, TensorLiteral, TensorType, Type};

/// A graph of about `n` nodes: layers of matmul, bias add, activation and a reduction, with
/// a constant every few nodes and a mix of named and unnamed values, as a large model looks.
pub fn large_graph(n: usize) -> Module {
    let mut g = Graph::new("large");
    let body = g.body;
    let mut x = g.add_input("x", Type::tensor(DType::F32, [32, 64]));
    let w = g.add_input("w", Type::tensor(DType::F32, [64, 64]));
    let acts = [Op::Relu, Op::Tanh, Op::Sigmoid, Op::Exp, Op::Neg];
    let mut i = 0;
    let mut count = 0;
    while count + 6 <= n {
        count += 6;
        let mm = g.add(body, NodeSpec::new(Op::MatMul, vec![x, w])).expect("valid")[0];
        let bias = TensorLiteral::new(
            TensorType::new(DType::F32, [64]),
            TensorData::F32((0..64).map(|k| k as f32 * 0.5 - i as f32).collect()),
        )
        .expect("sizes agree");
        let b = g.add(body, NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(bias))).expect("valid")[0];
        let s = g.add(body, NodeSpec::new(Op::Add, vec![mm, b])).expect("valid")[0];
        let a = g.add(body, NodeSpec::new(acts[i % acts.len()], vec![s])).expect("valid")[0];
        let r = g
            .add(
                body,
                NodeSpec::new(Op::ReduceMax, vec![a])
                    .attr("axes", Attr::Ints(vec![1]))
                    .attr("keep_dims", Attr::Bool(true)),
            )
            .expect("valid")[0];
        x = g.add(body, NodeSpec::new(Op::Sub, vec![a, r])).expect("valid")[0];
        if i % 3 == 0 {
            g.set_name(x, &format!("layer{i}.out"));
        }
        i += 1;
    }
    g.set_outputs(vec![("y".into(), x)]);
    Module { graphs: vec![g], end_comments: vec![] }
}

/// A session on one of the bundled examples with every input of `graph` filled with seeded
/// random data, and the request that runs it: what `graphc run FILE --graph GRAPH` does.
pub fn example_session(file: &str, graph: &str) -> (graphc_runtime::Session, graphc_runtime::RunRequest) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ir-spec/examples").join(file);
    let m = graphc_ir::parse_file(&path).1.expect("the bundled examples parse");
    let req = graphc_runtime::random::random_request(m.graph(graph).expect("the example has the graph"), 0)
        .expect("small random inputs");
    let session = graphc_runtime::Session::new(m, Default::default()).expect("the examples verify");
    (session, req)
}
