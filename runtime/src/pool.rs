//! A session's recycled tensor buffers. Values a step no longer needs give their buffers back
//! here, and compiled kernels take their outputs from here. So once a step has run, the next
//! one finds every buffer it needs and allocates none. The allocator would reuse the memory
//! too, but it may hand large blocks back to the system between steps, and the next step would
//! then fault in and clear fresh pages.
//!
//! Only f32 buffers are kept: the compiled kernels take no others. A buffer is kept only while
//! the pool holds fewer buffers of its length than kernels have ever asked for and not found.
//! So the pool never holds more than the most that one step had in use at once, and a length
//! that no kernel asks for (the output of a reference kernel, say) is never kept.

use crate::tensor::Tensor;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex};

/// Recycled f32 buffers by length.
#[derive(Debug, Default)]
pub struct BufferPool {
    inner: Mutex<Pooled>,
}

#[derive(Debug, Default)]
struct Pooled {
    by_length: FxHashMap<usize, Length>,
    stats: PoolStats,
}

/// The buffers of one length.
#[derive(Debug, Default)]
struct Length {
    free: Vec<Vec<f32>>,
    /// How many buffers kernels asked for and did not find (so had allocated).
    missed: usize,
}

/// What a pool has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers handed out from the pool.
    pub reused: u64,
    /// Buffers allocated because the pool had none of that length.
    pub allocated: u64,
    /// Buffers given back and kept.
    pub kept: u64,
}

impl BufferPool {
    /// A buffer with room for `len` elements and length 0: a recycled one when there is one,
    /// else a new one, allocated fallibly (an error naming the bytes, not an abort).
    pub fn take_f32(&self, len: usize) -> Result<Vec<f32>, String> {
        match self.recycled(len) {
            Some(mut v) => {
                v.clear();
                Ok(v)
            }
            None => reserved(len),
        }
    }

    /// A buffer of `len` elements for a kernel that writes every one before it reads any: a
    /// recycled one holding what its last user left in it (not cleared: a pass over every
    /// element saved), else a new one, allocated fallibly. A new one holds zeros, but NaNs in
    /// debug builds: so that in the tests an element a kernel leaves unwritten shows, as a
    /// recycled buffer's stale value would in a long run.
    pub fn take_f32_filled(&self, len: usize) -> Result<Vec<f32>, String> {
        match self.recycled(len) {
            // Buffers are kept by their length, so this one holds `len` elements already.
            Some(mut v) => {
                v.resize(len, 0.0);
                Ok(v)
            }
            None => {
                let mut v = reserved(len)?;
                v.resize(len, if cfg!(debug_assertions) { f32::NAN } else { 0.0 });
                Ok(v)
            }
        }
    }

    /// A kept buffer of `len` elements, counted as reused, or `None` counted as a miss.
    fn recycled(&self, len: usize) -> Option<Vec<f32>> {
        let mut p = crate::wait::lock(&self.inner);
        let Pooled { by_length, stats } = &mut *p;
        let l = by_length.entry(len).or_default();
        if let Some(v) = l.free.pop() {
            stats.reused += 1;
            return Some(v);
        }
        stats.allocated += 1;
        l.missed += 1;
        None
    }

    /// Takes back a tensor nobody else holds, if its buffer is one kernels ask for; otherwise
    /// it is simply dropped.
    pub fn give(&self, t: Arc<Tensor>) {
        if let Ok(Tensor::F32(a)) = Arc::try_unwrap(t) {
            self.give_f32(a);
        }
    }

    /// Takes back an array's buffer, when the array owns exactly its elements.
    pub fn give_f32(&self, a: ndarray::ArrayD<f32>) {
        let len = a.len();
        let (v, offset) = a.into_raw_vec_and_offset();
        if v.len() == len && offset.unwrap_or(0) == 0 {
            self.give_vec(v);
        }
    }

    /// Takes back a buffer of `v.len()` elements, if kernels ask for that length.
    pub fn give_vec(&self, v: Vec<f32>) {
        let len = v.len();
        if len == 0 {
            return;
        }
        let mut p = crate::wait::lock(&self.inner);
        let Pooled { by_length, stats } = &mut *p;
        if let Some(l) = by_length.get_mut(&len).filter(|l| l.free.len() < l.missed) {
            l.free.push(v);
            stats.kept += 1;
        }
    }

    pub fn stats(&self) -> PoolStats {
        crate::wait::lock(&self.inner).stats
    }
}

/// A new buffer with room for `len` elements, or an error naming the bytes.
fn reserved(len: usize) -> Result<Vec<f32>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| format!("cannot allocate {} bytes for a kernel's output of {len} f32s", len.saturating_mul(4)))?;
    Ok(v)
}
