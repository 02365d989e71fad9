//! Float literals keep their bits through print and parse: NaN payloads, the sign of a NaN,
//! signalling NaNs, zeros' signs and infinities, for every float dtype, in splats and lists.

use graphc_ir::{bf16, f16, parse_module, print_module, Attr, DType, TensorData, TensorLiteral, TensorType};

/// For each float dtype: the bits of the canonical NaN (`nan`), then a negative quiet NaN, a
/// quiet NaN with a payload, a signalling NaN, a negative signalling NaN with every payload
/// bit, the NaN of all ones, -inf, inf, -0, +0, 1 and the smallest denormal.
const PATTERNS: [(DType, [u64; 12]); 4] = [
    (
        DType::F32,
        [
            0x7FC0_0000,
            0xFFC0_0000,
            0x7FC0_0001,
            0x7F80_0001,
            0xFFBF_FFFF,
            0xFFFF_FFFF,
            0xFF80_0000,
            0x7F80_0000,
            0x8000_0000,
            0,
            0x3F80_0000,
            1,
        ],
    ),
    (
        DType::F64,
        [
            0x7FF8_0000_0000_0000,
            0xFFF8_0000_0000_0000,
            0x7FF8_0000_0000_0001,
            0x7FF0_0000_0000_0001,
            0xFFF7_FFFF_FFFF_FFFF,
            0xFFFF_FFFF_FFFF_FFFF,
            0xFFF0_0000_0000_0000,
            0x7FF0_0000_0000_0000,
            0x8000_0000_0000_0000,
            0,
            0x3FF0_0000_0000_0000,
            1,
        ],
    ),
    (DType::F16, [0x7E00, 0xFE00, 0x7E01, 0x7C01, 0xFDFF, 0xFFFF, 0xFC00, 0x7C00, 0x8000, 0, 0x3C00, 1]),
    (DType::BF16, [0x7FC0, 0xFFC0, 0x7FC1, 0x7F81, 0xFFBF, 0xFFFF, 0xFF80, 0x7F80, 0x8000, 0, 0x3F80, 1]),
];

fn data(dtype: DType, bits: &[u64]) -> TensorData {
    match dtype {
        DType::F32 => TensorData::F32(bits.iter().map(|&b| f32::from_bits(b as u32)).collect()),
        DType::F64 => TensorData::F64(bits.iter().map(|&b| f64::from_bits(b)).collect()),
        DType::F16 => TensorData::F16(bits.iter().map(|&b| f16::from_bits(b as u16)).collect()),
        DType::BF16 => TensorData::BF16(bits.iter().map(|&b| bf16::from_bits(b as u16)).collect()),
        _ => unreachable!("float dtypes only"),
    }
}

fn bits(d: &TensorData) -> Vec<u64> {
    match d {
        TensorData::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        TensorData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        TensorData::F16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        TensorData::BF16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        other => panic!("not a float literal: {other:?}"),
    }
}

fn width(dtype: DType) -> usize {
    match dtype {
        DType::F64 => 16,
        DType::F32 => 8,
        _ => 4,
    }
}

/// The literal of a graph whose one node is a constant of `lit`.
fn constant(text: &str) -> TensorLiteral {
    let m = parse_module(text).unwrap_or_else(|d| panic!("{d:?}\n{text}"));
    let g = &m.graphs[0];
    let n = g.walk()[0];
    g.nodes[n].attrs.tensor("value").expect("a constant").clone()
}

/// `lit` printed in a graph and parsed back.
fn round_trip(lit: &TensorLiteral) -> (String, TensorLiteral) {
    let ty = lit.ty();
    let text = format!("graph @g() -> (y: {ty}) {{\n  %y = constant {{value = {lit}}} : {ty}\n  return %y\n}}\n");
    let back = constant(&text);
    let printed = print_module(&parse_module(&text).unwrap());
    assert_eq!(printed, text, "the text is canonical");
    (lit.to_string(), back)
}

fn parse_error(lit: &str) -> String {
    let text = format!("graph @g() -> (y: f32[]) {{\n  %y = constant {{value = {lit}}} : f32[]\n  return %y\n}}\n");
    let d = parse_module(&text).expect_err(lit);
    d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; ")
}

#[test]
fn every_float_pattern_round_trips_bit_exactly_in_a_list() {
    for (dtype, pats) in PATTERNS {
        let lit = TensorLiteral::new(TensorType::new(dtype, [pats.len() as u64]), data(dtype, &pats)).unwrap();
        let (text, back) = round_trip(&lit);
        assert_eq!(bits(back.text_data().unwrap()), pats, "{dtype}: {text}");
        assert_eq!(back, lit);
        let w = width(dtype);
        // `nan` is the canonical NaN; every other NaN is its bits, of the dtype's width.
        assert!(text.starts_with("dense<[nan, "), "{text}");
        for p in &pats[1..6] {
            assert!(text.contains(&format!("0x{p:0w$X}")), "{dtype}: 0x{p:0w$X} in {text}");
        }
        assert!(text.contains("-inf, inf, -0.0, 0.0, 1.0"), "{text}");
    }
}

#[test]
fn splats_of_every_pattern_round_trip_and_different_nans_are_no_splat() {
    for (dtype, pats) in PATTERNS {
        for p in pats {
            let lit = TensorLiteral::new(TensorType::new(dtype, [2, 3]), data(dtype, &[p; 6])).unwrap();
            assert!(lit.is_splat(), "{dtype} 0x{p:X}");
            let (text, back) = round_trip(&lit);
            assert!(back.is_splat(), "{text}");
            assert_eq!(bits(back.text_data().unwrap()), [p], "{dtype}: {text}");
        }
        // NaNs of different bits are different elements: no splat, and each keeps its bits.
        let nans = [pats[0], pats[1], pats[2], pats[3]];
        let lit = TensorLiteral::new(TensorType::new(dtype, [4]), data(dtype, &nans)).unwrap();
        assert!(!lit.is_splat(), "{dtype}: {lit}");
        let (text, back) = round_trip(&lit);
        assert_eq!(bits(back.text_data().unwrap()), nans, "{dtype}: {text}");
        let zeros = TensorLiteral::new(TensorType::new(dtype, [2]), data(dtype, &[pats[8], pats[9]])).unwrap();
        assert!(!zeros.is_splat(), "{zeros}");
    }
}

#[test]
fn bit_patterns_parse_exactly_and_nan_is_canonical() {
    let f = |text: &str, ty: &str| {
        bits(
            constant(&format!(
                "graph @g() -> (y: {ty}) {{\n  %y = constant {{value = {text}}} : {ty}\n  return %y\n}}\n"
            ))
            .text_data()
            .unwrap(),
        )
    };
    assert_eq!(
        f("dense<[0x7FC00001, 0xFFBFFFFF, 0x7fc00002]> : f32[3]", "f32[3]"),
        [0x7FC0_0001, 0xFFBF_FFFF, 0x7FC0_0002]
    );
    // A bit pattern may spell any value, not only a NaN.
    assert_eq!(f("dense<0x3C00> : f16[2]", "f16[2]"), [0x3C00]);
    assert_eq!(f("dense<[0xBFF0000000000000]> : f64[1]", "f64[1]"), [0xBFF0_0000_0000_0000]);
    assert_eq!(f("dense<[0x7F81, nan]> : bf16[2]", "bf16[2]"), [0x7F81, 0x7FC0]);
    for (dtype, pats) in PATTERNS {
        assert_eq!(f("dense<nan> : T[]".replace('T', dtype.name()).as_str(), &format!("{dtype}[]")), [pats[0]]);
    }
}

#[test]
fn bad_bit_patterns_are_clear_errors() {
    let e = parse_error("dense<0x7FC0> : f32[]");
    assert!(e.contains("has 4 hex digits; f32 takes 8"), "{e}");
    let e = parse_error("dense<0x7FC00000000001> : f32[]");
    assert!(e.contains("f32 takes 8"), "{e}");
    let e = parse_error("dense<-0x7FC00001> : f32[]");
    assert!(e.contains("a bit pattern has no sign"), "{e}");
    assert!(parse_error("dense<0x> : f32[]").contains("malformed number '0x'"));
    assert!(parse_error("dense<0x7FC0000G> : f32[]").contains("malformed number '0x7FC0000G'"));
    let text =
        "graph @g() -> (y: i32[]) {\n  %y = constant {value = dense<0x00000001> : i32[]} : i32[]\n  return %y\n}\n";
    let e = parse_module(text).unwrap_err()[0].message.clone();
    assert!(e.contains("bit patterns spell floats"), "{e}");
}

#[test]
fn literals_with_different_nans_are_different() {
    let ty = TensorType::new(DType::F32, [2]);
    let a = TensorLiteral::new(ty.clone(), data(DType::F32, &[0x7FC0_0000, 0x7FC0_0001])).unwrap();
    let b = TensorLiteral::new(ty.clone(), data(DType::F32, &[0x7FC0_0000, 0xFFC0_0001])).unwrap();
    assert_ne!(a, b);
    assert_eq!(a, a.clone());
}

#[test]
fn float_attributes_keep_their_nan_bits() {
    let text = "graph @g(%lr: f32[], %dw: f32[2]) -> (y: f32[2]) {\n  %w = variable {name = \"w\", init = dense<0.5> : f32[2]} : var<f32[2]>\n  %s = variable {name = \"w/ms\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %m = variable {name = \"w/mom\", init = dense<0.0> : f32[2]} : var<f32[2]>\n  %0 = apply_rmsprop %w, %s, %m, %lr, %dw {rho = nan, epsilon = 0xFFF8000000000001} : f32[2]\n  return %0\n}\n";
    let m = parse_module(text).unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(print_module(&m), text);
    let g = &m.graphs[0];
    let n = *g.walk().last().unwrap();
    let eps = g.nodes[n].attrs.get("epsilon").unwrap();
    assert!(matches!(eps, Attr::Float(x) if x.to_bits() == 0xFFF8_0000_0000_0001), "{eps:?}");
    assert_ne!(eps, &Attr::Float(f64::NAN));
}
