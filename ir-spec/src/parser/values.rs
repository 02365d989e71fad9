//! Value names: definitions, uses and operand lists, scoped to the region that defines them.

use super::{Def, GraphCtx, Key, Operand, PResult, Parser, Reported};
use crate::diag::{Diagnostic, Span};
use crate::graph::{Region, Value};
use crate::lexer::Tok;

impl Parser {
    pub(super) fn value_token(&mut self, what: &str) -> PResult<(Key, Span)> {
        match self.peek().clone() {
            Tok::ValueName(n) => Ok((Key::Name(n), self.bump())),
            Tok::ValueNum(n) => Ok((Key::Num(n), self.bump())),
            _ => Err(self.expected(what)),
        }
    }

    pub(super) fn define(&mut self, cx: &mut GraphCtx, key: Key, span: Span, value: Option<Value>, region: Region) {
        if let Some(prev) = cx.defs.get(&key) {
            let d = Diagnostic::error(span, format!("{key} is already defined; value names are unique in a graph"))
                .with_note(prev.span, "previous definition");
            self.diag(d);
            return;
        }
        if let (Key::Name(n), Some(v)) = (&key, value) {
            cx.g.set_name(v, n);
        }
        cx.defs.insert(key, Def { value, region, span });
    }

    fn use_value(&mut self, cx: &mut GraphCtx, region: Region) -> PResult<Operand> {
        let (key, span) = self.value_token("a value like %x")?;
        match cx.defs.get(&key) {
            Some(d) if d.region != region => {
                let note = d.span;
                let diag = Diagnostic::error(
                    span,
                    format!(
                        "{key} is defined outside this region; regions are isolated: pass it in as a region parameter"
                    ),
                )
                .with_note(note, "defined here");
                Err(self.diag(diag))
            }
            Some(d) => Ok((d.value, span)),
            None if cx.lenient => Ok((None, span)),
            None => {
                let idx = self.diags.len();
                self.error(span, format!("{key} is not defined"));
                cx.undefined.push((key, idx));
                Err(Reported)
            }
        }
    }

    pub(super) fn operand_list(&mut self, cx: &mut GraphCtx, region: Region) -> PResult<Vec<Operand>> {
        let mut out = Vec::new();
        if !matches!(self.peek(), Tok::ValueName(_) | Tok::ValueNum(_)) {
            return Ok(out);
        }
        let mut failed = false;
        loop {
            match self.use_value(cx, region) {
                Ok(o) => out.push(o),
                Err(_) => failed = true,
            }
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        if failed {
            Err(Reported)
        } else {
            Ok(out)
        }
    }

    pub(super) fn poison(&mut self, cx: &mut GraphCtx, lhs: &[(Key, Span)], region: Region) {
        for (key, span) in lhs {
            if !cx.defs.contains_key(key) {
                cx.defs.insert(key.clone(), Def { value: None, region, span: *span });
            }
        }
    }
}
