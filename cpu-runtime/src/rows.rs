//! How a kernel's rows split across threads, and the per-thread scratch rows.

use smallvec::SmallVec;

/// The sizes below which kernels run on the calling thread: the runtime's, which runs a step
/// of a graph with nothing larger on its caller's thread.
pub use graphc_runtime::{PARALLEL_ELEMENTS, PARALLEL_FLOPS};

/// Row ranges for the calling thread alone, or a few per worker thread. A kernel called on a
/// thread of a multi-graph step (a partition of a multi-device step: one device, one core)
/// stays on its thread rather than competing with the other devices for the cores.
pub fn row_blocks(rows: usize, parallel: bool) -> SmallVec<[(usize, usize); 8]> {
    let parallel = parallel && graphc_runtime::may_split();
    let chunk = if parallel { rows.div_ceil(rayon::current_num_threads().max(1) * 4).max(1) } else { rows.max(1) };
    (0..rows).step_by(chunk).map(|r| (r, (r + chunk).min(rows))).collect()
}

/// Runs `f` with `len` elements of this thread's scratch row buffer, which lives as long as
/// the thread: a kernel call allocates none. Taken out of the thread-local for the call (not
/// borrowed), so a call nested on this thread, as rayon may run one while it waits, gets a
/// buffer of its own instead of a double borrow.
pub(crate) fn with_scratch(len: usize, f: &mut dyn FnMut(&mut [f32])) {
    thread_local! {
        static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut s = SCRATCH.with(std::cell::Cell::take);
    if s.len() < len {
        s.resize(len, 0.0);
    }
    f(&mut s[..len]);
    SCRATCH.with(|k| k.set(s));
}

/// `v` cleared and grown to `n` zeros. Copied from a static block: a copy of the C library's,
/// at the host's widest stores, where `Vec::resize` (one shared instance for every value)
/// stores one 16-byte vector at a time.
pub(crate) fn zeros(v: &mut Vec<f32>, n: usize) {
    static ZEROS: [f32; 4096] = [0.0; 4096];
    v.clear();
    v.reserve(n);
    while v.len() < n {
        let k = (n - v.len()).min(ZEROS.len());
        v.extend_from_slice(&ZEROS[..k]);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn zeros_clears_and_grows_to_every_length() {
        for n in [0, 1, 4095, 4096, 4097, 10_000] {
            let mut v = vec![f32::NAN; 5000];
            super::zeros(&mut v, n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|x| x.to_bits() == 0), "{n}");
        }
    }
}
