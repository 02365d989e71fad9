//! Statements: `%results = op operands {attrs} after(...) device "..." : types regions`,
//! built into a node and type-checked on the spot, errors pointing at what the rule blames.

use super::{GraphCtx, Key, PResult, Parser, Reported};
use crate::attr::Attrs;
use crate::device::DeviceSpec;
use crate::diag::{Diagnostic, Span};
use crate::graph::{NodeSpec, Region, Value};
use crate::lexer::Tok;
use crate::ops::{Blame, Op};
use crate::suggest::closest;
use crate::types::Type;
use std::collections::HashMap;

impl Parser {
    pub(super) fn statement(
        &mut self,
        cx: &mut GraphCtx,
        region: Region,
        depth: usize,
        comments: Vec<String>,
    ) -> PResult<()> {
        let mut lhs = Vec::new();
        if matches!(self.peek(), Tok::ValueName(_) | Tok::ValueNum(_)) {
            loop {
                lhs.push(self.value_token("a result name like %y")?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            if let Err(r) = self.expect(Tok::Equals, "'=' after the result names") {
                self.poison(cx, &lhs, region);
                return Err(r);
            }
        }
        let nodes_before = cx.g.regions[region].nodes.len();
        let res = self.statement_rhs(cx, region, depth, &lhs);
        if cx.g.regions[region].nodes.len() > nodes_before {
            let node = cx.g.regions[region].nodes[nodes_before];
            cx.g.nodes[node].comments = comments;
        }
        match res {
            Ok(results) => {
                for ((key, span), v) in lhs.into_iter().zip(results) {
                    self.define(cx, key, span, v, region);
                }
                Ok(())
            }
            Err(r) => {
                self.poison(cx, &lhs, region);
                Err(r)
            }
        }
    }

    /// Parses `op operands {attrs} after(...) device "..." : types regions` and builds the
    /// node. Returns one entry per result name (`None` where the node could not be built but
    /// the error was already reported and should not cascade).
    fn statement_rhs(
        &mut self,
        cx: &mut GraphCtx,
        region: Region,
        depth: usize,
        lhs: &[(Key, Span)],
    ) -> PResult<Vec<Option<Value>>> {
        let (opname, op_span) = self.expect_ident("an op name")?;
        let Some(op) = Op::from_name(&opname) else {
            let mut d = Diagnostic::error(op_span, format!("unknown op '{opname}'"));
            if let Some(s) = closest(&opname, Op::ALL.iter().map(|o| o.name())) {
                d = d.with_help(format!("did you mean '{s}'?"));
            }
            return Err(self.diag(d));
        };
        let operands = self.operand_list(cx, region);
        let attrs = if self.peek() == &Tok::LBrace { self.attr_dict(op) } else { Ok((Attrs::new(), HashMap::new())) };
        let mut deps = Ok(Vec::new());
        if self.is_ident("after") {
            self.bump();
            self.expect(Tok::LParen, "'(' after 'after'")?;
            deps = self.operand_list(cx, region);
            self.expect(Tok::RParen, "')' to close the 'after' list")?;
        }
        let mut device = None;
        if self.is_ident("device") {
            self.bump();
            match self.peek().clone() {
                Tok::Str(s) => {
                    let span = self.bump();
                    match DeviceSpec::parse(&s) {
                        Ok(d) => device = Some(d),
                        Err(m) => {
                            self.error(span, m);
                        }
                    }
                }
                _ => return Err(self.expected("a device spec string like \"/job:worker/task:0/device:cpu:0\"")),
            }
        }
        let mut declared = Vec::new();
        if self.eat(&Tok::Colon) {
            loop {
                let start = self.span();
                let t = self.ty()?;
                declared.push((t, start.to(self.prev_span())));
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        let mut regions = Vec::new();
        let mut region_spans = Vec::new();
        let mut regions_ok = true;
        for &label in op.def().regions {
            match self.region(cx, label, depth) {
                Ok((r, span)) => {
                    regions.push(r);
                    region_spans.push(span);
                }
                Err(_) => {
                    regions_ok = false;
                    break;
                }
            }
        }
        if !regions_ok {
            return Err(Reported);
        }
        let (operands, (attrs, attr_spans), deps) = (operands?, attrs?, deps?);
        // A reference to a failed definition: the error is already reported.
        let Some(operand_vals) = operands.iter().map(|o| o.0).collect::<Option<Vec<_>>>() else {
            return Ok(vec![None; lhs.len()]);
        };
        let Some(dep_vals) = deps.iter().map(|o| o.0).collect::<Option<Vec<_>>>() else {
            return Ok(vec![None; lhs.len()]);
        };
        let stmt_span = lhs.first().map_or(op_span, |l| l.1).to(self.prev_span());
        let declared_types: Vec<Type> = declared.iter().map(|(t, _)| t.clone()).collect();
        let mut spec = NodeSpec::new(op, operand_vals).span(stmt_span).regions(regions).after(dep_vals);
        spec.attrs = attrs;
        spec.device = device;
        if !declared.is_empty() {
            spec.declared = Some(declared_types.clone());
        }
        let node = match cx.g.add_node(region, spec) {
            Ok(n) => n,
            Err(e) => {
                let span = match e.blame {
                    Blame::Operand(i) => operands.get(i).map_or(op_span, |o| o.1),
                    Blame::Attr(name) => attr_spans.get(name).copied().unwrap_or(op_span),
                    Blame::Region(i) => region_spans.get(i).copied().unwrap_or(op_span),
                    Blame::Result(i) => declared.get(i).map_or(op_span, |d| d.1),
                    Blame::Op => op_span,
                };
                return Err(self.error(span, e.message));
            }
        };
        let results = cx.g.nodes[node].results.clone();
        if !declared.is_empty() {
            if declared.len() != results.len() {
                let span = declared[0].1.to(declared[declared.len() - 1].1);
                self.error(
                    span,
                    format!(
                        "{} gives {} result(s) but {} type(s) are written",
                        op.name(),
                        results.len(),
                        declared.len()
                    ),
                );
            } else {
                for (&v, (t, span)) in results.iter().zip(&declared) {
                    let got = cx.g.value_type(v).clone();
                    if &got != t {
                        self.error(*span, format!("result type written as {t}, but {} gives {got}", op.name()));
                    }
                }
            }
        }
        if lhs.len() != results.len() {
            let span = match (lhs.first(), lhs.last()) {
                (Some(a), Some(b)) => a.1.to(b.1),
                _ => op_span,
            };
            let names = if lhs.len() == 1 { "name is" } else { "names are" };
            return Err(self.error(
                span,
                format!("{} gives {} result(s) but {} {names} bound", op.name(), results.len(), lhs.len()),
            ));
        }
        Ok(results.into_iter().map(Some).collect())
    }
}
