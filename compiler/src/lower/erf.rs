//! erf as the CPU tiers compute it inline (Cranelift and LLVM alike): within 1 ulp of libm's
//! erff, the reference kernel's, measured over every f32 with fused multiply-adds. On |x|
//! below [`SMALL_END`], |x| P(x^2); up to [`MID_END`] and [`FAR_END`], polynomials in |x|
//! about [`MID_AT`] and [`FAR_AT`] (Chebyshev fits of degrees 6, 10 and 9); from `FAR_END`
//! on, 1 (erff rounds to 1 there); then x's sign. An emitter computes all three and picks
//! each lane's, so a NaN goes through the last polynomial and stays NaN.

/// P's coefficients, lowest first; `SMALL[0]` is 2/sqrt(pi) rounded, and [`SMALL_LO`] what
/// it lacks: the leading term |x| 2/sqrt(pi) is summed as two f32s (rounded once it would be
/// half an ulp off by itself).
pub const SMALL: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_38,
    0.112_837_44,
    -0.026_862_144,
    0.005_208_075_5,
    -0.000_822_587_4,
    8.737_63e-5,
];
pub const SMALL_LO: f32 = -5.863_538_3e-8;
pub const SMALL_END: f32 = 0.875;

pub const MID: [f32; 11] = [
    0.972_874_64,
    0.098_212_235,
    -0.153_456_63,
    0.127_115_23,
    -0.048_156_47,
    -0.008_060_291,
    0.017_040_512,
    -0.005_575_022,
    -0.001_481_967,
    0.001_359_807_2,
    -0.000_138_229_66,
];
pub const MID_AT: f32 = 1.5625;
pub const MID_END: f32 = 2.25;

pub const FAR: [f32; 10] = [
    0.999_988_4,
    7.564_727e-5,
    -0.000_234_838_02,
    0.000_459_970_96,
    -0.000_631_044_7,
    0.000_644_977_9,
    -0.000_512_160_5,
    0.000_300_108_46,
    -0.000_100_880_71,
    9.412_3e-6,
];
pub const FAR_AT: f32 = 3.1;
pub const FAR_END: f32 = 3.95;

/// The same steps on one f32 (what both emitters generate, lane by lane): for tests and for
/// reading.
pub fn erf(x: f32) -> f32 {
    let horner = |c: &[f32], t: f32| c[..c.len() - 1].iter().rev().fold(c[c.len() - 1], |p, &k| p.mul_add(t, k));
    let a = x.abs();
    let t = a * a;
    let q = t * horner(&SMALL[1..], t);
    let small = a.mul_add(SMALL[0], a.mul_add(SMALL_LO, a * q));
    let mid = horner(&MID, a - MID_AT);
    let far = horner(&FAR, a - FAR_AT);
    let r = if a < SMALL_END {
        small
    } else if a < MID_END {
        mid
    } else {
        far
    };
    let r = if a >= FAR_END { 1.0 } else { r };
    r.copysign(x)
}

#[cfg(test)]
mod tests {
    /// Ulps between two floats, through the denormals (+0 and -0 none apart).
    fn ulps(a: f32, b: f32) -> u64 {
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                -i64::from(i & i32::MAX)
            } else {
                i64::from(i)
            }
        };
        key(a).abs_diff(key(b))
    }

    /// Every 251st f32, and the edges: within 1 ulp of libm's erff (with fused multiply-adds,
    /// which `f32::mul_add` is), NaN for NaN, signed zeros and infinities as erff has them.
    #[test]
    fn erf_is_within_one_ulp_of_libm() {
        let edges =
            [0.0, -0.0, f32::MIN_POSITIVE, 1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, 3.95, 2.25, 0.875];
        let sweep = (0..u32::MAX / 251).map(|i| f32::from_bits(i * 251));
        let mut worst = (0, 0.0f32);
        for x in edges.into_iter().chain(edges.map(|e| -e)).chain(sweep) {
            let (got, want) = (super::erf(x), libm::erff(x));
            if want.is_nan() {
                assert!(got.is_nan(), "erf({x:e}) = {got:e}, not NaN");
                continue;
            }
            assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "erf({x:e}) = {got:e}, libm {want:e}");
            let d = ulps(got, want);
            if d > worst.0 {
                worst = (d, x);
            }
        }
        assert!(worst.0 <= 1, "{} ulp at {:e}", worst.0, worst.1);
    }
}
