//! What SPEC §12 allows a compiled node to give, as an interval per element: its chain
//! evaluated in f64 with every member's result widened by that member's bound (in ulps of
//! the result, through the denormals) plus one for the interpreter's own rounding, and
//! with operands ranging over the intervals of the members before. A fused kernel whose
//! result lies inside meets "each member within its own bound on the values the kernel
//! computed", however ill-conditioned the chain (`tanh x / (tanh x - x)` near 0, a logarithm
//! of a softmax whose exponentials are denormal).
//!
//! Intervals ignore that members share operands (`x - x` is not 0), so they are never
//! narrower than the truth. A NaN end (an `inf - inf` the operands may reach) excuses
//! nothing: NaN must match exactly.

use graphc_ir::{Attr, Graph, Module, Op, Value};
use graphc_runtime::Tensor;
use std::collections::HashMap;

/// Per element of one value: the least and greatest value allowed, row-major.
#[derive(Clone, Debug)]
pub struct Bounds {
    shape: Vec<usize>,
    lo: Vec<f64>,
    hi: Vec<f64>,
}

impl Bounds {
    /// Whether `x` (an element of the value, at flat index `i`) is allowed.
    pub fn allows(&self, i: usize, x: f64) -> bool {
        self.lo.get(i).zip(self.hi.get(i)).is_some_and(|(&lo, &hi)| lo <= x && x <= hi)
    }

    fn exact(t: &Tensor) -> Bounds {
        let v = t.to_f64_vec();
        Bounds { shape: t.shape().to_vec(), lo: v.clone(), hi: v }
    }

    fn len(&self) -> usize {
        self.lo.len()
    }
}

/// The intervals of the outputs of `m`'s only graph on `inputs` (`in0`, `in1`, ... in
/// order), or None where the chain holds an op this does not bound (a matrix product, a
/// region).
pub fn allowed(m: &Module, inputs: &[Tensor]) -> Option<Vec<Bounds>> {
    let g = m.graphs.first()?;
    let mut env: HashMap<Value, Bounds> = HashMap::new();
    for (&v, t) in g.regions[g.body].params.iter().zip(inputs) {
        env.insert(v, Bounds::exact(t));
    }
    for &n in &g.regions[g.body].nodes {
        let nd = &g.nodes[n];
        let [result] = nd.results[..] else { return None };
        let shape = shape_of(g, result)?;
        let arg = |k: usize| nd.operands.get(k).and_then(|v| env.get(v));
        let out = match nd.op {
            Op::Constant => match nd.attrs.get("value") {
                Some(Attr::Tensor(lit)) => Bounds::exact(&Tensor::from_literal(lit).ok()?),
                _ => return None,
            },
            Op::Broadcast | Op::Identity => map(arg(0)?, &shape, 0.0, |lo, hi| (lo, hi)),
            Op::Neg => map(arg(0)?, &shape, 1.0, |lo, hi| (-hi, -lo)),
            Op::Abs => map(arg(0)?, &shape, 1.0, |lo, hi| {
                if lo >= 0.0 {
                    (lo, hi)
                } else if hi <= 0.0 {
                    (-hi, -lo)
                } else {
                    (0.0, nan_max(-lo, hi))
                }
            }),
            Op::Relu => increasing(arg(0)?, &shape, 1.0, |x| if x.is_nan() { x } else { x.max(0.0) }),
            Op::Exp => clamped(increasing(arg(0)?, &shape, 3.0, f64::exp), 0.0, f64::INFINITY),
            // Below zero these are NaN, which no interval excuses: the rest of the operand's
            // interval still gives values (a product whose bound reaches zero: -inf).
            Op::Log => map(arg(0)?, &shape, 1.0, |lo, hi| {
                (if lo < 0.0 && hi >= 0.0 { f64::NEG_INFINITY } else { lo.ln() }, hi.ln())
            }),
            Op::Sqrt => {
                map(arg(0)?, &shape, 1.0, |lo, hi| (if lo < 0.0 && hi >= 0.0 { 0.0 } else { lo.sqrt() }, hi.sqrt()))
            }
            Op::MatMul => {
                let flag = |f: &str| matches!(nd.attrs.get(f), Some(Attr::Bool(true)));
                matmul(arg(0)?, arg(1)?, (flag("transpose_a"), flag("transpose_b")), &shape)?
            }
            // Within [-1, 1], and exactly ±1 where the reference's f32 tanh is (SPEC §12).
            Op::Tanh => {
                let b = clamped(increasing(arg(0)?, &shape, 5.0, f64::tanh), -1.0, 1.0);
                saturated(arg(0)?, b, |x| f64::from(x.tanh() as f32).abs() == 1.0, |x| x.tanh().signum())
            }
            // Within [0, 1], and exactly 0 where the reference's 1 / (1 + e^-x) is.
            Op::Sigmoid => {
                let b = clamped(increasing(arg(0)?, &shape, 5.0, |x| 1.0 / (1.0 + (-x).exp())), 0.0, 1.0);
                saturated(arg(0)?, b, |x| x < -88.722_83, |_| 0.0)
            }
            Op::Erf => increasing(arg(0)?, &shape, 1.0, libm::erf),
            Op::Add => zip(arg(0)?, arg(1)?, &shape, 1.0, |a, b| (a.0 + b.0, a.1 + b.1)),
            Op::Sub => zip(arg(0)?, arg(1)?, &shape, 1.0, |a, b| (a.0 - b.1, a.1 - b.0)),
            Op::Mul => zip(arg(0)?, arg(1)?, &shape, 1.0, |a, b| hull(&[a.0 * b.0, a.0 * b.1, a.1 * b.0, a.1 * b.1])),
            Op::Div => zip(arg(0)?, arg(1)?, &shape, 3.0, div),
            Op::Pow => zip(arg(0)?, arg(1)?, &shape, 1.0, pow),
            Op::Max => zip(arg(0)?, arg(1)?, &shape, 0.0, |a, b| (nan_max(a.0, b.0), nan_max(a.1, b.1))),
            Op::Min => zip(arg(0)?, arg(1)?, &shape, 0.0, |a, b| (nan_min(a.0, b.0), nan_min(a.1, b.1))),
            Op::Less => compare(arg(0)?, arg(1)?, &shape, |a, b| (a.1 < b.0, a.0 >= b.1)),
            Op::LessEqual => compare(arg(0)?, arg(1)?, &shape, |a, b| (a.1 <= b.0, a.0 > b.1)),
            Op::Greater => compare(arg(0)?, arg(1)?, &shape, |a, b| (a.0 > b.1, a.1 <= b.0)),
            Op::GreaterEqual => compare(arg(0)?, arg(1)?, &shape, |a, b| (a.0 >= b.1, a.1 < b.0)),
            Op::Select => select(arg(0)?, arg(1)?, arg(2)?, &shape),
            Op::ReduceSum | Op::ReduceMean | Op::ReduceMax | Op::ReduceMin => {
                let axes = match nd.attrs.get("axes") {
                    Some(Attr::Ints(a)) => a.clone(),
                    _ => return None,
                };
                reduce(nd.op, arg(0)?, &axes, &shape)?
            }
            _ => return None,
        };
        if out.len() != shape.iter().product::<usize>() {
            return None;
        }
        env.insert(result, out);
    }
    g.regions[g.body].yields.iter().map(|v| env.get(v).cloned()).collect()
}

fn shape_of(g: &Graph, v: Value) -> Option<Vec<usize>> {
    Some(g.values[v].ty.as_tensor()?.shape.iter().map(|&d| d as usize).collect())
}

/// One f32 ulp at `x`: 2^-149 through the denormals, infinite beyond f32's range.
fn ulp(x: f64) -> f64 {
    let a = x.abs();
    if a < f64::from(f32::MIN_POSITIVE) {
        f64::from(f32::from_bits(1))
    } else if a > f64::from(f32::MAX) {
        f64::INFINITY
    } else {
        (a.log2().floor() - 23.0).exp2()
    }
}

/// `(lo, hi)` moved out by `ulps` f32 ulps; beyond f32's range an end is the infinity an f32
/// result would round to.
fn widen((lo, hi): (f64, f64), ulps: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (lo, hi);
    if ulps > 0.0 {
        if lo.is_finite() {
            lo -= ulps * ulp(lo);
        }
        if hi.is_finite() {
            hi += ulps * ulp(hi);
        }
    }
    let max = f64::from(f32::MAX);
    (if lo < -max { f64::NEG_INFINITY } else { lo }, if hi > max { f64::INFINITY } else { hi })
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// The least and greatest of `xs`, NaN if any is.
fn hull(xs: &[f64]) -> (f64, f64) {
    xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (nan_min(lo, x), nan_max(hi, x)))
}

/// For each element of `shape`, the flat index of the element of `from` it reads under
/// numpy broadcasting.
fn broadcast_index(from: &[usize], shape: &[usize]) -> Option<Vec<usize>> {
    let lead = shape.len().checked_sub(from.len())?;
    let mut strides = vec![0usize; shape.len()];
    let mut stride = 1;
    for (k, &d) in from.iter().enumerate().rev() {
        if d != 1 && d != shape[lead + k] {
            return None;
        }
        strides[lead + k] = if d == 1 { 0 } else { stride };
        stride *= d;
    }
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..total {
        out.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            if idx[k] < shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Some(out)
}

fn map(a: &Bounds, shape: &[usize], ulps: f64, f: impl Fn(f64, f64) -> (f64, f64)) -> Bounds {
    zip(a, a, shape, ulps, |x, _| f(x.0, x.1))
}

fn increasing(a: &Bounds, shape: &[usize], ulps: f64, f: impl Fn(f64) -> f64) -> Bounds {
    map(a, shape, ulps, |lo, hi| (f(lo), f(hi)))
}

/// An elementwise op on broadcast operands, from their ends to the result's, widened.
fn zip(a: &Bounds, b: &Bounds, shape: &[usize], ulps: f64, f: impl Fn((f64, f64), (f64, f64)) -> (f64, f64)) -> Bounds {
    let (Some(ia), Some(ib)) = (broadcast_index(&a.shape, shape), broadcast_index(&b.shape, shape)) else {
        return Bounds { shape: shape.to_vec(), lo: vec![], hi: vec![] };
    };
    let (lo, hi) = ia
        .iter()
        .zip(&ib)
        .map(|(&i, &j)| {
            let (lo, hi) = f((a.lo[i], a.hi[i]), (b.lo[j], b.hi[j]));
            if lo.is_nan() || hi.is_nan() {
                (f64::NAN, f64::NAN)
            } else {
                widen((lo, hi), ulps)
            }
        })
        .unzip();
    Bounds { shape: shape.to_vec(), lo, hi }
}

/// `x^y`: `y ln x` is bilinear in `(ln x, y)`, so over a box of positive bases its extremes
/// are at the corners; a negative base has a real power only at an integer exponent.
fn pow(x: (f64, f64), y: (f64, f64)) -> (f64, f64) {
    let mut corners = vec![x.0.powf(y.0), x.0.powf(y.1), x.1.powf(y.0), x.1.powf(y.1)];
    if x.0 < 0.0 {
        if y.0 != y.1 || y.0.fract() != 0.0 {
            return (f64::NAN, f64::NAN);
        }
        if x.1 >= 0.0 {
            corners.extend([0.0f64.powf(y.0), (-0.0f64).powf(y.0)]);
        }
        // Odd negative powers pass a pole at 0 between the ends.
        if x.1 >= 0.0 && y.0 < 0.0 {
            return (f64::NEG_INFINITY, f64::INFINITY);
        }
    }
    hull(&corners)
}

/// A comparison, as 0 (false), 1 (true) or both: `decide` says whether it is true for every
/// pair of values and whether it is false for every pair.
fn compare(a: &Bounds, b: &Bounds, shape: &[usize], decide: impl Fn((f64, f64), (f64, f64)) -> (bool, bool)) -> Bounds {
    // An operand that may be NaN leaves nothing known, and excuses nothing after.
    zip(a, b, shape, 0.0, |x, y| match decide(x, y) {
        _ if [x.0, x.1, y.0, y.1].iter().any(|v| v.is_nan()) => (f64::NAN, f64::NAN),
        (true, _) => (1.0, 1.0),
        (_, true) => (0.0, 0.0),
        _ => (0.0, 1.0),
    })
}

/// `a / b`: where b's interval holds zero inside, a pole between its ends gives every value;
/// a zero end divides as the signed zero on its side; 0 / 0 is NaN.
fn div(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let zero_in = |x: (f64, f64)| x.0 <= 0.0 && x.1 >= 0.0;
    if zero_in(a) && zero_in(b) {
        return (f64::NAN, f64::NAN);
    }
    if b.0 < 0.0 && b.1 > 0.0 {
        return (f64::NEG_INFINITY, f64::INFINITY);
    }
    // A zero end of a wider interval is approached from inside; a zero divisor itself keeps
    // its own sign.
    let both = b.0 == 0.0 && b.1 == 0.0;
    let b0 = if b.0 == 0.0 && !both { 0.0 } else { b.0 };
    let b1 = if b.1 == 0.0 && !both { -0.0 } else { b.1 };
    hull(&[a.0 / b0, a.0 / b1, a.1 / b0, a.1 / b1])
}

/// `b` with each element's ends inside `[lo, hi]`.
fn clamped(mut b: Bounds, lo: f64, hi: f64) -> Bounds {
    for (l, h) in b.lo.iter_mut().zip(b.hi.iter_mut()) {
        (*l, *h) = (l.clamp(lo, hi), h.clamp(lo, hi));
    }
    b
}

/// `b` (an op's result on operand `x`) with the value `at` exactly wherever both of x's ends
/// are where the reference saturates (`saturates`): there SPEC §12 requires its exact value.
fn saturated(x: &Bounds, mut b: Bounds, saturates: impl Fn(f64) -> bool, at: impl Fn(f64) -> f64) -> Bounds {
    if x.len() != b.len() {
        return b;
    }
    for i in 0..b.len() {
        let (lo, hi) = (x.lo[i], x.hi[i]);
        if saturates(lo) && saturates(hi) && at(lo) == at(hi) {
            (b.lo[i], b.hi[i]) = (at(lo), at(lo));
        }
    }
    b
}

fn select(c: &Bounds, x: &Bounds, y: &Bounds, shape: &[usize]) -> Bounds {
    let xy = zip(x, y, shape, 0.0, |x, y| (nan_min(x.0, y.0), nan_max(x.1, y.1)));
    let picked = |which: &Bounds| zip(which, which, shape, 0.0, |v, _| v);
    let (x, y) = (picked(x), picked(y));
    let Some(ic) = broadcast_index(&c.shape, shape) else { return xy };
    let mut out = xy.clone();
    for (k, &i) in ic.iter().enumerate() {
        let from = if c.lo[i].is_nan() || c.hi[i].is_nan() {
            // A condition that may be NaN: nothing is known.
            (out.lo[k], out.hi[k]) = (f64::NAN, f64::NAN);
            continue;
        } else if c.lo[i] == 1.0 {
            &x
        } else if c.hi[i] == 0.0 {
            &y
        } else {
            &xy
        };
        (out.lo[k], out.hi[k]) = (from.lo[k], from.hi[k]);
    }
    out
}

/// A matrix product of rank-2 operands, each read as its transpose where its flag says
/// (`transpose_a`: `a` is `[k, m]`; `transpose_b`: `b` is `[n, k]`): each term's interval
/// summed, and then 1e-5 of the sum of the terms' magnitudes either way (SPEC §12's bound for
/// a product, which any summation order meets).
fn matmul(a: &Bounds, b: &Bounds, (ta, tb): (bool, bool), shape: &[usize]) -> Option<Bounds> {
    let (&[a0, a1], &[b0, b1]) = (a.shape.as_slice(), b.shape.as_slice()) else { return None };
    let ((m, k), (k2, n)) = (if ta { (a1, a0) } else { (a0, a1) }, if tb { (b1, b0) } else { (b0, b1) });
    if k != k2 || shape != [m, n] {
        return None;
    }
    // Where the factors' elements (i, t) and (t, j) are stored.
    let at = |i: usize, t: usize| if ta { t * m + i } else { i * k + t };
    let bt = |t: usize, j: usize| if tb { j * k + t } else { t * n + j };
    let (mut lo, mut hi) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            let (mut l, mut h, mut size) = (0.0, 0.0, 0.0);
            for t in 0..k {
                let (x, y) = ((a.lo[at(i, t)], a.hi[at(i, t)]), (b.lo[bt(t, j)], b.hi[bt(t, j)]));
                let (pl, ph) = hull(&[x.0 * y.0, x.0 * y.1, x.1 * y.0, x.1 * y.1]);
                (l, h) = (l + pl, h + ph);
                let term = nan_max(x.0.abs(), x.1.abs()) * nan_max(y.0.abs(), y.1.abs());
                // An infinite term is the interval's own business, not the slack's.
                if term.is_finite() {
                    size += term;
                }
            }
            let slack = 1e-5 * size;
            (lo[i * n + j], hi[i * n + j]) =
                if l.is_nan() || h.is_nan() { (f64::NAN, f64::NAN) } else { widen((l - slack, h + slack), 1.0) };
        }
    }
    Some(Bounds { shape: shape.to_vec(), lo, hi })
}

/// A reduction over `axes` (negative from the end), kept as size 1 and then laid out as the
/// result's `shape` (the same elements, `keep_dims` or not).
fn reduce(op: Op, a: &Bounds, axes: &[i64], shape: &[usize]) -> Option<Bounds> {
    let rank = a.shape.len() as i64;
    let axes: Vec<usize> = axes.iter().map(|&k| if k < 0 { k + rank } else { k }).map(|k| k as usize).collect();
    let kept: Vec<usize> = a.shape.iter().enumerate().map(|(k, &d)| if axes.contains(&k) { 1 } else { d }).collect();
    let n: usize = a.shape.iter().enumerate().filter(|(k, _)| axes.contains(k)).map(|(_, &d)| d).product();
    let total: usize = kept.iter().product();
    if total != shape.iter().product::<usize>() {
        return None;
    }
    // Where each input element goes: its index with the reduced axes at 0.
    let to = broadcast_index(&kept, &a.shape)?;
    let (init, ulps) = match op {
        Op::ReduceMax => (f64::NEG_INFINITY, 0.0),
        Op::ReduceMin => (f64::INFINITY, 0.0),
        _ => (0.0, 1.0),
    };
    let (mut lo, mut hi, mut size) = (vec![init; total], vec![init; total], vec![0.0f64; total]);
    for (i, &o) in to.iter().enumerate() {
        let (l, h) = (a.lo[i], a.hi[i]);
        match op {
            Op::ReduceMax => (lo[o], hi[o]) = (nan_max(lo[o], l), nan_max(hi[o], h)),
            Op::ReduceMin => (lo[o], hi[o]) = (nan_min(lo[o], l), nan_min(hi[o], h)),
            _ => {
                (lo[o], hi[o]) = (lo[o] + l, hi[o] + h);
                let term = nan_max(l.abs(), h.abs());
                if term.is_finite() {
                    size[o] += term;
                }
            }
        }
    }
    let mean = if op == Op::ReduceMean { n.max(1) as f64 } else { 1.0 };
    let (lo, hi) = lo
        .iter()
        .zip(&hi)
        .zip(&size)
        .map(|((&l, &h), &s)| {
            if l.is_nan() || h.is_nan() {
                return (f64::NAN, f64::NAN);
            }
            // Terms that cancel: 2^-50 of their magnitudes, either way.
            let slack = s * (-50.0f64).exp2();
            widen(((l - slack) / mean, (h + slack) / mean), ulps)
        })
        .unzip();
    Some(Bounds { shape: shape.to_vec(), lo, hi })
}

#[test]
fn intervals_hold_the_chain_and_little_else() {
    let m = graphc_ir::parse_module(
        "graph @node(%in0: f32[4]) -> (out0: f32[4]) {\n  %0 = tanh %in0 : f32[4]\n  %1 = sub %0, %in0 : f32[4]\n  %2 = div %0, %1 : f32[4]\n  return %2\n}\n",
    )
    .expect("parses");
    let xs = [1.0f32, 0.5, 0.05, 0.0];
    let x = Tensor::F32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[4]), xs.to_vec()).unwrap());
    let b = &allowed(&m, &[x]).expect("every op is bounded")[0];
    for (i, &x) in xs[..2].iter().enumerate() {
        let want = f64::from(x).tanh() / (f64::from(x).tanh() - f64::from(x));
        // Well conditioned: the truth, and nothing 1e-4 away.
        assert!(b.allows(i, want) && !b.allows(i, want * (1.0 + 1e-4)) && !b.allows(i, want * (1.0 - 1e-4)));
    }
    // Nearer 0 the difference cancels: a thousandth either way, not a hundredth.
    let want = 0.05f64.tanh() / (0.05f64.tanh() - 0.05);
    assert!(b.allows(2, want * (1.0 + 1e-4)) && b.allows(2, want * (1.0 - 1e-4)));
    assert!(!b.allows(2, want * 1.01) && !b.allows(2, want * 0.99));
    // At 0, 0 / 0: NaN, which must match exactly, so no value is allowed.
    assert!(!b.allows(3, f64::INFINITY) && !b.allows(3, 0.0) && !b.allows(3, 1.0) && !b.allows(3, f64::NAN));
}

#[test]
fn intervals_keep_saturation_and_zero_divisors_exact() {
    let m = graphc_ir::parse_module(
        "graph @node(%in0: f32[3], %in1: f32[3]) -> (out0: f32[3], out1: f32[3]) {\n  %0 = tanh %in0 : f32[3]\n  %1 = div %in0, %in1 : f32[3]\n  return %0, %1\n}\n",
    )
    .expect("parses");
    let t = |v: [f32; 3]| Tensor::F32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[3]), v.to_vec()).unwrap());
    let b = allowed(&m, &[t([20.0, -20.0, 0.5]), t([0.0, 0.0, -0.0])]).expect("every op is bounded");
    // tanh 20 is exactly 1 in f32: nothing else; tanh 0.5 within a few ulp, never above 1.
    assert!(b[0].allows(0, 1.0) && !b[0].allows(0, 1.0 - 1e-7) && b[0].allows(1, -1.0) && !b[0].allows(1, -1.0 + 1e-7));
    // x / 0 is an infinity of x's sign (the zero's too), never a finite value.
    assert!(b[1].allows(0, f64::INFINITY) && !b[1].allows(0, 1e30) && !b[1].allows(0, f64::NEG_INFINITY));
    assert!(b[1].allows(2, f64::NEG_INFINITY) && !b[1].allows(2, -1e30));
}
