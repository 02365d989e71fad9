//! The lexer: source text to tokens with spans. Bad characters and unterminated strings become
//! diagnostics and are skipped, so the parser still sees the rest of the file.

use crate::diag::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// Keywords, op names, dtypes, attribute names, region labels.
    Ident(String),
    /// `%x`, `%"any text"`: a named value.
    ValueName(String),
    /// `%3`: a numbered (unnamed) value.
    ValueNum(u64),
    /// `@name` or `@"any text"`: a graph name.
    Global(String),
    /// An integer literal, sign included.
    /// An integer literal: any value of a 64-bit integer type, signed or unsigned.
    Int(i128),
    /// A float literal as written (sign included), converted once its dtype is known.
    Float(String),
    /// A float's bit pattern as written, `0x` and hex digits (`0x7FC00001`), checked against
    /// the width of its dtype once that is known.
    Hex(String),
    Str(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Less,
    Greater,
    Comma,
    Colon,
    Equals,
    Arrow,
    Minus,
    Eof,
}

impl Tok {
    /// How the token reads in "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("'{s}'"),
            Tok::ValueName(s) => format!("value %{s}"),
            Tok::ValueNum(n) => format!("value %{n}"),
            Tok::Global(s) => format!("@{s}"),
            Tok::Int(i) => format!("number {i}"),
            Tok::Float(f) | Tok::Hex(f) => format!("number {f}"),
            Tok::Str(_) => "a string".into(),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
            Tok::LBracket => "'['".into(),
            Tok::RBracket => "']'".into(),
            Tok::Less => "'<'".into(),
            Tok::Greater => "'>'".into(),
            Tok::Comma => "','".into(),
            Tok::Colon => "':'".into(),
            Tok::Equals => "'='".into(),
            Tok::Arrow => "'->'".into(),
            Tok::Minus => "'-'".into(),
            Tok::Eof => "the end of the file".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
    /// True when the token is the first on its line (the parser resynchronizes there).
    pub line_start: bool,
}

/// A `//` comment: where it starts and its text after the slashes, trailing spaces trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct Comment {
    pub start: usize,
    pub text: String,
}

/// Splits text into tokens (ending with `Eof`) and comments.
pub fn lex(text: &str, diags: &mut Vec<Diagnostic>) -> (Vec<Token>, Vec<Comment>) {
    let mut lx =
        Lexer { src: text.as_bytes(), text, pos: 0, toks: Vec::new(), comments: Vec::new(), diags, line_start: true };
    lx.run();
    (lx.toks, lx.comments)
}

struct Lexer<'a, 'd> {
    src: &'a [u8],
    text: &'a str,
    pos: usize,
    toks: Vec<Token>,
    comments: Vec<Comment>,
    diags: &'d mut Vec<Diagnostic>,
    line_start: bool,
}

/// Bytes of non-ASCII characters count as identifier bytes, so `négatif` reads as one
/// (unknown) word rather than three pieces; such names print quoted.
fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b >= 0x80
}

impl Lexer<'_, '_> {
    fn peek(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    fn push(&mut self, tok: Tok, start: usize) {
        self.toks.push(Token { tok, span: Span::new(start, self.pos), line_start: self.line_start });
        self.line_start = false;
    }

    fn error(&mut self, start: usize, end: usize, msg: impl Into<String>) {
        self.diags.push(Diagnostic::error(Span::new(start, end), msg));
    }

    fn run(&mut self) {
        while self.pos < self.src.len() {
            let start = self.pos;
            let b = self.src[self.pos];
            match b {
                b'\n' => {
                    self.pos += 1;
                    self.line_start = true;
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'/' if self.peek(1) == b'/' => {
                    while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                    let text = self.text[start + 2..self.pos].trim_end().to_string();
                    self.comments.push(Comment { start, text });
                }
                b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'<' | b'>' | b',' | b':' | b'=' => {
                    self.pos += 1;
                    let t = match b {
                        b'(' => Tok::LParen,
                        b')' => Tok::RParen,
                        b'{' => Tok::LBrace,
                        b'}' => Tok::RBrace,
                        b'[' => Tok::LBracket,
                        b']' => Tok::RBracket,
                        b'<' => Tok::Less,
                        b'>' => Tok::Greater,
                        b',' => Tok::Comma,
                        b':' => Tok::Colon,
                        _ => Tok::Equals,
                    };
                    self.push(t, start);
                }
                b'-' if self.peek(1) == b'>' => {
                    self.pos += 2;
                    self.push(Tok::Arrow, start);
                }
                b'-' if self.peek(1).is_ascii_digit() => self.number(start),
                b'-' => {
                    self.pos += 1;
                    self.push(Tok::Minus, start);
                }
                b'0'..=b'9' => self.number(start),
                b'"' => {
                    if let Some(s) = self.string() {
                        self.push(Tok::Str(s), start);
                    }
                }
                b'%' | b'@' => self.sigil(start, b),
                _ if is_ident_start(b) => {
                    let s = self.ident();
                    self.push(Tok::Ident(s), start);
                }
                _ => {
                    let ch = self.text[start..].chars().next().unwrap_or('\u{fffd}');
                    self.pos += ch.len_utf8().max(1);
                    let shown = if ch.is_control() { format!("U+{:04X}", ch as u32) } else { format!("'{ch}'") };
                    self.error(start, self.pos, format!("unexpected character {shown}"));
                }
            }
        }
        let end = self.src.len();
        self.toks.push(Token { tok: Tok::Eof, span: Span::new(end, end), line_start: true });
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self.pos < self.src.len() && is_ident_char(self.src[self.pos]) {
            self.pos += 1;
        }
        self.text[start..self.pos].to_string()
    }

    fn sigil(&mut self, start: usize, sigil: u8) {
        self.pos += 1;
        let b = self.peek(0);
        let name = if b == b'"' {
            match self.string() {
                Some(s) if !s.is_empty() => s,
                Some(_) => return self.error(start, self.pos, "a quoted name must not be empty"),
                None => return,
            }
        } else if sigil == b'%' && b.is_ascii_digit() {
            let ds = self.pos;
            while self.peek(0).is_ascii_digit() {
                self.pos += 1;
            }
            if is_ident_char(self.peek(0)) {
                while is_ident_char(self.peek(0)) {
                    self.pos += 1;
                }
                return self.error(
                    start,
                    self.pos,
                    format!(
                        "'{}' is not a value name: names start with a letter or '_', numbers are all digits",
                        &self.text[start..self.pos]
                    ),
                );
            }
            match self.text[ds..self.pos].parse::<u64>() {
                Ok(n) => return self.push(Tok::ValueNum(n), start),
                Err(_) => return self.error(start, self.pos, "value number is too large"),
            }
        } else if is_ident_start(b) {
            self.ident()
        } else {
            let what = if sigil == b'%' { "value" } else { "graph" };
            return self.error(
                start,
                self.pos,
                format!(
                    "expected a {what} name after '{}', like {}x or {}\"x\"",
                    sigil as char, sigil as char, sigil as char
                ),
            );
        };
        self.push(if sigil == b'%' { Tok::ValueName(name) } else { Tok::Global(name) }, start);
    }

    fn number(&mut self, start: usize) {
        if self.peek(0) == b'-' {
            self.pos += 1;
        }
        if self.peek(0) == b'0' && self.peek(1) == b'x' {
            return self.hex(start);
        }
        let mut is_float = false;
        while self.peek(0).is_ascii_digit() {
            self.pos += 1;
        }
        if self.peek(0) == b'.' && self.peek(1).is_ascii_digit() {
            is_float = true;
            self.pos += 1;
            while self.peek(0).is_ascii_digit() {
                self.pos += 1;
            }
        }
        if matches!(self.peek(0), b'e' | b'E') {
            let sign = usize::from(matches!(self.peek(1), b'+' | b'-'));
            if self.peek(1 + sign).is_ascii_digit() {
                is_float = true;
                self.pos += 1 + sign;
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
            }
        }
        if is_ident_char(self.peek(0)) {
            while is_ident_char(self.peek(0)) {
                self.pos += 1;
            }
            return self.error(start, self.pos, format!("malformed number '{}'", &self.text[start..self.pos]));
        }
        let text = &self.text[start..self.pos];
        if is_float {
            self.push(Tok::Float(text.to_string()), start);
        } else {
            match text.parse::<i128>().ok().filter(|&i| i >= i64::MIN as i128 && i <= u64::MAX as i128) {
                Some(i) => self.push(Tok::Int(i), start),
                None => {
                    self.error(start, self.pos, format!("integer {text} does not fit in 64 bits"));
                    // A stand-in keeps the parser from reporting the same token again.
                    self.push(Tok::Int(i64::MAX as i128), start);
                }
            }
        }
    }

    /// A bit pattern, `0x` and hex digits, at `pos` (on the `0`); `start` is on its sign if
    /// it has one, which is an error: the sign is the pattern's top bit.
    fn hex(&mut self, start: usize) {
        self.pos += 2;
        while self.peek(0).is_ascii_hexdigit() {
            self.pos += 1;
        }
        let digits = self.pos - start - 2 - usize::from(self.src[start] == b'-');
        if is_ident_char(self.peek(0)) || digits == 0 {
            while is_ident_char(self.peek(0)) {
                self.pos += 1;
            }
            return self.error(start, self.pos, format!("malformed number '{}'", &self.text[start..self.pos]));
        }
        let text = &self.text[start..self.pos];
        if let Some(unsigned) = text.strip_prefix('-') {
            self.error(
                start,
                self.pos,
                format!(
                    "'{text}': a bit pattern has no sign; its top bit is the float's sign (0xBF800000 is -1.0 in f32)"
                ),
            );
            // The pattern without its sign stands in, so the parser does not report it again.
            return self.push(Tok::Hex(unsigned.to_string()), start);
        }
        self.push(Tok::Hex(text.to_string()), start);
    }

    /// Reads a string literal at `pos` (on the opening quote); `None` after reporting an error.
    fn string(&mut self) -> Option<String> {
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.pos..].chars().next() else {
                self.error(start, self.pos, "unterminated string: add the closing '\"'");
                return None;
            };
            match c {
                '"' => {
                    self.pos += 1;
                    return Some(out);
                }
                '\n' => {
                    self.error(
                        start,
                        self.pos,
                        "unterminated string: strings end on the line they start; write '\\n' for a newline",
                    );
                    return None;
                }
                '\\' => {
                    let esc_start = self.pos;
                    self.pos += 1;
                    let Some(e) = self.text[self.pos..].chars().next() else {
                        self.error(start, self.pos, "unterminated string: add the closing '\"'");
                        return None;
                    };
                    self.pos += e.len_utf8();
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'u' if self.peek(0) == b'{' => {
                            let close = self.text[self.pos..].find('}').filter(|&i| i <= 7);
                            let ch = close
                                .and_then(|i| u32::from_str_radix(&self.text[self.pos + 1..self.pos + i], 16).ok())
                                .and_then(char::from_u32);
                            match (close, ch) {
                                (Some(i), Some(ch)) => {
                                    out.push(ch);
                                    self.pos += i + 1;
                                }
                                _ => self.error(
                                    esc_start,
                                    self.pos,
                                    "bad unicode escape: write \\u{XXXX} with 1 to 6 hex digits",
                                ),
                            }
                        }
                        _ => self.error(esc_start, self.pos, "unknown escape; use \\\", \\\\, \\n, \\t or \\u{XXXX}"),
                    }
                }
                c => {
                    out.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        let mut d = Vec::new();
        let (t, _) = lex(s, &mut d);
        assert!(d.is_empty(), "{d:?}");
        t.into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens() {
        assert_eq!(
            toks("%x %3 @g -> -1 2.5e-3 \"a\\\"b\" f32 // c\n}"),
            vec![
                Tok::ValueName("x".into()),
                Tok::ValueNum(3),
                Tok::Global("g".into()),
                Tok::Arrow,
                Tok::Int(-1),
                Tok::Float("2.5e-3".into()),
                Tok::Str("a\"b".into()),
                Tok::Ident("f32".into()),
                Tok::RBrace,
                Tok::Eof
            ]
        );
        assert_eq!(toks("%\"a b\""), vec![Tok::ValueName("a b".into()), Tok::Eof]);
    }

    #[test]
    fn a_backslash_at_the_end_is_an_unterminated_string() {
        let mut d = Vec::new();
        lex("\"abc\\", &mut d);
        assert_eq!(d.len(), 1);
        assert!(d[0].message.starts_with("unterminated string"));
    }

    #[test]
    fn errors_do_not_stop_lexing() {
        let mut d = Vec::new();
        let (t, _) = lex("$ %x \"open\n%y 99999999999999999999", &mut d);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(t.iter().any(|t| t.tok == Tok::ValueName("y".into())));
    }
}
