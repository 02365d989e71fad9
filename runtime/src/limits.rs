//! Size limits, so a graph or a file that asks for an absurd tensor gets an error instead of
//! aborting the process when the allocation fails.

use graphc_ir::TensorType;

/// The largest tensor a session allocates by default: the machine's physical memory (from
/// /proc/meminfo on Linux), or 16 GiB where that cannot be read.
pub fn default_max_tensor_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(16 << 30)
}

/// The bytes a tensor of this type takes, `None` on overflow.
pub fn tensor_bytes(ty: &TensorType) -> Option<u64> {
    ty.num_elements()?.checked_mul(ty.dtype.size_bytes() as u64)
}

/// An error naming the type and its size when it exceeds `limit` bytes.
pub fn check_tensor_size(ty: &TensorType, limit: u64) -> Result<(), String> {
    match tensor_bytes(ty) {
        Some(b) if b <= limit => Ok(()),
        Some(b) => Err(format!(
            "a tensor of type {ty} takes {}, more than the {} a tensor may take here",
            human(b),
            human(limit)
        )),
        None => Err(format!("a tensor of type {ty} has more elements than memory can address")),
    }
}

/// A size for messages: bytes, KiB, MiB or GiB.
pub fn human(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes < 1 << 10 {
        format!("{bytes} bytes")
    } else if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// A `--timeout`: `None` is no limit.
#[derive(Clone, Copy, Debug)]
pub struct Timeout(pub Option<std::time::Duration>);

/// A `--timeout` in seconds: positive; 'inf', or a value too large for the clock, is no limit.
pub fn parse_timeout(s: &str) -> Result<Timeout, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!("'{s}' is not a positive number of seconds"));
    }
    // Past what a Duration holds (about 5.8e11 years) no deadline can ever be reached.
    match std::time::Duration::try_from_secs_f64(v) {
        Ok(d) if d.is_zero() => Err(format!("'{s}' seconds is less than the clock's nanosecond")),
        Ok(d) => Ok(Timeout(Some(d))),
        Err(_) => Ok(Timeout(None)),
    }
}
