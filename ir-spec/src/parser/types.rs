//! Types: tensor types (`f32[2,3]`), `var<...>`, `queue<...>` and `token`.

use super::{PResult, Parser};
use crate::diag::Diagnostic;
use crate::lexer::Tok;
use crate::suggest::closest;
use crate::types::{DType, TensorType, Type};

impl Parser {
    pub(super) fn ty(&mut self) -> PResult<Type> {
        let handle = match self.peek() {
            Tok::Ident(w) if w == "token" || w == "var" || w == "queue" => w.clone(),
            // Anything else must be a tensor type; its parser says what is wrong.
            _ => return Ok(Type::Tensor(self.tensor_type()?)),
        };
        self.bump();
        match handle.as_str() {
            "token" => Ok(Type::Token),
            "var" => {
                self.expect(Tok::Less, "'<' after 'var'")?;
                let t = self.tensor_type()?;
                self.expect(Tok::Greater, "'>' to close var<...>")?;
                Ok(Type::Var(t))
            }
            _ => {
                self.expect(Tok::Less, "'<' after 'queue'")?;
                let mut ts = vec![self.tensor_type()?];
                while self.eat(&Tok::Comma) {
                    ts.push(self.tensor_type()?);
                }
                self.expect(Tok::Greater, "',' or '>' to close queue<...>")?;
                Ok(Type::Queue(ts))
            }
        }
    }

    fn dtype(&mut self) -> PResult<DType> {
        let (word, span) = self.expect_ident("an element type (f32, i64, bool, ...)")?;
        DType::from_name(&word).ok_or_else(|| {
            let mut d = Diagnostic::error(
                span,
                format!("unknown element type '{word}'; the element types are {}", DType::names()),
            );
            if let Some(s) = closest(&word, DType::ALL.iter().map(|d| d.name())) {
                d = d.with_help(format!("did you mean '{s}'?"));
            }
            self.diag(d)
        })
    }

    pub(super) fn tensor_type(&mut self) -> PResult<TensorType> {
        let dtype = self.dtype()?;
        self.expect(Tok::LBracket, "'[' and the shape (write [] for a scalar)")?;
        let mut shape = Vec::new();
        if !self.eat(&Tok::RBracket) {
            loop {
                match self.peek().clone() {
                    Tok::Int(d) if d >= 0 => {
                        self.bump();
                        shape.push(d as u64);
                    }
                    Tok::Int(d) => {
                        let span = self.span();
                        return Err(self.error(span, format!("dimension {d} is negative")));
                    }
                    Tok::Ident(_) => {
                        let span = self.span();
                        return Err(self.error(
                            span,
                            "symbolic dimensions are not supported yet; give every dimension as a number",
                        ));
                    }
                    _ => return Err(self.expected("a dimension size")),
                }
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RBracket, "',' or ']' in the shape")?;
        }
        let t = TensorType::new(dtype, shape);
        if t.num_elements().is_none() {
            let span = self.prev_span();
            return Err(self.error(span, format!("{t} has more elements than fit in 64 bits")));
        }
        Ok(t)
    }
}
