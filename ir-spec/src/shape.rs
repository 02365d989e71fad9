//! Shape arithmetic shared by the type rules: broadcasting and axis normalization.

/// Numpy broadcasting of two shapes: align on the right; each pair of dims must be equal or one
/// of them 1.
pub fn broadcast_shapes(a: &[u64], b: &[u64]) -> Result<Vec<u64>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => {
                return Err(format!(
                    "shapes {} and {} do not broadcast: dimension {i} of the result would be both {x} and {y}",
                    fmt_shape(a),
                    fmt_shape(b)
                ))
            }
        };
    }
    Ok(out)
}

/// True when `from` broadcasts to exactly `to` (numpy `broadcast_to`).
pub fn broadcasts_to(from: &[u64], to: &[u64]) -> bool {
    from.len() <= to.len() && from.iter().rev().zip(to.iter().rev()).all(|(&f, &t)| f == t || f == 1)
}

/// Resolves a possibly negative axis against a rank.
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        let range =
            if rank == 0 { "none: the operand is a scalar".to_string() } else { format!("{} to {}", -r, r - 1) };
        Err(format!("axis {axis} is out of range for rank {rank} (valid: {range})"))
    } else {
        Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
    }
}

/// `[2,3]` spelling of a shape for messages.
pub fn fmt_shape(s: &[u64]) -> String {
    let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_broadcasting() {
        assert_eq!(broadcast_shapes(&[4, 1, 3], &[5, 1]).unwrap(), vec![4, 5, 3]);
        assert_eq!(broadcast_shapes(&[], &[2, 2]).unwrap(), vec![2, 2]);
        assert_eq!(broadcast_shapes(&[0], &[1]).unwrap(), vec![0]);
        assert!(broadcast_shapes(&[3], &[4]).is_err());
        assert!(broadcasts_to(&[3, 1], &[2, 3, 4]));
        assert!(!broadcasts_to(&[3, 2], &[3, 4]));
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axis(-1, 3).unwrap(), 2);
        assert!(normalize_axis(3, 3).is_err());
        assert!(normalize_axis(0, 0).unwrap_err().contains("scalar"));
    }
}
