//! Moving through the tokens: looking ahead, expecting, reporting errors (up to the limit)
//! and recovering at the next statement.

use super::{PResult, Parser, Reported, MAX_ERRORS};
use crate::diag::{Diagnostic, Span};
use crate::lexer::Tok;
use crate::ops::Op;

impl Parser {
    pub(super) fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    pub(super) fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    pub(super) fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    pub(super) fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    /// Moves past the current token and returns its span.
    pub(super) fn bump(&mut self) -> Span {
        let span = self.toks[self.pos].span;
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        span
    }

    pub(super) fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(i) if i == s)
    }

    pub(super) fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }

    /// The comments not yet attached that start before the current token.
    pub(super) fn take_comments(&mut self) -> Vec<String> {
        let before = self.span().start as usize;
        let mut out = Vec::new();
        while let Some(c) =
            self.comments.get(self.next_comment).filter(|c| c.start < before || self.peek() == &Tok::Eof)
        {
            out.push(c.text.clone());
            self.next_comment += 1;
        }
        out
    }

    pub(super) fn error(&mut self, span: Span, msg: impl Into<String>) -> Reported {
        self.diag(Diagnostic::error(span, msg))
    }

    pub(super) fn diag(&mut self, d: Diagnostic) -> Reported {
        if self.diags.len() <= MAX_ERRORS {
            self.diags.push(d);
        } else {
            self.stopped = true;
        }
        Reported
    }

    pub(super) fn expected(&mut self, what: &str) -> Reported {
        let found = self.peek().describe();
        let span = self.span();
        self.error(span, format!("expected {what}, found {found}"))
    }

    pub(super) fn expect(&mut self, t: Tok, what: &str) -> PResult<Span> {
        if self.peek() == &t {
            Ok(self.bump())
        } else {
            Err(self.expected(what))
        }
    }

    pub(super) fn expect_ident(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) => Ok((s, self.bump())),
            _ => Err(self.expected(what)),
        }
    }

    /// Skips to the start of the next statement, `return`/`yield` or region end at this
    /// nesting level; braces opened while skipping are skipped whole.
    pub(super) fn sync(&mut self) {
        let mut depth = 0usize;
        loop {
            let t = &self.toks[self.pos];
            let at_line_start = t.line_start;
            match &t.tok {
                Tok::Eof => return,
                Tok::RBrace if depth == 0 && at_line_start => return,
                Tok::ValueName(_) | Tok::ValueNum(_) if depth == 0 && at_line_start => return,
                Tok::Ident(s)
                    if depth == 0
                        && at_line_start
                        && (s == "return" || s == "yield" || s == "graph" || Op::from_name(s).is_some()) =>
                {
                    return
                }
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.bump();
        }
    }
}
