/// FNV-1a over `bytes`, continuing from `h` (start with [`FNV_OFFSET`]): a stable hash (the
/// same on every build and host), for fingerprints, not for security. Shared with build.rs.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
