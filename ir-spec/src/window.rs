//! Sliding-window geometry shared by `conv`, `max_pool` and `avg_pool`: the type rules and the
//! reference kernels compute output sizes and window positions from the same code.

use crate::attr::Attrs;

/// Where the windows of a convolution or pooling lie along each spatial dim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Window size per spatial dim.
    pub kernel: Vec<u64>,
    pub strides: Vec<u64>,
    /// Padding before each spatial dim.
    pub pads_begin: Vec<u64>,
    /// Padding after each spatial dim.
    pub pads_end: Vec<u64>,
    pub dilations: Vec<u64>,
    /// Output sizes round up (a last, partial window counts if it starts inside the input or
    /// its leading padding).
    pub ceil_mode: bool,
}

impl Window {
    /// Reads `strides`, `pads` (all begins, then all ends) and `dilations` (each defaulting to
    /// ones or zeros) and `ceil_mode`, checking their lengths and values.
    pub fn from_attrs(attrs: &Attrs, kernel: Vec<u64>) -> Result<Window, String> {
        let n = kernel.len();
        let list = |name: &str, len: usize, default: u64, min: i64| -> Result<Vec<u64>, String> {
            match attrs.ints(name) {
                None => Ok(vec![default; len]),
                Some(v) if v.len() != len => {
                    Err(format!("'{name}' has {} entries; {len} expected for {n} spatial dims", v.len()))
                }
                Some(v) => v
                    .iter()
                    .map(|&x| {
                        if x < min {
                            Err(format!("'{name}' holds {x}; each entry must be at least {min}"))
                        } else {
                            Ok(x as u64)
                        }
                    })
                    .collect(),
            }
        };
        if let Some(&k) = kernel.iter().find(|&&k| k == 0) {
            return Err(format!("a window size of {k}"));
        }
        let pads = list("pads", 2 * n, 0, 0)?;
        Ok(Window {
            strides: list("strides", n, 1, 1)?,
            pads_begin: pads[..n].to_vec(),
            pads_end: pads[n..].to_vec(),
            dilations: list("dilations", n, 1, 1)?,
            ceil_mode: attrs.bool("ceil_mode").unwrap_or(false),
            kernel,
        })
    }

    /// Output size per spatial dim for these input sizes. Attributes may be as large as an
    /// i64 allows, so every step is checked: a window or padded input too large for 64 bits
    /// is an error, not a wrapped (and wrong) size.
    pub fn output_dims(&self, input: &[u64]) -> Result<Vec<u64>, String> {
        let mut out = Vec::with_capacity(input.len());
        for (i, &size) in input.iter().enumerate() {
            let too_large = |what: &str| format!("spatial dim {i}: the {what} is larger than 64 bits can count");
            let span = self.dilations[i]
                .checked_mul(self.kernel[i] - 1)
                .and_then(|s| s.checked_add(1))
                .ok_or_else(|| too_large("dilated window"))?;
            let before = size.checked_add(self.pads_begin[i]).ok_or_else(|| too_large("padded input"))?;
            let padded = before.checked_add(self.pads_end[i]).ok_or_else(|| too_large("padded input"))?;
            if padded < span {
                return Err(format!("spatial dim {i}: the window spans {span} but the padded input has only {padded}"));
            }
            let steps = padded - span;
            let mut o = if self.ceil_mode { steps.div_ceil(self.strides[i]) } else { steps / self.strides[i] } + 1;
            // A window may not start in the trailing padding; a start past 64 bits is there.
            if self.ceil_mode && (o - 1).checked_mul(self.strides[i]).is_none_or(|start| start >= before) {
                o -= 1;
            }
            out.push(o);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(kernel: u64, stride: u64, pads: (u64, u64), dilation: u64, ceil_mode: bool) -> Window {
        Window {
            kernel: vec![kernel],
            strides: vec![stride],
            pads_begin: vec![pads.0],
            pads_end: vec![pads.1],
            dilations: vec![dilation],
            ceil_mode,
        }
    }

    #[test]
    fn geometry_past_64_bits_is_an_error_not_a_wrapped_size() {
        const M: u64 = i64::MAX as u64;
        let e = window(3, 1, (M, M), 1, false).output_dims(&[5]).unwrap_err();
        assert!(e.contains("padded input is larger than 64 bits"), "{e}");
        let e = window(4, 1, (0, 0), M, false).output_dims(&[5]).unwrap_err();
        assert!(e.contains("dilated window is larger than 64 bits"), "{e}");
        let e = window(1, 1, (1, 0), 1, false).output_dims(&[u64::MAX]).unwrap_err();
        assert!(e.contains("padded input is larger than 64 bits"), "{e}");
    }

    #[test]
    fn ceil_mode_with_a_start_past_64_bits_drops_that_window() {
        // Padded to 2^64 - 7; with this stride the fifth window would start at 4 * stride,
        // which overflows: it lies in the trailing padding, so four windows.
        const M: u64 = i64::MAX as u64;
        let w = window(1, (1 << 62) + 1, (M, M - 10), 1, true);
        assert_eq!(w.output_dims(&[5]).unwrap(), vec![4]);
        // The ordinary case: a last partial window that starts inside the input counts.
        assert_eq!(window(2, 2, (0, 0), 1, true).output_dims(&[5]).unwrap(), vec![3]);
        assert_eq!(window(2, 2, (0, 0), 1, false).output_dims(&[5]).unwrap(), vec![2]);
    }
}
