//! Diagnostics: located errors rendered as `FILE:LINE:COL: error: message`, the source line
//! and a caret under the offending text.

use std::fmt;

/// A byte range in one source file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start: start as u32, end: end.max(start) as u32 }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl Severity {
    fn word(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One diagnostic: a message at a span, with secondary located notes and free-text help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    pub span: Option<Span>,
    /// Located notes, e.g. "previous definition is here".
    pub notes: Vec<(Span, String)>,
    /// Unlocated advice, printed as `help: ...`.
    pub help: Vec<String>,
}

impl Diagnostic {
    pub fn error(span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span: Some(span),
            notes: Vec::new(),
            help: Vec::new(),
        }
    }

    pub fn warning(span: Span, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(span, message) }
    }

    /// An error about the file as a whole (unreadable, not UTF-8, ...).
    pub fn error_unlocated(message: impl Into<String>) -> Self {
        Diagnostic { span: None, ..Diagnostic::error(Span::default(), message) }
    }

    pub fn with_note(mut self, span: Span, note: impl Into<String>) -> Self {
        self.notes.push((span, note.into()));
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// The message with its notes and help on one line, for where no source text is at hand.
    pub fn flat_message(&self) -> String {
        let mut s = self.message.clone();
        for (_, n) in &self.notes {
            s.push_str(&format!("; note: {n}"));
        }
        for h in &self.help {
            s.push_str(&format!("; help: {h}"));
        }
        s
    }

    /// Renders the diagnostic against the file it refers to.
    pub fn render(&self, file: &SourceFile) -> String {
        let mut out = String::new();
        file.render_located(&mut out, self.severity.word(), self.span, &self.message);
        for (span, note) in &self.notes {
            file.render_located(&mut out, "note", Some(*span), note);
        }
        for h in &self.help {
            out.push_str("help: ");
            out.push_str(h);
            out.push('\n');
        }
        out
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity.word(), self.message)
    }
}

/// A source file: its name for diagnostics, its text, and where each line starts.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
    line_starts: Vec<usize>,
}

/// Longest stretch of a source line shown under a diagnostic; longer lines are cut around the
/// column so a one-line megabyte file still gives a readable message.
const MAX_SHOWN: usize = 100;

impl SourceFile {
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile { name: name.into(), text, line_starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let col = self.text[start..floor_char_boundary(&self.text, offset)].chars().count() + 1;
        (line + 1, col)
    }

    fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts[line - 1];
        let end = self.line_starts.get(line).map_or(self.text.len(), |&e| e - 1);
        self.text[start..end].trim_end_matches('\r')
    }

    fn render_located(&self, out: &mut String, word: &str, span: Option<Span>, message: &str) {
        use std::fmt::Write;
        let Some(span) = span else {
            let _ = writeln!(out, "{}: {word}: {message}", self.name);
            return;
        };
        let (line, col) = self.line_col(span.start as usize);
        let _ = writeln!(out, "{}:{line}:{col}: {word}: {message}", self.name);
        // Tabs show as one space and other control characters as '?', so the caret lines up.
        let chars: Vec<char> = self
            .line_text(line)
            .chars()
            .map(|c| {
                if c == '\t' {
                    ' '
                } else if c.is_control() {
                    '?'
                } else {
                    c
                }
            })
            .collect();
        // Caret length: the span's characters on this line, at least one.
        let (end_line, end_col) = self.line_col(span.end as usize);
        let len = if end_line == line {
            end_col.saturating_sub(col).max(1)
        } else {
            chars.len().saturating_sub(col - 1).max(1)
        };
        let first = (col - 1).saturating_sub(MAX_SHOWN / 2).min(chars.len());
        let last = chars.len().min(first + MAX_SHOWN);
        let shown: String = chars[first..last].iter().collect();
        let gutter = line.to_string().len();
        let lead = if first > 0 { "..." } else { "" };
        let _ = writeln!(out, "{:>gutter$} | {lead}{shown}{}", line, if last < chars.len() { "..." } else { "" });
        let caret_at = col - 1 - first + lead.len();
        let caret_len = len.min(MAX_SHOWN.saturating_sub(caret_at - lead.len()).max(1));
        let _ = writeln!(out, "{:>gutter$} | {}{}", "", " ".repeat(caret_at), "^".repeat(caret_len));
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Renders every diagnostic, in order.
pub fn render_all(diags: &[Diagnostic], file: &SourceFile) -> String {
    diags.iter().map(|d| d.render(file)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_location_line_and_caret() {
        let f = SourceFile::new("m.gir", "graph @g() -> () {\n  %0 = matmull %a\n}\n");
        let start = f.text.find("matmull").unwrap();
        let d =
            Diagnostic::error(Span::new(start, start + 7), "unknown op 'matmull'").with_help("did you mean 'matmul'?");
        assert_eq!(
            d.render(&f),
            "m.gir:2:8: error: unknown op 'matmull'\n2 |   %0 = matmull %a\n  |        ^^^^^^^\nhelp: did you mean 'matmul'?\n"
        );
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let text = format!("{}BAD{}", "a".repeat(5000), "b".repeat(5000));
        let f = SourceFile::new("x", text);
        let d = Diagnostic::error(Span::new(5000, 5003), "bad");
        let r = d.render(&f);
        assert!(r.starts_with("x:1:5001: error: bad\n"));
        assert!(r.lines().all(|l| l.len() < 2 * MAX_SHOWN), "{r}");
        let src = r.lines().nth(1).unwrap();
        let caret = r.lines().nth(2).unwrap();
        let at = caret.find('^').unwrap();
        assert_eq!(&src[at..at + 3], "BAD");
    }

    #[test]
    fn offsets_past_the_end_clamp() {
        let f = SourceFile::new("x", "ab");
        assert_eq!(f.line_col(10), (1, 3));
        let f = SourceFile::new("x", "");
        assert!(Diagnostic::error(Span::new(0, 0), "empty").render(&f).starts_with("x:1:1: error: empty"));
    }
}
