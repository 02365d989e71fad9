//! Einsum, composed: each operand's repeated letters reduced to their diagonal (a gather of
//! the flattened pair of axes), every operand laid out over all the equation's letters (a
//! transpose and unit dims where it lacks one), the product taken with broadcasting, the
//! letters missing from the output summed away and the rest put in the output's order. The
//! product spans every letter at once, so a contraction costs memory for the full index space:
//! correct for any equation, not a tuned matmul.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use graphc_ir::{Attr, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

pub(super) const OPS: &[OpEntry] = &[OpEntry::since("Einsum", 12, einsum)];

/// Letters for the dims an ellipsis stands for (not letters of the equation's alphabet).
const ELLIPSIS_LETTERS: &str = "0123456789";

fn einsum(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let equation: String = Attrs(n).string("equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let operands = (0..n.input.len()).map(|i| imp.input(n, i)).collect::<Result<Vec<_>>>()?;
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (equation.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != operands.len() {
        return Err(format!("the equation '{equation}' has {} operands, the node {}", terms.len(), operands.len()));
    }
    // Each operand's letters, its ellipsis expanded to as many dims as it covers.
    let mut ellipsis_rank = 0;
    let mut letters: Vec<Vec<char>> = Vec::new();
    for (term, &x) in terms.iter().zip(&operands) {
        let rank = imp.shape(x)?.len();
        letters.push(expand(term, rank, &mut ellipsis_rank)?);
    }
    let out: Vec<char> = match &rhs {
        Some(r) => {
            let rank = r.replace("...", "").len() + if r.contains("...") { ellipsis_rank } else { 0 };
            expand(r, rank, &mut ellipsis_rank.clone())?
        }
        None => {
            // Implicit output: the ellipsis dims, then the letters seen once, in order.
            let mut once: Vec<char> = lhs.chars().filter(|c| c.is_ascii_alphabetic()).collect();
            once.sort_unstable();
            let single: Vec<char> =
                once.iter().copied().filter(|c| once.iter().filter(|d| *d == c).count() == 1).collect();
            ELLIPSIS_LETTERS.chars().skip(ELLIPSIS_LETTERS.len() - ellipsis_rank).chain(single).collect()
        }
    };
    // Diagonals first, so every operand has each letter once.
    let mut xs = Vec::new();
    for (mut x, mut ls) in operands.into_iter().zip(letters) {
        while let Some((p, q)) = repeated(&ls) {
            x = diagonal(imp, x, p, q)?;
            ls.remove(q);
        }
        xs.push((x, ls));
    }
    let mut all: Vec<char> = Vec::new();
    for (_, ls) in &xs {
        for &c in ls {
            if !all.contains(&c) {
                all.push(c);
            }
        }
    }
    if let Some(c) = out.iter().find(|c| !all.contains(c)) {
        return Err(format!("the output letter '{c}' names no operand's dim"));
    }
    // Each operand over all letters: its own in `all`'s order, unit dims for the rest.
    let mut product: Option<Value> = None;
    for (x, ls) in xs {
        let perm: Vec<i64> = all.iter().filter_map(|c| ls.iter().position(|d| d == c)).map(|p| p as i64).collect();
        let x = imp.transpose(x, perm)?;
        let dims = imp.shape(x)?;
        let mut own = dims.iter();
        let shape: Vec<i64> =
            all.iter().map(|c| if ls.contains(c) { *own.next().expect("one dim per own letter") } else { 1 }).collect();
        let x = imp.reshape(x, shape)?;
        product = Some(match product {
            Some(p) => imp.binary(Op::Mul, p, x)?,
            None => x,
        });
    }
    let product = product.ok_or("Einsum needs at least one operand")?;
    let summed: Vec<i64> = (0..all.len()).filter(|&i| !out.contains(&all[i])).map(|i| i as i64).collect();
    let kept: Vec<char> = all.iter().copied().filter(|c| out.contains(c)).collect();
    let reduced = if summed.is_empty() { product } else { imp.reduce(Op::ReduceSum, product, summed, false)? };
    let perm: Vec<i64> =
        out.iter().map(|c| kept.iter().position(|d| d == c).expect("output letters are kept") as i64).collect();
    Ok(vec![imp.transpose(reduced, perm)?])
}

/// A term's letters with its `...` replaced by ellipsis letters for the dims it covers in an
/// operand of `rank` (the same for every operand; recorded in `ellipsis_rank`).
fn expand(term: &str, rank: usize, ellipsis_rank: &mut usize) -> Result<Vec<char>> {
    let (before, after) = match term.split_once("...") {
        Some((b, a)) => (b, Some(a)),
        None => (term, None),
    };
    let named = before.len() + after.map_or(0, str::len);
    if let Some(c) = term.chars().find(|c| !c.is_ascii_alphabetic() && *c != '.') {
        return Err(format!("'{c}' in the term '{term}' is not a letter"));
    }
    let Some(after) = after else {
        if named != rank {
            return Err(format!("the term '{term}' names {named} dims of an operand of rank {rank}"));
        }
        return Ok(before.chars().collect());
    };
    let covered = rank.checked_sub(named).ok_or(format!("the term '{term}' names more dims than the rank {rank}"))?;
    if covered > ELLIPSIS_LETTERS.len() {
        return Err(format!("an ellipsis covering {covered} dims is more than graphc's {}", ELLIPSIS_LETTERS.len()));
    }
    *ellipsis_rank = (*ellipsis_rank).max(covered);
    // Right-aligned as broadcasting is: the ellipsis' last dims take the last letters.
    let skip = ELLIPSIS_LETTERS.len() - covered;
    Ok(before.chars().chain(ELLIPSIS_LETTERS.chars().skip(skip)).chain(after.chars()).collect())
}

fn repeated(ls: &[char]) -> Option<(usize, usize)> {
    (0..ls.len()).find_map(|q| ls[..q].iter().position(|&c| c == ls[q]).map(|p| (p, q)))
}

/// The diagonal of axes `p` < `q` (of one size), kept at `p`, `q` dropped.
fn diagonal(imp: &mut Importer, x: Value, p: usize, q: usize) -> Result<Value> {
    let dims = imp.shape(x)?;
    if dims[p] != dims[q] {
        return Err(format!("a repeated letter names dims of sizes {} and {}", dims[p], dims[q]));
    }
    let r = dims.len();
    // Move p and q last, flatten them, take every (n + 1)-th element, and move it back to p.
    let mut perm: Vec<i64> = (0..r as i64).filter(|&i| i != p as i64 && i != q as i64).collect();
    perm.extend([p as i64, q as i64]);
    let t = imp.transpose(x, perm)?;
    let size = dims[p];
    let mut flat: Vec<i64> = dims.iter().enumerate().filter(|&(i, _)| i != p && i != q).map(|(_, &d)| d).collect();
    flat.push(size * size);
    let t = imp.reshape(t, flat)?;
    let idx = imp.constant(Tensor::I64(ndarray::Array1::from_iter((0..size).map(|i| i * (size + 1))).into_dyn()))?;
    let d = imp.emit1(NodeSpec::new(Op::Gather, vec![t, idx]).attr("axis", Attr::Int(r as i64 - 2)))?;
    let mut back: Vec<i64> = (0..r as i64 - 2).collect();
    back.insert(p, r as i64 - 2);
    imp.transpose(d, back)
}
