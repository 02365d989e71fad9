//! Reading a module: `.gir` text (parsed, type-checked and verified) or an `.onnx` model
//! (imported), from a file or standard input.

use super::report::{plural, Reported};
use graphc_ir::{diag::render_all, parse_module, print_module, verify_module, Diagnostic, Module, SourceFile};
use std::io::Read;
use std::path::Path;

pub fn is_onnx(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Why a file could not be loaded: its diagnostics (against `file`, where they have a place
/// in it), and the text that says so, rendered as [`load`] reports it.
#[derive(Debug)]
pub struct LoadFailure {
    /// The file as read; `None` for an ONNX model that did not import (it has no IR text).
    pub file: Option<SourceFile>,
    pub diagnostics: Vec<Diagnostic>,
    pub rendered: String,
}

impl From<LoadFailure> for Reported {
    fn from(f: LoadFailure) -> Reported {
        Reported(f.rendered)
    }
}

/// Reads a file (or stdin for `-`), parses and verifies it. An `.onnx` file is imported with
/// `options` (its text is the printed IR, for locating run-time errors). A failure is
/// [`Reported`]: every diagnostic, rendered against the source.
pub fn load(path: &Path, options: &graphc_onnx::ImportOptions) -> Result<(SourceFile, Module), Reported> {
    load_diagnosed(path, options).map_err(Reported::from)
}

/// [`load`], a failure with its diagnostics as they are (`graphc check --json` lists them).
pub fn load_diagnosed(path: &Path, options: &graphc_onnx::ImportOptions) -> Result<(SourceFile, Module), LoadFailure> {
    let started = std::time::Instant::now();
    let loaded = read_and_verify(path, options);
    if let Ok((file, m)) = &loaded {
        let nodes: usize = m.graphs.iter().map(|g| g.node_count()).sum();
        let what = if is_onnx(path) { "imported" } else { "parsed and verified" };
        let graphs = m.graphs.len();
        tracing::info!(
            "{what} {} ({graphs} graph{}, {nodes} node{}) in {:.3} ms",
            file.name,
            plural(graphs),
            plural(nodes),
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    loaded
}

fn read_and_verify(path: &Path, options: &graphc_onnx::ImportOptions) -> Result<(SourceFile, Module), LoadFailure> {
    // A device or FIFO would be read forever (or block the open); refused before reading.
    if let Some(m) = std::fs::metadata(path).ok().filter(|_| path != Path::new("-")) {
        if !m.is_file() {
            let kind = graphc_runtime::fsutil::file_kind(m.file_type());
            let d = Diagnostic::error_unlocated(format!("cannot read the file: it is {kind}, not a regular file"));
            let file = SourceFile::new(path.display().to_string(), "");
            let rendered = d.render(&file);
            return Err(LoadFailure { file: Some(file), diagnostics: vec![d], rendered });
        }
    }
    if is_onnx(path) {
        return match graphc_onnx::import_file(path, options) {
            Ok(m) => Ok((SourceFile::new(path.display().to_string(), print_module(&m)), m)),
            Err(e) => {
                let d = Diagnostic::error_unlocated(e.to_string());
                Err(LoadFailure { file: None, rendered: format!("error: {e}\n"), diagnostics: vec![d] })
            }
        };
    }
    let (file, parsed) = if path == Path::new("-") {
        let mut bytes = Vec::new();
        let read = std::io::stdin().read_to_end(&mut bytes);
        let file = SourceFile::new("<stdin>", String::from_utf8_lossy(&bytes).into_owned());
        match (read, String::from_utf8(bytes)) {
            (Err(e), _) => (file, Err(vec![Diagnostic::error_unlocated(format!("cannot read standard input: {e}"))])),
            (Ok(_), Err(_)) => (file, Err(vec![Diagnostic::error_unlocated("standard input is not UTF-8 text")])),
            (Ok(_), Ok(text)) => {
                let r = parse_module(&text);
                (file, r)
            }
        }
    } else {
        graphc_ir::parse_file(path)
    };
    // The parser type-checks as it builds; the verifier re-checks the whole module, so a
    // disagreement between the two surfaces here rather than in a later pass.
    let parsed = parsed.and_then(|m| {
        let d = verify_module(&m);
        if d.is_empty() {
            Ok(m)
        } else {
            Err(d)
        }
    });
    match parsed {
        Ok(m) => Ok((file, m)),
        Err(diags) => {
            let n = diags.len();
            let rendered =
                format!("{}{}: {n} error{}\n", render_all(&diags, &file), file.name, if n == 1 { "" } else { "s" });
            Err(LoadFailure { file: Some(file), diagnostics: diags, rendered })
        }
    }
}

/// For an ONNX model: the inputs given on the command line (`NAME=PATH.npy`), which the
/// importer may need as constants (shapes, axes, slice bounds, a Range's float bounds); it
/// uses one only where it needs a constant, so the graph keeps every other input as an input.
/// Unreadable files are reported later, when the inputs are fed. The fed arrays' shapes give
/// the model's symbolic dims their sizes (the model is specialized to what it runs on), as
/// `--shape DIM=N` does.
pub fn import_options_for(
    model: &Path,
    input_flags: &[String],
    shape_flags: &[String],
) -> anyhow::Result<graphc_onnx::ImportOptions> {
    let mut options = graphc_onnx::ImportOptions::default();
    for s in shape_flags {
        let (dim, size) = s
            .split_once('=')
            .and_then(|(d, n)| Some((d, n.parse::<u64>().ok()?)))
            .filter(|(d, _)| !d.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--shape '{s}' is not of the form DIM=SIZE"))?;
        options.dims.insert(dim.to_string(), size);
    }
    if !is_onnx(model) {
        if let Some(s) = shape_flags.first() {
            anyhow::bail!("--shape {s}: only an ONNX model's inputs have symbolic dims");
        }
        return Ok(options);
    }
    for flag in input_flags {
        if let Some((name, path)) = flag.split_once('=') {
            // The header gives the shape; only a small array's values are read here (a large
            // one is read, against the memory limit, with the feeds).
            if let Ok(f) = graphc_runtime::npy::NpyFile::open(Path::new(path)) {
                let ty = f.ty();
                options.input_shapes.insert(name.to_string(), ty.shape.clone());
                if ty.num_elements().is_some_and(|n| n <= 1 << 16) {
                    if let Ok(t) = f.read() {
                        options.known_inputs.insert(name.to_string(), t);
                    }
                }
            }
        }
    }
    Ok(options)
}
