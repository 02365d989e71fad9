//! Random valid graphs built with the builder API print, parse back to an equal graph, and
//! print to the same text (proptest).

use graphc_ir::equiv::modules_equal;
use graphc_ir::graph::NodeSpec;
use graphc_ir::{
    bf16, f16, parse_module, print_module, verify_module, Attr, DType, DeviceSpec, Graph, Module, Op, TensorData,
    TensorLiteral, TensorType, Type, Value,
};
use proptest::prelude::*;

/// One step of the random program: which builder to try and the numbers it draws on.
#[derive(Clone, Debug)]
struct Step {
    choice: u8,
    a: u16,
    b: u16,
    c: u32,
    name: Option<u8>,
    device: Option<u8>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<u8>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        proptest::option::weighted(0.3, any::<u8>()),
        proptest::option::weighted(0.1, any::<u8>()),
    )
        .prop_map(|(choice, a, b, c, name, device)| Step { choice, a, b, c, name, device })
}

fn input_type() -> impl Strategy<Value = TensorType> {
    (prop::sample::select(DType::ALL.to_vec()), prop::collection::vec(1u64..5, 0..4))
        .prop_map(|(d, s)| TensorType::new(d, s))
}

const NAMES: &[&str] = &["x", "h.1", "layer.w", "input 0", "onnx::Gemm_3", "_t", "é", "9lives"];
const DEVICES: &[&str] = &["/job:ps/task:0", "/device:gpu:1", "/job:worker/replica:0/task:2/device:cpu:0", "/cpu:3"];

fn literal(dtype: DType, shape: Vec<u64>, seed: u32) -> TensorLiteral {
    let n = shape.iter().product::<u64>() as usize;
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        s
    };
    let data = match dtype {
        DType::F32 => TensorData::F32(
            (0..n)
                .map(|_| match next() % 9 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => -0.0,
                    3 => f32::MIN_POSITIVE,
                    _ => f32::from_bits(next()).clamp(-1e30, 1e30),
                })
                .collect(),
        ),
        DType::F64 => TensorData::F64((0..n).map(|_| (next() as f64) * 1e-7 - 3.5).collect()),
        DType::I32 => TensorData::I32((0..n).map(|_| next() as i32).collect()),
        DType::I64 => TensorData::I64((0..n).map(|_| ((next() as i64) << 32) | next() as i64).collect()),
        DType::Bool => TensorData::Bool((0..n).map(|_| next() % 2 == 0).collect()),
        // Any bits: NaNs (of every payload), infinities and subnormals included.
        DType::F16 => TensorData::F16((0..n).map(|_| f16::from_bits((next() >> 16) as u16)).collect()),
        DType::BF16 => TensorData::BF16((0..n).map(|_| bf16::from_bits((next() >> 16) as u16)).collect()),
        DType::I8 => TensorData::I8((0..n).map(|_| (next() >> 24) as i8).collect()),
        DType::I16 => TensorData::I16((0..n).map(|_| (next() >> 16) as i16).collect()),
        DType::U8 => TensorData::U8((0..n).map(|_| (next() >> 24) as u8).collect()),
        DType::U16 => TensorData::U16((0..n).map(|_| (next() >> 16) as u16).collect()),
        DType::U32 => TensorData::U32((0..n).map(|_| next()).collect()),
        DType::U64 => TensorData::U64((0..n).map(|_| ((next() as u64) << 32) | next() as u64).collect()),
    };
    TensorLiteral::new(TensorType::new(dtype, shape), data).expect("sizes agree")
}

fn tensor(g: &Graph, v: Value) -> Option<TensorType> {
    g.value_type(v).as_tensor().cloned()
}

const UNARY: &[Op] =
    &[Op::Neg, Op::Abs, Op::Exp, Op::Log, Op::Sqrt, Op::Tanh, Op::Sigmoid, Op::Relu, Op::Erf, Op::Not, Op::Identity];
const BINARY: &[Op] = &[
    Op::Add,
    Op::Sub,
    Op::Mul,
    Op::Div,
    Op::Pow,
    Op::Max,
    Op::Min,
    Op::And,
    Op::Or,
    Op::Equal,
    Op::Less,
    Op::GreaterEqual,
    Op::MatMul,
];

/// Tries one builder; returns the node's spec, or `None` when the step does not apply.
fn spec_for(g: &mut Graph, vals: &[Value], s: &Step) -> Option<NodeSpec> {
    let pick = |k: u16| vals[k as usize % vals.len()];
    let x = pick(s.a);
    let tx = tensor(g, x);
    Some(match s.choice % 12 {
        0 | 1 => NodeSpec::new(UNARY[s.b as usize % UNARY.len()], vec![x]),
        2 | 3 => NodeSpec::new(BINARY[s.c as usize % BINARY.len()], vec![x, pick(s.b)]),
        4 => {
            let t = tx?;
            let shape: Vec<u64> = t.shape.iter().map(|&d| if s.c.is_multiple_of(3) { d.min(2) } else { d }).collect();
            NodeSpec::new(Op::Constant, vec![])
                .attr("value", Attr::Tensor(literal(DType::ALL[s.b as usize % DType::ALL.len()], shape, s.c)))
        }
        5 => {
            let t = tx?;
            let axes: Vec<i64> = (0..t.rank() as i64).filter(|i| s.c >> i & 1 == 1).collect();
            let op = [Op::ReduceSum, Op::ReduceMax, Op::ReduceMin, Op::ReduceMean][s.b as usize % 4];
            NodeSpec::new(op, vec![x]).attr("axes", Attr::Ints(axes)).attr("keep_dims", Attr::Bool(s.c & 64 != 0))
        }
        6 => {
            let t = tx?;
            let mut perm: Vec<i64> = (0..t.rank() as i64).collect();
            perm.rotate_left(s.b as usize % t.rank().max(1));
            NodeSpec::new(Op::Transpose, vec![x]).attr("perm", Attr::Ints(perm))
        }
        7 => NodeSpec::new(Op::Reshape, vec![x]).attr("shape", Attr::Ints(vec![-1])),
        8 => {
            let t = tx?;
            let starts = t.shape.iter().map(|&d| (s.b as i64) % (d as i64 + 1) - 1).collect();
            let ends = t.shape.iter().map(|&d| d as i64 - (s.c as i64 % 2)).collect();
            NodeSpec::new(Op::Slice, vec![x]).attr("starts", Attr::Ints(starts)).attr("ends", Attr::Ints(ends))
        }
        9 => NodeSpec::new(Op::Cast, vec![x]).attr("to", Attr::DType(DType::ALL[s.b as usize % DType::ALL.len()])),
        10 => {
            // A cond whose branches apply two different unary ops.
            let p = g
                .add(
                    g.body,
                    NodeSpec::new(Op::Constant, vec![]).attr("value", Attr::Tensor(literal(DType::Bool, vec![], s.c))),
                )
                .ok()?[0];
            let ty = g.value_type(x).clone();
            let mut regions = Vec::new();
            for (label, op) in [("then", UNARY[s.b as usize % UNARY.len()]), ("else", Op::Identity)] {
                let r = g.new_region(label, std::slice::from_ref(&ty));
                let param = g.regions[r].params[0];
                let out = g.add(r, NodeSpec::new(op, vec![param])).ok()?;
                g.set_yields(r, out);
                regions.push(r);
            }
            let then_y = g.region_sig(regions[0]).yields;
            if then_y != g.region_sig(regions[1]).yields {
                return None;
            }
            NodeSpec::new(Op::Cond, vec![p, x]).regions(regions)
        }
        _ => {
            // A fusion kernel around one binary op.
            let y = pick(s.b);
            let types = [g.value_type(x).clone(), g.value_type(y).clone()];
            let r = g.new_region("kernel", &types);
            let ps = g.regions[r].params.clone();
            let out = g.add(r, NodeSpec::new(BINARY[s.c as usize % BINARY.len()], ps)).ok()?;
            g.set_yields(r, out);
            NodeSpec::new(Op::Fusion, vec![x, y]).regions(vec![r]).attr("kind", Attr::Str("loop".into()))
        }
    })
}

fn build(inputs: &[TensorType], steps: &[Step], n_out: usize) -> Module {
    let mut g = Graph::new("random");
    let mut vals: Vec<Value> =
        inputs.iter().enumerate().map(|(i, t)| g.add_input(&format!("in{i}"), Type::Tensor(t.clone()))).collect();
    for s in steps {
        let Some(mut spec) = spec_for(&mut g, &vals, s) else { continue };
        if let Some(d) = s.device {
            spec = spec.device(DeviceSpec::parse(DEVICES[d as usize % DEVICES.len()]).unwrap());
        }
        if s.c % 5 == 0 {
            spec = spec.after(vec![vals[s.c as usize % vals.len()]]);
        }
        let body = g.body;
        let Ok(node) = g.add_node(body, spec) else { continue };
        let results = g.nodes[node].results.clone();
        if let (Some(k), Some(&r)) = (s.name, results.first()) {
            g.set_name(r, NAMES[k as usize % NAMES.len()]);
        }
        vals.extend(results);
    }
    let outs: Vec<(String, Value)> =
        vals.iter().rev().take(n_out).enumerate().map(|(i, &v)| (format!("out{i}"), v)).collect();
    g.set_outputs(outs);
    Module { graphs: vec![g], end_comments: vec![] }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn built_graphs_round_trip(inputs in prop::collection::vec(input_type(), 1..4), steps in prop::collection::vec(step(), 0..40), n_out in 1usize..4) {
        let m = build(&inputs, &steps, n_out);
        let errors = verify_module(&m);
        prop_assert!(errors.is_empty(), "builder made an invalid graph: {errors:?}");
        let text = print_module(&m);
        let parsed = parse_module(&text).map_err(|d| TestCaseError::fail(format!("{d:?}\n{text}")))?;
        modules_equal(&m, &parsed).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(print_module(&parsed), text);
    }
}
