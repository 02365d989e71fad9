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

    /// Output size per spatial dim for these input sizes.
    pub fn output_dims(&self, input: &[u64]) -> Result<Vec<u64>, String> {
        let mut out = Vec::with_capacity(input.len());
        for i in 0..input.len() {
            let span = self.dilations[i] * (self.kernel[i] - 1) + 1;
            let padded = input[i] + self.pads_begin[i] + self.pads_end[i];
            if padded < span {
                return Err(format!("spatial dim {i}: the window spans {span} but the padded input has only {padded}"));
            }
            let steps = padded - span;
            let mut o = if self.ceil_mode { steps.div_ceil(self.strides[i]) } else { steps / self.strides[i] } + 1;
            // A window may not start in the trailing padding.
            if self.ceil_mode && (o - 1) * self.strides[i] >= input[i] + self.pads_begin[i] {
                o -= 1;
            }
            out.push(o);
        }
        Ok(out)
    }
}
