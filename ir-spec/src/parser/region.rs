//! Regions: a statement list up to its `return` or `yield` (a graph body too), and the
//! labelled regions that cond, while and fusion nodes hold.

use super::{GraphCtx, Operand, PResult, Parser, Reported, MAX_REGION_DEPTH};
use crate::diag::Span;
use crate::graph::Region;
use crate::lexer::Tok;

impl Parser {
    /// Statements up to the closing `terminator` line and `}`. Returns the terminator's values.
    pub(super) fn region_body(
        &mut self,
        cx: &mut GraphCtx,
        region: Region,
        terminator: &str,
        depth: usize,
    ) -> Option<(Vec<Operand>, Span)> {
        loop {
            if self.stopped {
                return None;
            }
            let comments = self.take_comments();
            match self.peek().clone() {
                Tok::Ident(s) if s == terminator => {
                    cx.g.regions[region].end_comments = comments;
                    let span = self.bump();
                    let vals = self.operand_list(cx, region).ok();
                    let close = self.expect(Tok::RBrace, &format!("'}}' after '{terminator}'"));
                    if close.is_err() {
                        self.sync();
                        self.eat(&Tok::RBrace);
                    }
                    return vals.map(|v| (v, span));
                }
                Tok::Ident(s) if s == "return" || s == "yield" => {
                    let span = self.span();
                    let want = if terminator == "return" {
                        "a graph body ends with 'return'"
                    } else {
                        "a region ends with 'yield'"
                    };
                    self.error(span, format!("'{s}' here: {want}"));
                    self.bump();
                    self.sync();
                }
                Tok::RBrace => {
                    let span = self.bump();
                    self.error(span, format!("missing '{terminator}' before '}}'"));
                    return None;
                }
                Tok::Eof => {
                    let span = self.span();
                    self.error(
                        span,
                        format!(
                            "unexpected end of file: expected '{terminator}' and '}}' to close {}",
                            if depth == 1 { "the graph" } else { "a region" }
                        ),
                    );
                    return None;
                }
                Tok::Ident(s) if s == "graph" && self.toks[self.pos].line_start => {
                    let span = self.span();
                    self.error(span, format!("expected '{terminator}' and '}}' before the next graph"));
                    return None;
                }
                _ => {
                    let before = self.pos;
                    if self.statement(cx, region, depth, comments).is_err() {
                        if self.pos == before {
                            self.bump();
                        }
                        self.sync();
                    }
                }
            }
        }
    }

    /// `label(%a: T, ...) { ... yield ... }`
    pub(super) fn region(&mut self, cx: &mut GraphCtx, label: &str, depth: usize) -> PResult<(Region, Span)> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Ident(s) if s == label => {
                self.bump();
            }
            _ => return Err(self.expected(&format!("region '{label}(...) {{ ... }}'"))),
        }
        if depth >= MAX_REGION_DEPTH {
            return Err(self.error(start, format!("regions are nested more than {MAX_REGION_DEPTH} deep")));
        }
        let r = cx.g.new_region(label, &[]);
        cx.g.regions[r].span = start;
        self.expect(Tok::LParen, &format!("'(' and the parameters of region '{label}'"))?;
        if !self.eat(&Tok::RParen) {
            loop {
                let (key, span) = self.value_token("a region parameter like %a: f32[2]")?;
                self.expect(Tok::Colon, "':' and the parameter's type")?;
                let ty = self.ty()?;
                let v = cx.g.add_param(r, ty, span);
                self.define(cx, key, span, Some(v), r);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen, "',' or ')' after a parameter")?;
        }
        self.expect(Tok::LBrace, &format!("'{{' to open region '{label}'"))?;
        let Some((vals, _)) = self.region_body(cx, r, "yield", depth + 1) else { return Err(Reported) };
        let Some(vals) = vals.into_iter().map(|o| o.0).collect::<Option<Vec<_>>>() else { return Err(Reported) };
        cx.g.set_yields(r, vals);
        Ok((r, start))
    }
}
