//! Writing a module's weights beside its text: `graphc import` and `graphc opt -o OUT` put
//! each literal of more than `graphc_ir::weights::STORED_ABOVE` elements in
//! `OUT.weights.safetensors` (written first, atomically), which the text then names; small
//! literals and splats stay in the text. Standard output, or `--inline-weights`, gets every
//! literal in the text (there is no "beside" a pipe).

use graphc_ir::weights::{self, Stored};
use graphc_ir::weights_file::check_path;
use graphc_ir::Module;
use graphc_runtime::fsutil;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The weights file written with the module's text at `out` (none for standard output or
/// with `inline`): for the check that it replaces no file the command reads.
pub fn weights_output(out: Option<&Path>, inline: bool) -> Option<PathBuf> {
    out.filter(|o| o.as_os_str() != "-" && !inline).map(weights::weights_path)
}

/// Makes `m` ready to be printed to `out` (`None` or `-`: standard output): its large
/// literals written to the weights file beside `out` and referred to by name, the rest in the
/// text; with `inline` (or no file) every literal in the text.
pub fn place_weights(m: &mut Module, out: Option<&Path>, inline: bool) -> anyhow::Result<()> {
    let Some(path) = weights_output(out, inline) else {
        return weights::into_text(m).map_err(|e| anyhow::anyhow!(e));
    };
    let stored = Stored::plan(m);
    if stored.is_empty() {
        return weights::into_text(m).map_err(|e| anyhow::anyhow!(e));
    }
    // The text names the file by its name alone: it is in the text's directory.
    let name = path.file_name().and_then(|n| n.to_str()).filter(|n| check_path(n).is_ok()).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: the weights file beside it would be {}, a name the text cannot hold (not UTF-8, or with a backslash); \
             give -o another name, or --inline-weights",
            out.map_or(String::new(), |o| o.display().to_string()),
            path.display()
        )
    })?;
    fsutil::write_atomically(&path, |f| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        stored.write(m, &mut w)?;
        w.flush()
    })
    .map_err(|e| anyhow::anyhow!("cannot write the weights file {}: {e}", path.display()))?;
    stored.refer(m, weights::module_dir(&path), name).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
