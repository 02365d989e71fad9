//! Scalar semantics of the numeric dtypes, written once per dtype family so every kernel
//! applies the spec's rules: integers wrap, integer division (and remainder) by zero and
//! negative integer powers are errors, max/min propagate NaN.

use super::error::KernelError;
use std::fmt::Debug;

/// `x ^ y` in f32, the one definition the reference kernels and compiled code share: a square
/// or a cube (GELU's `x ^ 3`) is the product `x·x` or `(x·x)·x` in f64 converted to f32 (a
/// square correctly rounded, since it is exact in f64; a cube maybe one ulp off, rounded
/// twice), so compiled code computes it inline with the same bits; any other exponent is the C
/// library's `powf`, which compiled code calls.
pub fn powf(x: f32, y: f32) -> f32 {
    let w = f64::from(x);
    if y == 2.0 {
        (w * w) as f32
    } else if y == 3.0 {
        (w * w * w) as f32
    } else {
        x.powf(y)
    }
}

/// A numeric element type (the floats f32 and f64, and every integer type). f16 and bf16
/// have no kernels of their own: `kernels::eval` computes them in f32.
pub trait Num: Copy + PartialOrd + Default + Debug + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// The identity of max: the lowest value (-inf for floats).
    const LOWEST: Self;
    /// The identity of min: the highest value (+inf for floats).
    const HIGHEST: Self;

    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Result<Self, KernelError>;
    fn pow(self, o: Self) -> Result<Self, KernelError>;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
    /// The remainder of `self / o`: truncated (C's `fmod`, the dividend's sign) when `trunc`,
    /// else floored (Python's `%`, the divisor's sign).
    fn rem(self, o: Self, trunc: bool) -> Result<Self, KernelError>;

    /// 1, -1 or 0 (+0 for either zero); NaN stays NaN.
    fn sign(self) -> Self {
        if self > Self::ZERO {
            Self::ONE
        } else if self < Self::ZERO {
            Self::ONE.neg()
        } else if self.is_nan() {
            self
        } else {
            Self::ZERO
        }
    }

    /// `max(x, 0)`, NaN stays NaN.
    fn relu(self) -> Self {
        if self.is_nan() || self > Self::ZERO {
            self
        } else {
            Self::ZERO
        }
    }

    /// The larger of two, NaN if either is.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() {
                self
            } else {
                o
            }
        } else if o > self {
            o
        } else {
            self
        }
    }

    /// The smaller of two, NaN if either is.
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() {
                self
            } else {
                o
            }
        } else if o < self {
            o
        } else {
            self
        }
    }
}

/// A floating-point element type.
pub trait Float: Num {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    /// To the nearest integer, halves to the even one.
    fn round_even(self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;

    fn sigmoid(self) -> Self {
        Self::ONE.div(Self::ONE.add(self.neg().exp())).unwrap_or(Self::ZERO)
    }
}

macro_rules! float_num {
    ($t:ident, $erf:path, $pow:path) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = $t::NEG_INFINITY;
            const HIGHEST: Self = $t::INFINITY;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Result<Self, KernelError> {
                Ok(self / o)
            }
            fn pow(self, o: Self) -> Result<Self, KernelError> {
                Ok($pow(self, o))
            }
            fn neg(self) -> Self {
                -self
            }
            fn abs(self) -> Self {
                $t::abs(self)
            }
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            /// numpy's `fmod` and `mod`: `%` is exact; the floored remainder adds the divisor
            /// where the signs differ, and a zero one takes the divisor's sign.
            fn rem(self, o: Self, trunc: bool) -> Result<Self, KernelError> {
                let r = self % o;
                if trunc || o == 0.0 || r.is_nan() {
                    return Ok(r);
                }
                Ok(if r == 0.0 {
                    (0.0 as $t).copysign(o)
                } else if (r < 0.0) != (o < 0.0) {
                    r + o
                } else {
                    r
                })
            }
        }

        impl Float for $t {
            fn exp(self) -> Self {
                $t::exp(self)
            }
            fn ln(self) -> Self {
                $t::ln(self)
            }
            fn sqrt(self) -> Self {
                $t::sqrt(self)
            }
            fn tanh(self) -> Self {
                $t::tanh(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn sin(self) -> Self {
                $t::sin(self)
            }
            fn cos(self) -> Self {
                $t::cos(self)
            }
            fn tan(self) -> Self {
                $t::tan(self)
            }
            fn asin(self) -> Self {
                $t::asin(self)
            }
            fn acos(self) -> Self {
                $t::acos(self)
            }
            fn atan(self) -> Self {
                $t::atan(self)
            }
            fn sinh(self) -> Self {
                $t::sinh(self)
            }
            fn cosh(self) -> Self {
                $t::cosh(self)
            }
            fn asinh(self) -> Self {
                $t::asinh(self)
            }
            fn acosh(self) -> Self {
                $t::acosh(self)
            }
            fn atanh(self) -> Self {
                $t::atanh(self)
            }
            fn floor(self) -> Self {
                $t::floor(self)
            }
            fn ceil(self) -> Self {
                $t::ceil(self)
            }
            fn round_even(self) -> Self {
                $t::round_ties_even(self)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}

float_num!(f32, libm::erff, powf);
float_num!(f64, libm::erf, f64::powf);

macro_rules! int_num {
    ($t:ident) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = $t::MIN;
            const HIGHEST: Self = $t::MAX;
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Result<Self, KernelError> {
                if o == 0 {
                    return Err(KernelError::new(format!("integer division by zero ({self} / 0)")));
                }
                // MIN / -1 wraps to MIN, like the other integer ops.
                Ok(self.wrapping_div(o))
            }
            fn pow(self, o: Self) -> Result<Self, KernelError> {
                // Through i128: the same test for signed and unsigned types.
                if (o as i128) < 0 {
                    return Err(KernelError::new(format!("integer power with a negative exponent ({self} ^ {o})")));
                }
                // Square-and-multiply with wrapping; exponents beyond u32 are fine.
                let (mut base, mut exp, mut acc) = (self, o, 1 as $t);
                while exp > 0 {
                    if exp & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    exp >>= 1;
                }
                Ok(acc)
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            fn abs(self) -> Self {
                // MIN stays MIN (wrapping), unsigned values are their own.
                if (self as i128) < 0 {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            fn is_nan(self) -> bool {
                false
            }
            fn rem(self, o: Self, trunc: bool) -> Result<Self, KernelError> {
                if o == 0 {
                    return Err(KernelError::new(format!("integer division by zero ({self} mod 0)")));
                }
                // MIN mod -1 is 0 (wrapping_rem), like the other integer ops' wrapping.
                let r = self.wrapping_rem(o);
                Ok(if !trunc && r != 0 && ((r as i128) < 0) != ((o as i128) < 0) { r.wrapping_add(o) } else { r })
            }
        }
    };
}

int_num!(i8);
int_num!(i16);
int_num!(i32);
int_num!(i64);
int_num!(u8);
int_num!(u16);
int_num!(u32);
int_num!(u64);
