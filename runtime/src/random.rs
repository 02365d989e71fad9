//! Deterministic pseudo-random tensors, so any graph can be run without preparing inputs.

use crate::session::RunRequest;
use crate::tensor::Tensor;
use graphc_ir::{DType, Graph, Op, TensorType, Use, Value};
use ndarray::{ArrayD, Dimension, IxDyn};

/// SplitMix64: tiny, fast, and the same sequence on every platform.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What values a random input takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Range {
    /// Floats uniform in [-1, 1), integers uniform in [0, 10), bools fair.
    Default,
    /// Integers uniform in [0, n) (valid indices into a dim of size n).
    Below(u64),
}

/// A tensor of the given type filled from `seed`; an error when it is too large to allocate.
pub fn random_tensor(ty: &TensorType, seed: u64, range: Range) -> Result<Tensor, String> {
    let mut rng = SplitMix64::new(seed);
    let shape = crate::tensor::ix_checked(ty)?;
    let n = shape.size() as u64;
    let below = match range {
        Range::Default => 10,
        Range::Below(n) => n.max(1),
    };
    fn gen<T>(shape: IxDyn, n: u64, ty: &TensorType, mut f: impl FnMut() -> T) -> Result<ArrayD<T>, String> {
        let mut v = crate::tensor::try_vec(n, ty)?;
        v.extend((0..n).map(|_| f()));
        Ok(ArrayD::from_shape_vec(shape, v).expect("the vector was sized for the shape"))
    }
    Ok(match ty.dtype {
        DType::F32 => Tensor::F32(gen(shape, n, ty, || (rng.next_f64() * 2.0 - 1.0) as f32)?),
        DType::F64 => Tensor::F64(gen(shape, n, ty, || rng.next_f64() * 2.0 - 1.0)?),
        DType::I32 => Tensor::I32(gen(shape, n, ty, || (rng.next_u64() % below) as i32)?),
        DType::I64 => Tensor::I64(gen(shape, n, ty, || (rng.next_u64() % below) as i64)?),
        DType::Bool => Tensor::Bool(gen(shape, n, ty, || rng.next_u64() & 1 == 1)?),
        // Other dtypes: the f64 or integer draw, converted with cast's rules.
        DType::F16 | DType::BF16 => {
            crate::kernels::cast(&Tensor::F64(gen(shape, n, ty, || rng.next_f64() * 2.0 - 1.0)?), ty.dtype)
        }
        _ => crate::kernels::cast(&Tensor::I64(gen(shape, n, ty, || (rng.next_u64() % below) as i64)?), ty.dtype),
    })
}

/// A seed for one named input: the run's seed mixed with a stable hash of the name (FNV-1a),
/// so inputs differ from each other and from run to run only when the seed does.
pub fn seed_for(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    SplitMix64::new(seed ^ h).next_u64()
}

/// The values a graph input should take: integers that feed the indices of a gather or a
/// scatter_add, or the labels of a softmax_cross_entropy, stay in range, so any graph runs on
/// random data as it is. Uses are followed into the regions the value is passed to (fusion
/// kernels, loop and branch bodies).
pub fn input_range(g: &Graph, v: Value) -> Range {
    for u in g.uses(v) {
        let Use::Operand(n, i) = *u else { continue };
        let nd = &g.nodes[n];
        if matches!(nd.op, Op::Gather | Op::ScatterAdd) && i == 1 {
            if let Some(data) = g.values[nd.operands[0]].ty.as_tensor() {
                let axis = nd.attrs.int("axis").unwrap_or(0);
                if let Ok(ax) = graphc_ir::shape::normalize_axis(axis, data.rank()) {
                    return Range::Below(data.shape[ax]);
                }
            }
        }
        if nd.op == Op::SoftmaxCrossEntropy && i == 1 {
            if let Some(&classes) = g.values[nd.operands[0]].ty.as_tensor().and_then(|t| t.shape.last()) {
                return Range::Below(classes);
            }
        }
        // Region parameters line up with the operands (a cond's predicate has none).
        let param = if nd.op == Op::Cond { (i as usize).checked_sub(1) } else { Some(i as usize) };
        for &r in &nd.regions {
            if let Some(&p) = param.and_then(|p| g.regions[r].params.get(p)) {
                if let Range::Below(b) = input_range(g, p) {
                    return Range::Below(b);
                }
            }
        }
    }
    Range::Default
}

/// Seeded random data for graph input `v`, seeded by the run's seed and the input's name;
/// `None` when the input is not a tensor, an error naming the input when it is too large.
pub fn random_input(g: &Graph, v: Value, seed: u64) -> Option<Result<Tensor, String>> {
    let ty = g.values[v].ty.as_tensor()?;
    let name = g.values[v].name.as_deref().unwrap_or_default();
    Some(random_tensor(ty, seed_for(seed, name), input_range(g, v)).map_err(|e| format!("input '{name}': {e}")))
}

/// A request that feeds every tensor input of `g` with seeded random data and fetches every
/// output: what `graphc run` does when no input is given. An error when an input is too large.
pub fn random_request(g: &Graph, seed: u64) -> Result<RunRequest, String> {
    let mut req = RunRequest::new(g.name.as_str());
    for &v in g.inputs() {
        if let Some(t) = random_input(g, v, seed) {
            req = req.feed(g.values[v].name.clone().unwrap_or_default(), t?);
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_random_tensors_are_errors_not_aborts() {
        assert!(random_tensor(&TensorType::new(DType::I64, [1u64 << 61]), 0, Range::Default).is_err());
    }
}
