//! The 8- and 16-bit integers, the unsigned integers and the 16-bit floats in the reference
//! kernels: integer ops wrap, exhaustively over every pair of 8-bit values; f16 and bf16 ops
//! compute in f32 and round each result once, checked on every f16 value; casts.

use graphc_ir::{bf16, f16, Attr, Attrs, DType, Op, TensorData, TensorType};
use graphc_runtime::kernels::{self, cast};
use graphc_runtime::Tensor;

fn eval1(op: Op, attrs: &Attrs, inputs: &[&Tensor], result: TensorType) -> Tensor {
    kernels::eval(op, attrs, inputs, &[result]).unwrap_or_else(|e| panic!("{op:?}: {e}")).remove(0)
}

fn vector(data: TensorData) -> Tensor {
    let n = data.len();
    Tensor::from_data(&[n], data).unwrap()
}

/// Every pair (a, b) of 8-bit values as two vectors of 65536 elements.
fn all_pairs<T: Copy>(values: &[T]) -> (Vec<T>, Vec<T>) {
    let a = values.iter().flat_map(|&x| values.iter().map(move |_| x)).collect();
    let b = values.iter().flat_map(|_| values.iter().copied()).collect();
    (a, b)
}

/// `op` on every pair of 8-bit values against `want` computed exactly (i64) and wrapped to
/// the type (`wrap`, an `as` conversion: the low bits); `None` where the op must fail (a
/// division by zero).
fn check_pairs<T: Copy + std::fmt::Debug>(
    op: Op,
    values: &[T],
    data: fn(Vec<T>) -> TensorData,
    widen: fn(T) -> i64,
    wrap: fn(i64) -> T,
    want: impl Fn(i64, i64) -> Option<i64>,
) {
    let (a, b) = all_pairs(values);
    // Pairs whose op must fail are left out of the batch and tried one at a time.
    let (mut ok_a, mut ok_b, mut expected) = (Vec::new(), Vec::new(), Vec::new());
    for (&x, &y) in a.iter().zip(&b) {
        match want(widen(x), widen(y)) {
            Some(r) => {
                ok_a.push(x);
                ok_b.push(y);
                expected.push(wrap(r));
            }
            None => {
                let (ta, tb) = (vector(data(vec![x])), vector(data(vec![y])));
                let ty = ta.ty();
                assert!(kernels::eval(op, &Attrs::new(), &[&ta, &tb], &[ty]).is_err(), "{op:?} {x:?} {y:?}");
            }
        }
    }
    let (ta, tb) = (vector(data(ok_a)), vector(data(ok_b)));
    let got = eval1(op, &Attrs::new(), &[&ta, &tb], ta.ty());
    assert_eq!(got, vector(data(expected)), "{op:?} on {}", ta.dtype());
}

#[test]
fn eight_bit_arithmetic_wraps_on_every_pair() {
    let u8s: Vec<u8> = (0..=255).collect();
    let i8s: Vec<i8> = (-128..=127).collect();
    type Rule = fn(i64, i64) -> Option<i64>;
    let rules: [(Op, Rule); 6] = [
        (Op::Add, |x, y| Some(x + y)),
        (Op::Sub, |x, y| Some(x - y)),
        (Op::Mul, |x, y| Some(x * y)),
        // Truncating division; by zero an error.
        (Op::Div, |x, y| (y != 0).then(|| x / y)),
        (Op::Max, |x, y| Some(x.max(y))),
        (Op::Min, |x, y| Some(x.min(y))),
    ];
    for (op, rule) in rules {
        check_pairs(op, &u8s, TensorData::U8, |v| v as i64, |r| r as u8, rule);
        check_pairs(op, &i8s, TensorData::I8, |v| v as i64, |r| r as i8, rule);
    }
}

#[test]
fn eight_bit_bitwise_ops_and_shifts_on_every_pair() {
    let u8s: Vec<u8> = (0..=255).collect();
    let i8s: Vec<i8> = (-128..=127).collect();
    type Rule = fn(i64, i64) -> Option<i64>;
    let rules: [(Op, Rule); 5] = [
        (Op::And, |x, y| Some(x & y)),
        (Op::Or, |x, y| Some(x | y)),
        (Op::Xor, |x, y| Some(x ^ y)),
        // Past the width (a negative amount counts as past it): 0, or the sign's fill.
        (Op::ShiftLeft, |x, y| Some(if (0..8).contains(&y) { x << y } else { 0 })),
        (Op::ShiftRight, |x, y| Some(if (0..8).contains(&y) { x >> y } else { x >> 63 })),
    ];
    for (op, rule) in rules {
        check_pairs(op, &u8s, TensorData::U8, |v| v as i64, |r| r as u8, rule);
        check_pairs(op, &i8s, TensorData::I8, |v| v as i64, |r| r as i8, rule);
    }
    let all = vector(TensorData::I8(i8s.clone()));
    let flipped = eval1(Op::Not, &Attrs::new(), &[&all], all.ty());
    assert_eq!(flipped, vector(TensorData::I8(i8s.iter().map(|&v| !v).collect())));
    let wide = vector(TensorData::U64(vec![1, 1 << 63]));
    let by = vector(TensorData::U64(vec![63, 64]));
    assert_eq!(
        eval1(Op::ShiftLeft, &Attrs::new(), &[&wide, &by], wide.ty()),
        vector(TensorData::U64(vec![1 << 63, 0]))
    );
}

#[test]
fn bitcast_keeps_the_bits() {
    let to = |t: DType| {
        let mut a = Attrs::new();
        a.set("to", Attr::DType(t));
        a
    };
    let halves = vector(TensorData::F16(every_f16()));
    let bits = eval1(Op::Bitcast, &to(DType::U16), &[&halves], TensorType::new(DType::U16, [65536]));
    assert_eq!(bits, vector(TensorData::U16((0..=u16::MAX).collect())));
    let back = eval1(Op::Bitcast, &to(DType::F16), &[&bits], halves.ty());
    assert!(back.bit_identical(&halves), "every f16 bit pattern, NaNs included, comes back");
    let one = vector(TensorData::F32(vec![1.0, -0.0]));
    let got = eval1(Op::Bitcast, &to(DType::I32), &[&one], TensorType::new(DType::I32, [2]));
    assert_eq!(got, vector(TensorData::I32(vec![1065353216, i32::MIN])));
    let flags = vector(TensorData::Bool(vec![true, false]));
    let bytes = eval1(Op::Bitcast, &to(DType::U8), &[&flags], TensorType::new(DType::U8, [2]));
    assert_eq!(bytes, vector(TensorData::U8(vec![1, 0])));
    let wider = kernels::eval(Op::Bitcast, &to(DType::I64), &[&one], &[TensorType::new(DType::I64, [2])]);
    assert!(wider.unwrap_err().to_string().contains("changes the width"));
}

#[test]
fn eight_bit_floored_modulo_on_every_pair() {
    let i8s: Vec<i8> = (-128..=127).collect();
    let (a, b) = all_pairs(&i8s);
    let (a, b): (Vec<i8>, Vec<i8>) = a.iter().zip(&b).filter(|(_, &y)| y != 0).map(|(&x, &y)| (x, y)).unzip();
    let want: Vec<i8> = a.iter().zip(&b).map(|(&x, &y)| (x as i64).rem_euclid(y as i64) as i8).collect();
    let (ta, tb) = (vector(TensorData::I8(a.clone())), vector(TensorData::I8(b.clone())));
    let got = kernels::eval(Op::Mod, &Attrs::new(), &[&ta, &tb], &[ta.ty()]).unwrap().remove(0);
    // Python's floored `%` has the divisor's sign; rem_euclid is nonnegative: they differ
    // only for negative divisors with a nonzero remainder.
    let floored: Vec<i8> = a
        .iter()
        .zip(&b)
        .zip(&want)
        .map(|((_, &y), &r)| if y < 0 && r != 0 { (r as i64 + y as i64) as i8 } else { r })
        .collect();
    assert_eq!(got, vector(TensorData::I8(floored)));
}

#[test]
fn comparisons_of_unsigned_integers_use_their_order() {
    let a = vector(TensorData::U64(vec![0, u64::MAX, 1 << 63]));
    let b = vector(TensorData::U64(vec![1, 0, 5]));
    let got = eval1(Op::Less, &Attrs::new(), &[&a, &b], TensorType::new(DType::Bool, [3]));
    assert_eq!(got, vector(TensorData::Bool(vec![true, false, false])));
    let n = eval1(Op::Neg, &Attrs::new(), &[&b], b.ty());
    assert_eq!(n, vector(TensorData::U64(vec![u64::MAX, 0, u64::MAX - 4])), "negation wraps");
    let s = eval1(Op::Abs, &Attrs::new(), &[&a], a.ty());
    assert_eq!(s, a, "an unsigned value is its own absolute value");
}

fn every_f16() -> Vec<f16> {
    (0..=u16::MAX).map(f16::from_bits).collect()
}

fn same_bits(got: &Tensor, want: &[f16]) {
    let Tensor::F16(g) = got else { panic!("not f16: {got}") };
    for (i, (x, y)) in g.iter().zip(want).enumerate() {
        assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "element {i}: {x} where {y}");
    }
}

#[test]
fn f16_ops_compute_in_f32_and_round_once_on_every_value() {
    let xs = every_f16();
    let x = vector(TensorData::F16(xs.clone()));
    type F = fn(f32) -> f32;
    let unary: [(Op, F); 4] = [(Op::Exp, f32::exp), (Op::Sqrt, f32::sqrt), (Op::Tanh, f32::tanh), (Op::Neg, |v| -v)];
    for (op, f) in unary {
        let got = eval1(op, &Attrs::new(), &[&x], x.ty());
        let want: Vec<f16> = xs.iter().map(|v| f16::from_f32(f(v.to_f32()))).collect();
        same_bits(&got, &want);
    }
    // x * 3 + x: two ops, each rounded.
    let three = Tensor::from_data(&[], TensorData::F16(vec![f16::from_f32(3.0)])).unwrap();
    let m = eval1(Op::Mul, &Attrs::new(), &[&x, &three], x.ty());
    let s = eval1(Op::Add, &Attrs::new(), &[&m, &x], x.ty());
    let want: Vec<f16> =
        xs.iter().map(|v| f16::from_f32(f16::from_f32(v.to_f32() * 3.0).to_f32() + v.to_f32())).collect();
    same_bits(&s, &want);
}

#[test]
fn a_16_bit_float_reduction_accumulates_in_f32() {
    // 4096 ones: an f16 accumulator stops at 2048 (2049 is not an f16).
    let ones = Tensor::from_data(&[4096], TensorData::F16(vec![f16::ONE; 4096])).unwrap();
    let mut attrs = Attrs::new();
    attrs.set("axes", Attr::Ints(vec![0]));
    let got = eval1(Op::ReduceSum, &attrs, &[&ones], TensorType::scalar(DType::F16));
    assert_eq!(got.to_f64_vec(), vec![4096.0]);
    let ones = Tensor::from_data(&[512], TensorData::BF16(vec![bf16::ONE; 512])).unwrap();
    let got = eval1(Op::ReduceSum, &attrs, &[&ones], TensorType::scalar(DType::BF16));
    assert_eq!(got.to_f64_vec(), vec![512.0], "bf16 holds 257 no more than 2049 in f16");
}

#[test]
fn casts_round_to_nearest_even_and_wrap_integers() {
    // 1 + 2^-11 is halfway between 1 and the next f16: ties go to the even (1.0); 1 + 3 * 2^-11
    // is halfway between two odd-even neighbours and goes up; 70000 overflows to inf.
    let f = vector(TensorData::F32(vec![1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 70000.0, f32::NAN, -0.0]));
    let h = cast(&f, DType::F16);
    assert_eq!(h.to_f64_vec()[..3], [1.0, 1.0 + 2f64.powi(-9), f64::INFINITY]);
    assert!(h.to_f64_vec()[3].is_nan());
    assert!(h.to_f64_vec()[4] == 0.0 && h.to_f64_vec()[4].is_sign_negative());
    // bf16 keeps f32's range with 8 significant bits: 257 rounds to 256 (ties to even).
    let b = cast(&vector(TensorData::I32(vec![257, 259, 1 << 30])), DType::BF16);
    assert_eq!(b.to_f64_vec(), vec![256.0, 260.0, (1u64 << 30) as f64]);
    // Every u8 through i8 and back, and every i8 to u16, keep the low bits.
    let all: Vec<u8> = (0..=255).collect();
    let t = vector(TensorData::U8(all.clone()));
    let back = cast(&cast(&t, DType::I8), DType::U8);
    assert_eq!(back, t);
    let wide = cast(&cast(&t, DType::I8), DType::U16);
    let want: Vec<u16> = all.iter().map(|&v| v as i8 as u16).collect();
    assert_eq!(wide, vector(TensorData::U16(want)));
    // Floats to unsigned truncate toward zero; bool is 0 or 1.
    let g = cast(&vector(TensorData::F64(vec![2.9, 255.5, 0.0])), DType::U8);
    assert_eq!(g, vector(TensorData::U8(vec![2, 255, 0])));
    let z = cast(&vector(TensorData::F16(vec![f16::ZERO, f16::NEG_ZERO, f16::NAN])), DType::Bool);
    assert_eq!(z, vector(TensorData::Bool(vec![false, false, true])));
}

#[test]
fn every_dtype_round_trips_through_its_bytes() {
    let tensors = [
        vector(TensorData::F16(vec![f16::from_f32(1.5), f16::NAN, f16::NEG_INFINITY])),
        vector(TensorData::BF16(vec![bf16::from_f32(-2.25), bf16::MAX])),
        vector(TensorData::I8(vec![-128, 127])),
        vector(TensorData::I16(vec![-32768, 1])),
        vector(TensorData::U8(vec![0, 255])),
        vector(TensorData::U16(vec![65535])),
        vector(TensorData::U32(vec![u32::MAX, 7])),
        vector(TensorData::U64(vec![u64::MAX, 0])),
    ];
    for t in tensors {
        let back = Tensor::from_le_bytes(t.dtype(), t.shape(), &t.to_le_bytes()).unwrap();
        assert!(back.bit_identical(&t), "{t}");
        assert_eq!(t.to_le_bytes().len(), t.len() * t.dtype().size_bytes());
    }
}
