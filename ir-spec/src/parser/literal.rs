//! Tensor literals (`dense<[[1, 2], [3, 4]]> : i32[2,2]`): nesting checked against the shape,
//! elements converted to the dtype.

use super::{PResult, Parser, Reported, MAX_LITERAL_DEPTH};
use crate::attr::{bf16, f16, FloatBits, TensorData, TensorLiteral};
use crate::diag::{Diagnostic, Span};
use crate::lexer::Tok;
use crate::suggest::closest;
use crate::types::DType;
use crate::weights_file::WeightsFile;
use std::sync::Arc;

impl Parser {
    /// `dense<LITERAL> : TYPE`, after `dense`.
    pub(super) fn dense(&mut self) -> PResult<TensorLiteral> {
        self.expect(Tok::Less, "'<' after 'dense'")?;
        let lit_start = self.span();
        let lit = self.literal(0)?;
        self.expect(Tok::Greater, "'>' to close the literal")?;
        self.expect(Tok::Colon, "':' and the literal's type, like dense<1.0> : f32[]")?;
        let ty = self.tensor_type()?;
        let span = lit_start.to(self.prev_span());
        let data = if let Lit::Scalar(s, sspan) = &lit {
            convert(ty.dtype, std::slice::from_ref(&(s.clone(), *sspan))).map_err(|(m, sp)| self.error(sp, m))?
        } else {
            let mut flat = Vec::new();
            if let Err((m, sp)) = flatten(&lit, &ty.shape, 0, &mut flat) {
                return Err(self.error(sp, format!("{m} (the literal's type is {ty})")));
            }
            convert(ty.dtype, &flat).map_err(|(m, sp)| self.error(sp, m))?
        };
        TensorLiteral::new(ty, data).map_err(|m| self.error(span, m))
    }

    /// `safetensors<"PATH", "NAME"> : TYPE`, after `safetensors`: tensor NAME of the weights
    /// file PATH (relative to the module's directory), which must be of TYPE.
    pub(super) fn stored(&mut self) -> PResult<TensorLiteral> {
        self.expect(Tok::Less, "'<' after 'safetensors'")?;
        let (path, path_span) = self.string("the weights file's path, a string like \"m.weights.safetensors\"")?;
        self.expect(Tok::Comma, "',' and the tensor's name")?;
        let (name, name_span) = self.string("the tensor's name in the weights file, a string")?;
        self.expect(Tok::Greater, "'>' after the tensor's name")?;
        self.expect(Tok::Colon, "':' and the literal's type, like safetensors<\"w.safetensors\", \"w\"> : f32[4,4]")?;
        let ty_start = self.span();
        let ty = self.tensor_type()?;
        let ty_span = ty_start.to(self.prev_span());
        let file = self.weights_file(&path, path_span)?;
        let Some(tensor) = file.tensor(&name) else {
            let mut d = Diagnostic::error(name_span, format!("weights file {path:?} has no tensor {name:?}"));
            let mut names: Vec<&str> = file.names().collect();
            names.sort_unstable();
            d = match closest(&name, names.iter().copied()) {
                Some(s) => d.with_help(format!("did you mean {s:?}?")),
                None if names.is_empty() => d.with_help("the file holds no tensors"),
                None if names.len() <= 8 => d.with_help(format!("the file holds {}", names.join(", "))),
                None => d.with_help(format!("the file holds {} tensors, {} first", names.len(), names[0])),
            };
            return Err(self.diag(d));
        };
        TensorLiteral::stored(ty, tensor).map_err(|m| self.error(ty_span, m))
    }

    fn string(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Str(s) => Ok((s, self.bump())),
            _ => Err(self.expected(what)),
        }
    }

    /// The weights file `path` names, opened and its header checked at its first mention; a
    /// file that failed is reported there only.
    fn weights_file(&mut self, path: &str, span: Span) -> PResult<Arc<WeightsFile>> {
        if let Some(f) = self.weights_files.get(path) {
            return f.clone().ok_or(Reported);
        }
        let file = match WeightsFile::open(&self.dir, path) {
            Ok(f) => Some(f),
            Err(m) => {
                self.error(span, format!("weights file {path:?} {m}"));
                None
            }
        };
        self.weights_files.insert(path.to_string(), file.clone());
        file.ok_or(Reported)
    }

    fn literal(&mut self, depth: usize) -> PResult<Lit> {
        let span = self.span();
        if depth > MAX_LITERAL_DEPTH {
            return Err(self.error(span, format!("tensor literal nested more than {MAX_LITERAL_DEPTH} deep")));
        }
        let scalar = match self.peek().clone() {
            Tok::LBracket => {
                self.bump();
                let mut items = Vec::new();
                if !self.eat(&Tok::RBracket) {
                    loop {
                        items.push(self.literal(depth + 1)?);
                        if !self.eat(&Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RBracket, "',' or ']' in the literal")?;
                }
                return Ok(Lit::List(items, span.to(self.prev_span())));
            }
            Tok::Int(i) => Scalar::Int(i),
            Tok::Float(f) => Scalar::Float(f),
            Tok::Hex(h) => Scalar::Hex(h),
            Tok::Minus if matches!(self.peek_at(1), Tok::Ident(s) if s == "inf") => {
                self.bump();
                Scalar::Float("-inf".into())
            }
            Tok::Ident(w) if w == "true" || w == "false" => Scalar::Bool(w == "true"),
            Tok::Ident(w) if w == "nan" || w == "inf" => Scalar::Float(w),
            _ => return Err(self.expected("a literal element (number, true, false, nan, inf) or '['")),
        };
        let span = span.to(self.bump());
        Ok(Lit::Scalar(scalar, span))
    }
}

#[derive(Clone, Debug)]
enum Scalar {
    Int(i128),
    Float(String),
    /// A float's bit pattern, `0x...`.
    Hex(String),
    Bool(bool),
}

/// The float of `dtype` (a `T`) whose bits `text` (`0x` and hex digits) spells: exactly
/// `T::WIDTH / 4` digits, so that every pattern has one spelling and no width is guessed.
pub(super) fn bit_pattern<T: FloatBits>(text: &str, dtype: DType) -> Result<T, String> {
    let digits = &text[2..];
    let want = (T::WIDTH / 4) as usize;
    if digits.len() != want {
        return Err(format!(
            "the {dtype} bit pattern {text} has {} hex digits; {dtype} takes {want}, like {}",
            digits.len(),
            format_args!("0x{:0want$X}", T::CANONICAL_NAN)
        ));
    }
    u64::from_str_radix(digits, 16).map(T::from_bits).map_err(|_| format!("malformed number {text}"))
}

enum Lit {
    List(Vec<Lit>, Span),
    Scalar(Scalar, Span),
}

/// Checks the literal's nesting against the shape and collects its elements in row-major order.
fn flatten(lit: &Lit, shape: &[u64], dim: usize, out: &mut Vec<(Scalar, Span)>) -> Result<(), (String, Span)> {
    match lit {
        Lit::Scalar(s, span) if dim == shape.len() => {
            out.push((s.clone(), *span));
            Ok(())
        }
        Lit::Scalar(_, span) => Err((format!("expected a list for dimension {dim}, found a single element"), *span)),
        Lit::List(_, span) if dim == shape.len() => {
            Err((format!("expected a single element at depth {dim}, found a list"), *span))
        }
        Lit::List(items, span) => {
            if items.len() as u64 != shape[dim] {
                return Err((
                    format!("dimension {dim} has {} elements here but the shape says {}", items.len(), shape[dim]),
                    *span,
                ));
            }
            items.iter().try_for_each(|it| flatten(it, shape, dim + 1, out))
        }
    }
}

fn convert(dtype: DType, items: &[(Scalar, Span)]) -> Result<TensorData, (String, Span)> {
    fn float_of(s: &Scalar, span: Span, dtype: DType) -> Result<f64, (String, Span)> {
        match s {
            Scalar::Int(i) => Ok(*i as f64),
            Scalar::Float(f) => f.parse::<f64>().map_err(|_| (format!("malformed number {f}"), span)),
            Scalar::Hex(h) => Err((hex_not_float(h, dtype), span)),
            Scalar::Bool(_) => Err((format!("{dtype} literal holds a bool"), span)),
        }
    }
    /// Every element as `T`: ints checked against its range.
    fn ints<T: TryFrom<i128>>(items: &[(Scalar, Span)], dtype: DType) -> Result<Vec<T>, (String, Span)> {
        items
            .iter()
            .map(|(s, span)| match s {
                Scalar::Int(i) => T::try_from(*i).map_err(|_| (format!("number is out of range for {dtype}"), *span)),
                Scalar::Float(f) => Err((format!("{dtype} literal holds the non-integer {f}"), *span)),
                Scalar::Hex(h) => Err((hex_not_float(h, dtype), *span)),
                Scalar::Bool(_) => Err((format!("{dtype} literal holds a bool"), *span)),
            })
            .collect()
    }
    fn hex_not_float(h: &str, dtype: DType) -> String {
        format!("{dtype} literal holds the bit pattern {h}; bit patterns spell floats, integers are written in decimal")
    }
    /// Every element as a float of `dtype`: `parse` reads the text itself (going through f64
    /// could round twice), `from` converts an integer, a bit pattern is taken as it is and
    /// `nan` is the canonical NaN; out of range is an error, not inf.
    fn floats<T: FloatBits>(
        items: &[(Scalar, Span)],
        dtype: DType,
        parse: fn(&str) -> Option<T>,
        from: fn(f64) -> T,
        infinite: fn(&T) -> bool,
    ) -> Result<Vec<T>, (String, Span)> {
        items
            .iter()
            .map(|(s, span)| {
                let v = match s {
                    Scalar::Float(f) if f == "nan" => T::from_bits(T::CANONICAL_NAN),
                    Scalar::Float(f) => parse(f).ok_or_else(|| (format!("malformed number {f}"), *span))?,
                    Scalar::Hex(h) => return bit_pattern(h, dtype).map_err(|m| (m, *span)),
                    _ => from(float_of(s, *span, dtype)?),
                };
                if infinite(&v) && !matches!(s, Scalar::Float(f) if f.ends_with("inf")) {
                    return Err((format!("number is out of range for {dtype}"), *span));
                }
                Ok(v)
            })
            .collect()
    }
    Ok(match dtype {
        DType::F32 => TensorData::F32(floats(items, dtype, |t| t.parse().ok(), |v| v as f32, |v| v.is_infinite())?),
        DType::F64 => TensorData::F64(floats(items, dtype, |t| t.parse().ok(), |v| v, |v| v.is_infinite())?),
        // half rounds the f64 of the text to nearest-even: the one rounding that f32 text
        // parsing also makes (the f64 holds every decimal a 16-bit float prints as exactly).
        DType::F16 => TensorData::F16(floats(
            items,
            dtype,
            |t| t.parse::<f64>().ok().map(f16::from_f64),
            f16::from_f64,
            |v| v.is_infinite(),
        )?),
        DType::BF16 => TensorData::BF16(floats(
            items,
            dtype,
            |t| t.parse::<f64>().ok().map(bf16::from_f64),
            bf16::from_f64,
            |v| v.is_infinite(),
        )?),
        DType::I8 => TensorData::I8(ints(items, dtype)?),
        DType::I16 => TensorData::I16(ints(items, dtype)?),
        DType::I32 => TensorData::I32(ints(items, dtype)?),
        DType::I64 => TensorData::I64(ints(items, dtype)?),
        DType::U8 => TensorData::U8(ints(items, dtype)?),
        DType::U16 => TensorData::U16(ints(items, dtype)?),
        DType::U32 => TensorData::U32(ints(items, dtype)?),
        DType::U64 => TensorData::U64(ints(items, dtype)?),
        DType::Bool => TensorData::Bool(
            items
                .iter()
                .map(|(s, span)| match s {
                    Scalar::Bool(b) => Ok(*b),
                    _ => Err(("bool literal holds a number; write true or false".to_string(), *span)),
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}
