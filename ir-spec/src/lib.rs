//! graphc-ir: the graphc dataflow-graph IR — types, the op table, the text parser and printer,
//! the verifier with shape inference, and diagnostics. It knows no code generator and no
//! runtime; `SPEC.md` beside this crate is its contract in prose.
//!
//! The text form round-trips: `print(parse(text)) == text` for canonical text, and
//! `parse(print(g))` is structurally equal to `g` (see [`equiv`]).

pub mod attr;
pub mod device;
pub mod diag;
pub mod elements;
pub mod equiv;
pub mod graph;
pub mod infer;
pub mod lexer;
mod opdef;
pub mod ops;
pub mod parser;
pub mod printer;
mod rules;
pub mod shape;
pub mod spec_doc;
pub mod suggest;
pub mod topo;
pub mod types;
pub mod verify;
pub mod weights;
pub mod weights_file;
pub mod window;

pub use attr::{bf16, f16, Attr, AttrKind, Attrs, TensorData, TensorLiteral};
pub use device::{DeviceKind, DeviceSpec};
pub use diag::{Diagnostic, Severity, SourceFile, Span};
pub use graph::{Graph, Module, Node, NodeSpec, Region, Use, Value, ValueDef};
pub use ops::{Cost, Gradient, Op, OpDef, OpKind, RegionFlow};
pub use parser::{parse_module, parse_module_in};
pub use printer::{print_graph, print_module};
pub use types::{DType, TensorType, Type};
pub use verify::{verify_graph, verify_module};

/// Reads and parses a `.gir` file (weights files resolved against its directory). A file that
/// cannot be read or is not UTF-8 gives one unlocated diagnostic naming the problem.
pub fn parse_file(path: &std::path::Path) -> (SourceFile, Result<Module, Vec<Diagnostic>>) {
    let name = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            return (
                SourceFile::new(name, ""),
                Err(vec![Diagnostic::error_unlocated(format!("cannot read the file: {e}"))]),
            )
        }
    };
    match String::from_utf8(bytes) {
        Ok(text) => {
            let result = parse_module_in(&text, weights::module_dir(path));
            (SourceFile::new(name, text), result)
        }
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let file = SourceFile::new(name, text);
            let (line, col) = file.line_col(at);
            let d = Diagnostic::error_unlocated(format!("the file is not UTF-8 text: invalid byte at line {line}, column {col} (byte offset {at}); .gir files are UTF-8"));
            (file, Err(vec![d]))
        }
    }
}
