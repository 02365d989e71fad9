//! Type inference for one node: the op table's declared checks (arity, attributes, regions)
//! and then the op's type rule. The builder infers every node it adds and the verifier
//! re-infers every node it checks; both come here, so neither depends on the other.

use crate::attr::Attrs;
use crate::ops::{AttrDefault, Blame, InferCtx, InferError, Op};
use crate::types::Type;

/// Drops attributes equal to their declared default and puts the rest in table order: the
/// canonical form every node is kept in.
pub fn normalize_attrs(op: Op, attrs: &mut Attrs) {
    let def = op.def();
    let defaults: Vec<&str> = def
        .attrs
        .iter()
        .filter(|a| matches!(&a.default, AttrDefault::Value(v) if attrs.get(a.name) == Some(v)))
        .map(|a| a.name)
        .collect();
    for name in defaults {
        attrs.remove(name);
    }
    attrs.sort_by_key(|n| def.attr_rank(n));
}

/// Checks what the op table declares (operand count, attribute names, kinds and presence,
/// region count), then runs the op's type rule.
pub fn infer_checked(ctx: &InferCtx<'_>) -> Result<Vec<Type>, InferError> {
    let def = ctx.op.def();
    let name = ctx.op.name();
    let n = ctx.operands.len();
    let arity_ok = n >= def.min_operands && def.max_operands.is_none_or(|m| n <= m);
    if !arity_ok {
        let want = match def.max_operands {
            Some(m) if m == def.min_operands => format!("{m}"),
            Some(m) => format!("{} to {m}", def.min_operands),
            None => format!("at least {}", def.min_operands),
        };
        let operands = if def.operands.is_empty() { "none".to_string() } else { format!("({})", def.operands) };
        return Err(InferError::new(
            Blame::Op,
            format!(
                "{name} takes {want} operand{} {operands}, but {n} {} given",
                if want == "1" { "" } else { "s" },
                if n == 1 { "is" } else { "are" }
            ),
        ));
    }
    for (attr, value) in ctx.attrs.iter() {
        let Some(ad) = def.attr(attr) else {
            let known: Vec<&str> = def.attrs.iter().map(|a| a.name).collect();
            let hint = match crate::suggest::closest(attr, known.iter().copied()) {
                Some(s) => format!("; did you mean '{s}'?"),
                None if known.is_empty() => format!("; {name} takes no attributes"),
                None => format!("; {name} takes {}", known.join(", ")),
            };
            return Err(InferError::new(Blame::Op, format!("{name} has no attribute '{attr}'{hint}")));
        };
        if value.kind() != ad.kind {
            return Err(InferError::new(
                Blame::Op,
                format!("attribute '{attr}' of {name} must be {}, not {value}", ad.kind.describe()),
            ));
        }
    }
    if let Some(missing) =
        def.attrs.iter().find(|a| matches!(a.default, AttrDefault::Required) && ctx.attrs.get(a.name).is_none())
    {
        return Err(InferError::new(
            Blame::Op,
            format!("{name} needs the attribute '{}' ({}): {}", missing.name, missing.kind.describe(), missing.doc),
        ));
    }
    if ctx.regions.len() != def.regions.len() {
        return Err(InferError::new(
            Blame::Op,
            format!(
                "{name} has {} region(s) ({}), but {} are given",
                def.regions.len(),
                def.regions.join(", "),
                ctx.regions.len()
            ),
        ));
    }
    (def.infer)(ctx)
}
