//! The parser: text to a [`Module`], type-checking each node as it is built. It recovers at
//! line boundaries after an error, so one run reports every independent error in a file.
//!
//! One `Parser` walks the tokens; each submodule adds the methods for one part of the
//! grammar. They call one another as the grammar nests (a region holds statements, a
//! statement holds regions), but import only from here.

mod attrs;
mod cursor;
mod literal;
mod module;
mod node;
mod region;
mod types;
mod values;

use crate::diag::{Diagnostic, Span};
use crate::graph::{Graph, Module, Region, Value};
use crate::lexer::{lex, Comment, Token};
use crate::weights_file::WeightsFile;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Regions nest at most this deep; deeper input is rejected rather than risking the stack.
pub const MAX_REGION_DEPTH: usize = 64;
/// Tensor literals nest at most this deep (a rank limit for literals).
pub const MAX_LITERAL_DEPTH: usize = 32;
/// After this many errors the parser stops: the rest would mostly be noise.
pub const MAX_ERRORS: usize = 50;

/// Parses and type-checks a module; the weights files its literals name are resolved against
/// the current directory. On failure, every diagnostic found, in source order.
pub fn parse_module(text: &str) -> Result<Module, Vec<Diagnostic>> {
    parse_module_in(text, Path::new("."))
}

/// [`parse_module`] for the text of a file in `dir`, against which weights files are resolved.
pub fn parse_module_in(text: &str, dir: &Path) -> Result<Module, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let (toks, comments) = lex(text, &mut diags);
    let mut p = Parser {
        toks,
        pos: 0,
        diags,
        stopped: false,
        comments,
        next_comment: 0,
        dir: dir.to_path_buf(),
        weights_files: HashMap::new(),
    };
    let module = p.module();
    let mut diags = p.diags;
    if diags.is_empty() {
        diags.extend(crate::verify::check_module_links(&module));
    }
    if diags.is_empty() {
        Ok(module)
    } else {
        diags.sort_by_key(|d| d.span.map_or(0, |s| s.start));
        if diags.len() > MAX_ERRORS {
            diags.truncate(MAX_ERRORS);
            diags.push(Diagnostic::error_unlocated(format!("too many errors; stopped after {MAX_ERRORS}")));
        }
        Err(diags)
    }
}

/// A value's spelling in the text: `%x` or `%3`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Name(String),
    Num(u64),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Name(n) if crate::graph::is_plain_name(n) => write!(f, "%{n}"),
            Key::Name(n) => write!(f, "%{n:?}"),
            Key::Num(n) => write!(f, "%{n}"),
        }
    }
}

/// A definition seen so far in the current graph; `value` is `None` when the statement that
/// defined it failed (uses of it are then skipped silently, to avoid cascades).
struct Def {
    value: Option<Value>,
    region: Region,
    span: Span,
}

struct GraphCtx {
    g: Graph,
    defs: HashMap<Key, Def>,
    /// Uses that found no definition: (key, diagnostic index), revisited at the graph's end to
    /// tell "used before its definition" from "undefined".
    undefined: Vec<(Key, usize)>,
    /// Set when the graph's header failed: its inputs are unknown, so undefined names are not
    /// reported again.
    lenient: bool,
}

/// Error already reported; the caller recovers.
struct Reported;
type PResult<T> = Result<T, Reported>;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    stopped: bool,
    comments: Vec<Comment>,
    next_comment: usize,
    /// The module's directory, which weights files are named relative to.
    dir: PathBuf,
    /// Each weights file named so far, by its path as written: opened once per parse, and a
    /// file that failed reported once (`None` after).
    weights_files: HashMap<String, Option<Arc<WeightsFile>>>,
}

/// A parsed operand reference: the value, or `None` if it refers to a failed definition.
type Operand = (Option<Value>, Span);
