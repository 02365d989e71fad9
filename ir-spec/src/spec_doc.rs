//! The op reference section of SPEC.md, generated from the op table so the two cannot drift.

use crate::ops::{AttrDefault, Gradient, Op, OpKind};
use std::fmt::Write;

/// Markers around the generated section in SPEC.md.
pub const BEGIN: &str =
    "<!-- BEGIN GENERATED OP REFERENCE: edit ir-spec/src/ops.rs, then run GRAPHC_BLESS=1 cargo test -->";
pub const END: &str = "<!-- END GENERATED OP REFERENCE -->";

const GROUPS: &[(&str, &[OpKind])] = &[
    ("Sources and array ops", &[OpKind::Source, OpKind::Injective]),
    ("Matrix ops", &[OpKind::Contraction]),
    ("Elementwise ops", &[OpKind::Elementwise]),
    ("Reductions and composites", &[OpKind::Reduction, OpKind::Opaque]),
    ("State: variables and queues", &[OpKind::Stateful]),
    ("Control flow", &[OpKind::Control]),
    ("Communication", &[OpKind::Communication]),
];

/// The markdown of every op, grouped by kind, in table order within a group.
pub fn op_reference() -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{BEGIN}\n");
    for (title, kinds) in GROUPS {
        let _ = writeln!(out, "### {title}\n");
        for &op in Op::ALL.iter().filter(|o| kinds.contains(&o.kind())) {
            let d = op.def();
            let _ = writeln!(out, "#### `{}`\n\n{}\n", op.name(), d.summary);
            let operands = if d.operands.is_empty() { "none".to_string() } else { format!("`{}`", d.operands) };
            let _ = writeln!(out, "- operands: {operands}");
            if !d.regions.is_empty() {
                let _ = writeln!(
                    out,
                    "- regions: {}",
                    d.regions.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", ")
                );
            }
            let _ = writeln!(
                out,
                "- kind: {}{}",
                d.kind.name(),
                if d.stateful {
                    " (stateful: never removed, duplicated or reordered on a pass's own account)"
                } else {
                    ""
                }
            );
            let gradient = match d.gradient {
                Gradient::Rule => "yes",
                Gradient::NotDifferentiable => "no",
            };
            let _ = writeln!(out, "- differentiable: {gradient}");
            for a in &d.attrs {
                let presence = match &a.default {
                    AttrDefault::Required => "required".to_string(),
                    AttrDefault::Optional => "optional".to_string(),
                    AttrDefault::Value(v) => format!("default `{v}`"),
                };
                let _ = writeln!(out, "- attribute `{}` ({}, {presence}): {}", a.name, a.kind.describe(), a.doc);
            }
            let _ = writeln!(out, "\n{}\n\n```\n{}```\n", d.semantics, d.example);
        }
    }
    out.push_str(END);
    out.push('\n');
    out
}
