//! Attribute dictionaries, checked against the op's declared attributes as they are read.

use super::{PResult, Parser, Reported};
use crate::attr::{Attr, Attrs, FloatBits};
use crate::diag::{Diagnostic, Span};
use crate::lexer::Tok;
use crate::ops::Op;
use crate::suggest::closest;
use crate::types::DType;
use std::collections::HashMap;

impl Parser {
    /// `{name = value, ...}` checked against the op's declared attributes.
    pub(super) fn attr_dict(&mut self, op: Op) -> PResult<(Attrs, HashMap<&'static str, Span>)> {
        self.bump();
        let mut attrs = Attrs::new();
        let mut spans: HashMap<&'static str, Span> = HashMap::new();
        let def = op.def();
        let mut failed = false;
        if !self.eat(&Tok::RBrace) {
            loop {
                let (name, nspan) = self.expect_ident("an attribute name")?;
                self.expect(Tok::Equals, &format!("'=' after attribute '{name}'"))?;
                let value = self.attr_value()?;
                let span = nspan.to(self.prev_span());
                match def.attr(&name) {
                    None => {
                        let known: Vec<&str> = def.attrs.iter().map(|a| a.name).collect();
                        let mut d = Diagnostic::error(nspan, format!("{} has no attribute '{name}'", op.name()));
                        d = match closest(&name, known.iter().copied()) {
                            Some(s) => d.with_help(format!("did you mean '{s}'?")),
                            None if known.is_empty() => d.with_help(format!("{} takes no attributes", op.name())),
                            None => d.with_help(format!("{} takes: {}", op.name(), known.join(", "))),
                        };
                        self.diag(d);
                        failed = true;
                    }
                    Some(ad) => {
                        if let Some(prev) = spans.get(ad.name) {
                            let d = Diagnostic::error(nspan, format!("attribute '{name}' is given twice"))
                                .with_note(*prev, "first given here");
                            self.diag(d);
                            failed = true;
                        }
                        match value.coerce(ad.kind) {
                            Ok(v) => attrs.set(ad.name, v),
                            Err(v) => {
                                self.error(
                                    span,
                                    format!(
                                        "attribute '{name}' of {} must be {}, not {v}",
                                        op.name(),
                                        ad.kind.describe()
                                    ),
                                );
                                failed = true;
                            }
                        }
                        spans.insert(ad.name, span);
                    }
                }
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RBrace, "',' or '}' in the attribute list")?;
        }
        if failed {
            Err(Reported)
        } else {
            Ok((attrs, spans))
        }
    }

    /// An integer attribute is an i64; the lexer also takes the u64s beyond it (for literals).
    fn attr_int(&mut self, i: i128, span: Span) -> PResult<i64> {
        i64::try_from(i).map_err(|_| self.error(span, format!("integer {i} does not fit in an i64 attribute")))
    }

    fn attr_value(&mut self) -> PResult<Attr> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Int(i) => {
                self.bump();
                Ok(Attr::Int(self.attr_int(i, span)?))
            }
            Tok::Float(f) => {
                self.bump();
                f.parse::<f64>().map(Attr::Float).map_err(|_| self.error(span, format!("malformed number {f}")))
            }
            // A float attribute is an f64: its bit pattern, as a NaN with a payload prints.
            Tok::Hex(h) => {
                self.bump();
                super::literal::bit_pattern(&h, DType::F64).map(Attr::Float).map_err(|m| self.error(span, m))
            }
            Tok::Str(s) => {
                self.bump();
                Ok(Attr::Str(s))
            }
            Tok::Minus => {
                self.bump();
                if self.is_ident("inf") {
                    self.bump();
                    Ok(Attr::Float(f64::NEG_INFINITY))
                } else {
                    Err(self.expected("'inf' or a number after '-'"))
                }
            }
            Tok::LBracket => {
                self.bump();
                let mut v = Vec::new();
                if !self.eat(&Tok::RBracket) {
                    loop {
                        match self.peek().clone() {
                            Tok::Int(i) => {
                                let at = self.span();
                                self.bump();
                                v.push(self.attr_int(i, at)?);
                            }
                            _ => return Err(self.expected("an integer (attribute lists hold integers)")),
                        }
                        if !self.eat(&Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RBracket, "',' or ']' in the list")?;
                }
                Ok(Attr::Ints(v))
            }
            Tok::Ident(w) => {
                self.bump();
                match w.as_str() {
                    "true" => Ok(Attr::Bool(true)),
                    "false" => Ok(Attr::Bool(false)),
                    "inf" => Ok(Attr::Float(f64::INFINITY)),
                    "nan" => Ok(Attr::Float(f64::from_bits(<f64 as FloatBits>::CANONICAL_NAN))),
                    "dense" => self.dense().map(Attr::Tensor),
                    "safetensors" => self.stored().map(Attr::Tensor),
                    _ => match DType::from_name(&w) {
                        Some(d) => Ok(Attr::DType(d)),
                        None => Err(self.error(span, format!("'{w}' is not an attribute value; values are numbers, true/false, strings, element types, [integer lists], dense<...> or safetensors<...> literals"))),
                    },
                }
            }
            _ => Err(self.expected("an attribute value")),
        }
    }
}
