//! Attention (versions 23 and 24): scaled dot-product attention composed from IR ops.
//!
//! Q, K and V are 4-D `[B, heads, S, head_size]`, or 3-D `[B, S, heads * head_size]` with the
//! `q_num_heads` and `kv_num_heads` attributes, which a reshape to `[B, S, heads, head_size]`
//! and a transpose make 4-D (and the reverse makes Y 3-D again). `past_key`/`past_value` are
//! concatenated before the new K/V along the sequence axis; the results are `present_key`/
//! `present_value`. The scores are `(Q sqrt(scale)) (K sqrt(scale))^T`, one matmul with
//! `transpose_b` (scale defaults to `1 / sqrt(head_size)`), then `softcap * tanh(x / softcap)`
//! where `softcap > 0`, then the bias: a float mask added (integers cast first), a bool mask as
//! 0 where true and -inf where false, `is_causal` as a constant -inf above the diagonal shifted
//! by the past length, and (24) `nonpad_kv_seqlen` as -inf at the padded positions of each
//! batch; a mask shorter than the total sequence is padded with -inf (false). Softmax over the
//! last axis (in `softmax_precision` where it is another dtype graphc has), then the product
//! with V.
//!
//! Grouped-query attention (`q_num_heads` a multiple `r` of `kv_num_heads`) repeats each KV head
//! for `r` consecutive query heads. Rather than materializing the repeat, Q is viewed as
//! `[B, kv_heads, r * S_q, head_size]` (its `r` query heads of one KV head are contiguous), so
//! both products are plain batched matmuls against the KV heads, and the results reshape back
//! to `[B, q_heads, S_q, ...]`.
//!
//! `qk_matmul_output` is, by `qk_matmul_output_mode`: 0 the scaled product (before softcap,
//! as the spec says; the reference implementation gives it after softcap), 1 after softcap,
//! 2 after the bias, 3 after softmax.

use super::attrs::Attrs;
use super::entry::OpEntry;
use super::graph::Importer;
use super::Result;
use crate::proto::NodeProto;
use crate::tensor::dtype_of;
use graphc_ir::{Attr, DType, NodeSpec, Op, Value};
use graphc_runtime::Tensor;

/// Version 24 adds the `nonpad_kv_seqlen` input and masks shorter than the total sequence
/// (padded with -inf), which version 23's converter also accepts as the reference does.
pub(super) const OPS: &[OpEntry] = &[
    OpEntry::since("Attention", 24, |imp, n| attention(imp, n, 24)),
    OpEntry::since("Attention", 23, |imp, n| attention(imp, n, 23)),
    OpEntry::since("RotaryEmbedding", 23, rotary_embedding),
];

/// RotaryEmbedding (23): the first `rotary_embedding_dim` features of each head rotated in
/// pairs, halves (or, `interleaved`, even and odd features) as real and imaginary parts, by the
/// cos and sin of each position (the caches indexed by `position_ids`, or already per batch
/// and position). X is [B, heads, S, head] or [B, S, heads * head] (`num_heads`).
fn rotary_embedding(imp: &mut Importer, n: &NodeProto) -> Result<Vec<Value>> {
    let a = Attrs(n);
    let x = imp.input(n, 0)?;
    let dims = imp.shape(x)?;
    let (cos, sin) = (imp.input(n, 1)?, imp.input(n, 2)?);
    let (cos, sin) = match imp.opt_input(n, 3)? {
        Some(ids) => {
            let gather = |imp: &mut Importer, c: Value| {
                imp.emit1(NodeSpec::new(Op::Gather, vec![c, ids]).attr("axis", Attr::Int(0)))
            };
            (gather(imp, cos)?, gather(imp, sin)?)
        }
        None => (cos, sin),
    };
    // [B, S, heads, head]
    let x4 = match dims[..] {
        [_, _, _, _] => imp.transpose(x, vec![0, 2, 1, 3])?,
        [b, s, hidden] => {
            let heads = a.int("num_heads", 0);
            if heads <= 0 || hidden % heads != 0 {
                return Err(format!("a 3-D input of {hidden} features needs num_heads dividing it, got {heads}"));
            }
            imp.reshape(x, vec![b, s, heads, hidden / heads])?
        }
        _ => return Err(format!("X must have rank 3 or 4, got {}", dims.len())),
    };
    let head = imp.shape(x4)?[3];
    let rot = match a.int("rotary_embedding_dim", 0) {
        0 => head,
        r if r > 0 && r <= head && r % 2 == 0 => r,
        r => return Err(format!("rotary_embedding_dim {r} must be even and at most the head size {head}")),
    };
    let half = rot / 2;
    let interleaved = a.int("interleaved", 0) != 0;
    let (x1, x2) = if interleaved {
        (imp.slice_axis(x4, 3, 0, rot, 2)?, imp.slice_axis(x4, 3, 1, rot, 2)?)
    } else {
        (imp.slice_axis(x4, 3, 0, half, 1)?, imp.slice_axis(x4, 3, half, rot, 1)?)
    };
    let per_head = |imp: &mut Importer, c: Value| -> Result<Value> {
        let cd = imp.shape(c)?;
        match cd[..] {
            [b, s, h] if h == half => imp.reshape(c, vec![b, s, 1, h]),
            _ => Err(format!("the cos and sin caches must give [batch, seq, {half}] per position, got {cd:?}")),
        }
    };
    let (cos, sin) = (per_head(imp, cos)?, per_head(imp, sin)?);
    let (c1, s2) = (imp.binary(Op::Mul, cos, x1)?, imp.binary(Op::Mul, sin, x2)?);
    let real = imp.binary(Op::Sub, c1, s2)?;
    let (s1, c2) = (imp.binary(Op::Mul, sin, x1)?, imp.binary(Op::Mul, cos, x2)?);
    let imag = imp.binary(Op::Add, s1, c2)?;
    let concat_last = |imp: &mut Importer, parts: Vec<Value>| -> Result<Value> {
        imp.emit1(NodeSpec::new(Op::Concat, parts).attr("axis", Attr::Int(-1)))
    };
    let mut rotated = if interleaved {
        let pair = |imp: &mut Importer, v: Value| -> Result<Value> {
            let mut shape = imp.shape(v)?;
            shape.push(1);
            imp.reshape(v, shape)
        };
        let (re, im) = (pair(imp, real)?, pair(imp, imag)?);
        let both = concat_last(imp, vec![re, im])?;
        let mut shape = imp.shape(x1)?;
        shape[3] = rot;
        imp.reshape(both, shape)?
    } else {
        concat_last(imp, vec![real, imag])?
    };
    if rot < head {
        let rest = imp.slice_axis(x4, 3, rot, head, 1)?;
        rotated = concat_last(imp, vec![rotated, rest])?;
    }
    Ok(vec![match dims.len() {
        4 => imp.transpose(rotated, vec![0, 2, 1, 3])?,
        _ => imp.reshape(rotated, dims)?,
    }])
}

/// A constant of `shape` holding `x` everywhere.
fn filled(imp: &mut Importer, dtype: DType, x: f64, shape: Vec<i64>) -> Result<Value> {
    let s = imp.scalar(dtype, x)?;
    imp.emit1(NodeSpec::new(Op::Broadcast, vec![s]).attr("shape", Attr::Ints(shape)))
}

fn output_wanted(n: &NodeProto, i: usize) -> bool {
    n.output.get(i).is_some_and(|o| !o.is_empty())
}

fn attention(imp: &mut Importer, n: &NodeProto, version: i64) -> Result<Vec<Value>> {
    let op = format!("Attention-{version}");
    let a = Attrs(n);
    let (q, k, v) = (imp.input(n, 0)?, imp.input(n, 1)?, imp.input(n, 2)?);
    let mask = imp.opt_input(n, 3)?;
    let (past_k, past_v) = (imp.opt_input(n, 4)?, imp.opt_input(n, 5)?);
    let nonpad = imp.opt_input(n, 6)?;
    if version < 24 && nonpad.is_some() {
        return Err(format!("{op} has no input 6 (nonpad_kv_seqlen comes with Attention-24)"));
    }
    if n.input.len() > 7 {
        return Err(format!("{op} has at most 7 inputs, got {}", n.input.len()));
    }
    if n.output.len() > 4 {
        return Err(format!("{op} has at most 4 outputs, got {}", n.output.len()));
    }
    let mode = a.int("qk_matmul_output_mode", 0);
    if !(0..=3).contains(&mode) {
        return Err(format!("{op}: qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}"));
    }
    if past_k.is_some() != past_v.is_some() {
        return Err(format!("{op}: past_key and past_value must be given together"));
    }

    let (qt, kt, vt) = (imp.ty(q)?, imp.ty(k)?, imp.ty(v)?);
    let dt = qt.dtype;
    for (name, t) in [("Q", &qt), ("K", &kt), ("V", &vt)] {
        if !t.dtype.is_float() {
            return Err(format!("{op}: {name} must be floats (f32, f64), got {t}"));
        }
    }
    if kt.dtype != dt {
        return Err(format!("{op}: Q and K must have one element type, got {qt} and {kt}"));
    }
    let rank = qt.rank();
    if kt.rank() != rank || vt.rank() != rank || !(rank == 3 || rank == 4) {
        return Err(format!("{op}: Q, K and V must all be 3-D or all 4-D, got {qt}, {kt} and {vt}"));
    }
    let q_heads_attr = a.get("q_num_heads").and_then(|x| x.i);
    let kv_heads_attr = a.get("kv_num_heads").and_then(|x| x.i);

    // To 4-D: [B, heads, S, head_size].
    let (q, k, v) = if rank == 3 {
        let (Some(hq), Some(hkv)) = (q_heads_attr, kv_heads_attr) else {
            return Err(format!("{op}: 3-D inputs need the q_num_heads and kv_num_heads attributes"));
        };
        let mut heads = |x: Value, h: i64, name: &str| -> Result<Value> {
            let d = imp.shape(x)?;
            if h <= 0 || d[2] % h != 0 {
                return Err(format!("{op}: the hidden size {} of {name} is not a multiple of {h} heads", d[2]));
            }
            let r = imp.reshape(x, vec![d[0], d[1], h, d[2] / h])?;
            imp.transpose(r, vec![0, 2, 1, 3])
        };
        (heads(q, hq, "Q")?, heads(k, hkv, "K")?, heads(v, hkv, "V")?)
    } else {
        (q, k, v)
    };
    let (qs, ks, vs) = (imp.shape(q)?, imp.shape(k)?, imp.shape(v)?);
    let (batch, hq, sq, dh) = (qs[0], qs[1], qs[2], qs[3]);
    let hkv = ks[1];
    if rank == 4 {
        for (name, attr, actual) in [("q_num_heads", q_heads_attr, hq), ("kv_num_heads", kv_heads_attr, hkv)] {
            if attr.is_some_and(|h| h != actual) {
                return Err(format!("{op}: {name} = {} disagrees with the 4-D inputs' {actual} heads", attr.unwrap()));
            }
        }
    }
    if ks[0] != batch || vs[0] != batch || vs[1] != hkv || ks[3] != dh || vs[2] != ks[2] {
        return Err(format!("{op}: Q {qs:?}, K {ks:?} and V {vs:?} (as [B, heads, S, head_size]) do not fit together"));
    }
    if hkv <= 0 || hq % hkv != 0 {
        return Err(format!("{op}: {hq} query heads are not a multiple of {hkv} key/value heads"));
    }
    let groups = hq / hkv;

    // The KV cache.
    let concat_past = |imp: &mut Importer, past: Option<Value>, x: Value, name: &str| -> Result<Value> {
        let Some(p) = past else { return Ok(x) };
        let (ps, xs) = (imp.shape(p)?, imp.shape(x)?);
        if ps.len() != 4 || ps[0] != xs[0] || ps[1] != xs[1] || ps[3] != xs[3] {
            return Err(format!("{op}: {name} {ps:?} does not fit the new values {xs:?}"));
        }
        let xdt = imp.ty(x)?.dtype;
        let p = imp.cast(p, xdt)?;
        imp.emit1(NodeSpec::new(Op::Concat, vec![p, x]).attr("axis", Attr::Int(2)))
    };
    let present_k = concat_past(imp, past_k, k, "past_key")?;
    let present_v = concat_past(imp, past_v, v, "past_value")?;
    let past_len = match past_k {
        Some(p) => imp.shape(p)?[2],
        None => 0,
    };
    let total = imp.shape(present_k)?[2];
    if imp.shape(present_v)?[2] != total {
        return Err(format!("{op}: the key and value sequences differ in length"));
    }

    // Scores: (Q sqrt(scale)) (K sqrt(scale))^T, the query heads of one KV head as one batch.
    let scale = match a.get("scale").and_then(|x| x.f) {
        Some(s) => s as f64,
        None => 1.0 / (dh as f64).sqrt(),
    };
    let root = imp.scalar(dt, scale.sqrt())?;
    let qscaled = imp.binary(Op::Mul, q, root)?;
    let kscaled = imp.binary(Op::Mul, present_k, root)?;
    let qg = if groups > 1 { imp.reshape(qscaled, vec![batch, hkv, groups * sq, dh])? } else { qscaled };
    let qk = imp.emit1(NodeSpec::new(Op::MatMul, vec![qg, kscaled]).attr("transpose_b", Attr::Bool(true)))?;
    let qk = if groups > 1 { imp.reshape(qk, vec![batch, hq, sq, total])? } else { qk };

    let softcap = a.float("softcap", 0.0) as f64;
    let capped = if softcap > 0.0 {
        let c = imp.scalar(dt, softcap)?;
        let x = imp.binary(Op::Div, qk, c)?;
        let t = imp.unary(Op::Tanh, x)?;
        imp.binary(Op::Mul, t, c)?
    } else if softcap < 0.0 {
        return Err(format!("{op}: softcap must not be negative, got {softcap}"));
    } else {
        qk
    };

    // The bias: the mask, causal and padding parts added together.
    let mut bias: Option<Value> = None;
    let add_bias = |imp: &mut Importer, bias: &mut Option<Value>, part: Value| -> Result<()> {
        *bias = Some(match *bias {
            Some(b) => imp.binary(Op::Add, b, part)?,
            None => part,
        });
        Ok(())
    };
    if let Some(m) = mask {
        let mt = imp.ty(m)?;
        let mut ms = imp.shape(m)?;
        if ms.is_empty() || ms.len() > 4 {
            return Err(format!("{op}: attn_mask must have rank 1 to 4, got {mt}"));
        }
        let last = *ms.last().unwrap();
        if last > total {
            return Err(format!("{op}: attn_mask {mt} is longer than the total sequence ({total})"));
        }
        let is_bool = mt.dtype == DType::Bool;
        let mut m = m;
        if last < total {
            // Pad the last axis to the total sequence with -inf (false).
            let mut pad_shape = ms.clone();
            *pad_shape.last_mut().unwrap() = total - last;
            let fill = if is_bool {
                filled(imp, DType::Bool, 0.0, pad_shape)?
            } else {
                filled(imp, mt.dtype, f64::NEG_INFINITY, pad_shape)?
            };
            let axis = ms.len() as i64 - 1;
            m = imp.emit1(NodeSpec::new(Op::Concat, vec![m, fill]).attr("axis", Attr::Int(axis)))?;
            *ms.last_mut().unwrap() = total;
        }
        let part = if is_bool {
            let zero = imp.scalar(dt, 0.0)?;
            let ninf = imp.scalar(dt, f64::NEG_INFINITY)?;
            imp.emit1(NodeSpec::new(Op::Select, vec![m, zero, ninf]))?
        } else {
            imp.cast(m, dt)?
        };
        add_bias(imp, &mut bias, part)?;
    }
    if a.int("is_causal", 0) != 0 {
        // -inf where the key position is after the query position plus the past length.
        let (rows, cols) = (sq as usize, total as usize);
        let c = ndarray::Array2::from_shape_fn((rows, cols), |(i, j)| {
            if j as i64 > i as i64 + past_len {
                f64::NEG_INFINITY
            } else {
                0.0
            }
        });
        let t = graphc_runtime::kernels::cast(&Tensor::F64(c.into_dyn()), dt);
        let part = imp.constant(t)?;
        add_bias(imp, &mut bias, part)?;
    }
    if let Some(lens) = nonpad {
        let lt = imp.ty(lens)?;
        if lt.shape != [batch as u64] || !lt.dtype.is_int() {
            return Err(format!("{op}: nonpad_kv_seqlen must be integers of shape [{batch}], got {lt}"));
        }
        let lens = imp.cast(lens, DType::I64)?;
        let lens = imp.reshape(lens, vec![batch, 1, 1, 1])?;
        let positions = imp.constant(Tensor::I64(ndarray::Array1::from_iter(0..total).into_dyn()))?;
        let kept = imp.binary(Op::Less, positions, lens)?;
        let zero = imp.scalar(dt, 0.0)?;
        let ninf = imp.scalar(dt, f64::NEG_INFINITY)?;
        let part = imp.emit1(NodeSpec::new(Op::Select, vec![kept, zero, ninf]))?;
        add_bias(imp, &mut bias, part)?;
    }
    let biased = match bias {
        Some(b) => imp.binary(Op::Add, capped, b)?,
        None => capped,
    };
    if imp.shape(biased)? != [batch, hq, sq, total] {
        return Err(format!("{op}: attn_mask does not broadcast to the scores [{batch}, {hq}, {sq}, {total}]"));
    }

    // Softmax, in softmax_precision where that is another dtype.
    let precision = match a.get("softmax_precision").and_then(|x| x.i) {
        None => dt,
        Some(p) => match dtype_of(p as i32) {
            Ok(d) if d.is_float() => d,
            _ => {
                return Err(format!(
                    "{op}: softmax_precision {} is not supported (graphc computes in float or double)",
                    crate::proto::data_type::name(p as i32)
                ))
            }
        },
    };
    let x = imp.cast(biased, precision)?;
    let probs = imp.emit1(NodeSpec::new(Op::Softmax, vec![x]).attr("axis", Attr::Int(-1)))?;
    let probs = imp.cast(probs, dt)?;

    // Y = probs V, the query heads of one KV head as one batch again.
    let dv = vs[3];
    let pg = if groups > 1 { imp.reshape(probs, vec![batch, hkv, groups * sq, total])? } else { probs };
    let vv = imp.cast(present_v, dt)?;
    let y = imp.binary(Op::MatMul, pg, vv)?;
    let y = if groups > 1 { imp.reshape(y, vec![batch, hq, sq, dv])? } else { y };
    let y = if rank == 3 {
        let t = imp.transpose(y, vec![0, 2, 1, 3])?;
        imp.reshape(t, vec![batch, sq, hq * dv])?
    } else {
        y
    };

    let mut outs = vec![y];
    // Unnamed outputs get a placeholder that binding skips.
    outs.push(if output_wanted(n, 1) { present_k } else { y });
    outs.push(if output_wanted(n, 2) { present_v } else { y });
    if output_wanted(n, 3) {
        outs.push([qk, capped, biased, probs][mode as usize]);
    }
    Ok(outs)
}
